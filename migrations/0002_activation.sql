-- Activation state is per node (DESIGN.md §3): nodes sharing a catalog each decide which jobs
-- they run from their own health, so the state lives beside `job`, keyed by (job, node).
CREATE TABLE job_activation (
    job_id     INTEGER NOT NULL REFERENCES job (job_id) ON DELETE CASCADE,
    node_id    INTEGER NOT NULL REFERENCES node (node_id) ON DELETE CASCADE,
    state      TEXT    NOT NULL DEFAULT 'standby' CHECK (state IN ('active', 'standby')),
    pinned     TEXT    CHECK (pinned IS NULL OR pinned IN ('active', 'inactive')),
    reason     TEXT,
    changed_at INTEGER,  -- epoch ms
    PRIMARY KEY (job_id, node_id)
) WITHOUT ROWID;

-- Run history is pruned by age; this keeps the prune a range scan.
CREATE INDEX job_run_finished_idx ON job_run (finished_at) WHERE finished_at IS NOT NULL;
