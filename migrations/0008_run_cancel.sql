-- An operator's request to cancel a run that is executing: the cancel bumps the generation, the
-- node that runs the run sees it at its next catalog check, cancels the run (a command's process
-- group is killed) and records it `cancelled`. Queued runs are cancelled at once and never need
-- the flag.
ALTER TABLE job_run ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
