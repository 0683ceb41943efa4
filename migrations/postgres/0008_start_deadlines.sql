-- Start deadlines (as SQLite's 0026): a job may say its runs must start within some time of
-- becoming due (`start_within`, ms), and a run may carry a deadline of its own (`start_by`,
-- epoch ms); a run not started by its deadline ends `expired`, not failed. The decision log
-- records the operator's pauses and resumes.
ALTER TABLE job ADD COLUMN start_within bigint CHECK (start_within IS NULL OR start_within > 0);
ALTER TABLE job_run ADD COLUMN start_by bigint;
-- The queued runs with a deadline of their own, for the sweep that expires those no node
-- claims (their processor paused or running nowhere).
CREATE INDEX job_run_start_by_idx ON job_run (start_by) WHERE status = 'queued' AND start_by IS NOT NULL;
ALTER TABLE job_run DROP CONSTRAINT job_run_status_check;
ALTER TABLE job_run ADD CONSTRAINT job_run_status_check
    CHECK (status IN ('queued', 'claimed', 'running', 'succeeded', 'failed', 'timed_out',
                      'skipped', 'dead', 'cancelled', 'expired'));
ALTER TABLE decision DROP CONSTRAINT decision_action_check;
ALTER TABLE decision ADD CONSTRAINT decision_action_check
    CHECK (action IN ('activate', 'deactivate', 'stretch', 'unstretch', 'hold', 'add_instance',
                      'remove_instance', 'pause_writes', 'resume_writes', 'pause', 'resume'));
