-- Keep run history from slowing the hot path: the claim's "what is running" and the scheduler's
-- "what is queued" questions read small partial indexes instead of scanning job_run.
CREATE INDEX job_run_running_job_idx ON job_run (job_id) WHERE status = 'running';
CREATE INDEX job_run_queued_job_idx ON job_run (job_id) WHERE status = 'queued';
