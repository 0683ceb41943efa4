-- Priority aging (as SQLite's 0027): ms a queued run of the job waits per point of priority
-- it gains (NULL: never), and the priority an aged run was queued with.
ALTER TABLE job ADD COLUMN aging bigint CHECK (aging IS NULL OR aging > 0);
ALTER TABLE job_run ADD COLUMN aged_from bigint;
