-- How many runs a processor claims beyond its free instances; NULL: sized from the durations
-- its runs measured (none before a run was measured, none for runs over a second).
ALTER TABLE job_processor ADD COLUMN prefetch bigint CHECK (prefetch IS NULL OR prefetch >= 0);
