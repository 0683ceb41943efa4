-- The scheduler decides overlap from the catalog, in the transaction that records the decision
-- (a node's own count of run events drifted, and never saw other nodes' runs): it counts a job's
-- running runs (job_run_running_job_idx) and its queued slot runs, here. Only runs fired by a
-- schedule enter this index, so the claim and completion of on-demand runs (the bulk of a
-- drain) write no entry to it.
CREATE INDEX job_run_queued_slot_idx ON job_run (job_id)
    WHERE status = 'queued' AND scheduled_for IS NOT NULL;
