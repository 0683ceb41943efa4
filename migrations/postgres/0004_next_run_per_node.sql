-- When a job runs next, kept per node beside the activation state (SQLite migration 0022 says
-- why); `job.next_run_at`, which nothing wrote, goes.
ALTER TABLE job_activation ADD COLUMN next_run_at bigint;  -- epoch ms
DROP INDEX job_next_run_idx;
ALTER TABLE job DROP COLUMN next_run_at;
