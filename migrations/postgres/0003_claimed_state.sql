-- Run states say what is true (as SQLite's 0021): a run a node has taken but not started is
-- `claimed` (its node and `claimed_at` set, no start time); `running` means started. The
-- partial index of running runs becomes the index of runs in flight, its predicate written
-- exactly as the queries write it.
ALTER TABLE job_run DROP CONSTRAINT job_run_status_check;
ALTER TABLE job_run ADD CONSTRAINT job_run_status_check
    CHECK (status IN ('queued', 'claimed', 'running', 'succeeded', 'failed', 'timed_out',
                      'skipped', 'dead', 'cancelled'));
ALTER TABLE job_run ADD COLUMN claimed_at bigint;  -- epoch ms: when a node claimed it
UPDATE job_run SET claimed_at = started_at WHERE status = 'running';
DROP INDEX job_run_running_job_idx;
CREATE INDEX job_run_running_job_idx ON job_run (job_id)
    WHERE (status = 'claimed' OR status = 'running');
