-- What the runtime needs beside the catalog of migration 1.

-- Each retry is its own run row, pointing at the attempt it retries, so every attempt keeps its
-- times and error; `scheduled_for` stays on the first attempt (once per slot).
ALTER TABLE job_run ADD COLUMN retry_of INTEGER REFERENCES job_run (run_id);

-- Completions carrying a stale claim token are rejected and counted here.
ALTER TABLE node ADD COLUMN stale_completions INTEGER NOT NULL DEFAULT 0;

-- A counter bumped by every change to a job's definition (not its bookkeeping), to processors,
-- or to job objects: the scheduler reloads when it moves, whoever made the change.
INSERT INTO catalog_meta (key, value) VALUES ('generation', '0');
CREATE TRIGGER job_def_insert AFTER INSERT ON job
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_def_delete AFTER DELETE ON job
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_def_update AFTER UPDATE OF
    job_name, processor_id, job_group_id, job_type_id, job_payload, timeout, run_always,
    run_delay, run_every, run_on_the, run_at, run_date, cron, timezone, misfire_policy,
    misfire_window, max_catchup, overlap_policy, max_overlap, max_attempts, backoff_base,
    backoff_max, priority, required, status ON job
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER processor_insert AFTER INSERT ON job_processor
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER processor_update AFTER UPDATE ON job_processor
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER processor_delete AFTER DELETE ON job_processor
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_object_insert AFTER INSERT ON job_object
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_object_delete AFTER DELETE ON job_object
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
