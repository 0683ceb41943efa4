-- The index of runs with a deadline of their own no longer names `status` in its predicate:
-- SQLite maintains a partial index in every statement that writes a column its predicate reads,
-- so each claim and each completion opened it and tested the predicate, old row and new, for
-- every run (2 % of a claim's instructions and 4 % of a completion's, measured with callgrind
-- on the claim and completion loop of examples/bench.rs `sql`). Neither writes
-- `start_by`, so neither touches this one; the sweep that expires overdue queued runs checks
-- their status itself and clears the deadline of the runs that ended, which keeps the index
-- to the runs that may still need it.
DROP INDEX job_run_start_by_idx;
CREATE INDEX job_run_start_by_idx ON job_run (start_by) WHERE start_by IS NOT NULL;
