-- The self-tuning policy's decisions, per node, with their reasons and the samples behind them.
CREATE TABLE decision (
    decision_id  INTEGER PRIMARY KEY,
    node_id      INTEGER NOT NULL REFERENCES node (node_id) ON DELETE CASCADE,
    at           INTEGER NOT NULL, -- epoch ms
    action       TEXT    NOT NULL CHECK (action IN ('activate', 'deactivate', 'add_instance',
                                                    'remove_instance', 'pause_writes', 'resume_writes')),
    job_id       INTEGER REFERENCES job (job_id) ON DELETE SET NULL,
    processor_id INTEGER REFERENCES job_processor (processor_id) ON DELETE SET NULL,
    subject      TEXT,             -- the job's or processor's name when decided
    reason       TEXT    NOT NULL,
    evidence     TEXT CHECK (evidence IS NULL OR json_valid(evidence))
);
CREATE INDEX decision_node_at_idx ON decision (node_id, at);

-- Whether the node has paused data-writing jobs (disk critical).
ALTER TABLE node ADD COLUMN writes_paused INTEGER NOT NULL DEFAULT 0 CHECK (writes_paused IN (0, 1));

-- A change of activation is a change of what the scheduler plans: bump the generation.
CREATE TRIGGER job_activation_insert AFTER INSERT ON job_activation
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_activation_update AFTER UPDATE OF state, pinned ON job_activation
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_activation_delete AFTER DELETE ON job_activation
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
