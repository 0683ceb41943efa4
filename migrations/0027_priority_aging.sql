-- Priority aging (issue 29): a job may say how long a queued run of it waits per point of
-- priority it gains (`aging`, ms; NULL: its runs never age), so that a steady stream of more
-- important work cannot starve it; a run that aged keeps the priority it was queued with
-- (`aged_from`), which `runs show`, the API and the UI state beside the one it has now.
ALTER TABLE job ADD COLUMN aging INTEGER CHECK (aging IS NULL OR aging > 0);
ALTER TABLE job_run ADD COLUMN aged_from INTEGER;
DROP TRIGGER job_def_update;
CREATE TRIGGER job_def_update AFTER UPDATE OF
    job_name, processor_id, job_group_id, job_type_id, job_payload, timeout, run_always,
    run_delay, run_every, run_on_the, run_at, run_date, cron, timezone, misfire_policy,
    misfire_window, max_catchup, overlap_policy, max_overlap, max_attempts, backoff_base,
    backoff_max, priority, required, status, stretch_max, start_within, aging ON job
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
