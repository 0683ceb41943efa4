-- Self-tuning under real pressure (issue 18): stretching periods before shedding, writers held
-- while the disk is critical, processor instances kept as the node's state, and a decision log
-- whose every row has a cause.
-- The migration runner turns foreign keys off around this and runs foreign_key_check after.

-- How far a recurring job's period may be stretched under strain: 1 = never, 4 = it may run
-- four times less often than scheduled.
ALTER TABLE job ADD COLUMN stretch_max INTEGER NOT NULL DEFAULT 1
    CHECK (stretch_max BETWEEN 1 AND 64);

-- job_activation gains the `paused` state (an active job that writes data objects, held while
-- the disk is critical: it neither runs nor is listed as active) and the factor this node
-- stretched the job's period by. A CHECK cannot change in place: the table is rebuilt.
CREATE TABLE job_activation_new (
    job_id     INTEGER NOT NULL REFERENCES job (job_id) ON DELETE CASCADE,
    node_id    INTEGER NOT NULL REFERENCES node (node_id) ON DELETE CASCADE,
    state      TEXT    NOT NULL DEFAULT 'standby'
               CHECK (state IN ('active', 'standby', 'paused')),
    pinned     TEXT    CHECK (pinned IS NULL OR pinned IN ('active', 'inactive')),
    reason     TEXT,
    changed_at INTEGER,  -- epoch ms
    stretch    INTEGER NOT NULL DEFAULT 1 CHECK (stretch >= 1),
    PRIMARY KEY (job_id, node_id)
) WITHOUT ROWID;
INSERT INTO job_activation_new (job_id, node_id, state, pinned, reason, changed_at)
SELECT job_id, node_id, state, pinned, reason, changed_at FROM job_activation;
DROP TABLE job_activation;
ALTER TABLE job_activation_new RENAME TO job_activation;

-- The triggers went with the old table. A change of state, pin or stretch changes what the
-- scheduler plans: bump the generation.
CREATE TRIGGER job_activation_insert AFTER INSERT ON job_activation
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_activation_update AFTER UPDATE OF state, pinned, stretch ON job_activation
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER job_activation_delete AFTER DELETE ON job_activation
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;

-- stretch_max is part of a job's definition.
DROP TRIGGER job_def_update;
CREATE TRIGGER job_def_update AFTER UPDATE OF
    job_name, processor_id, job_group_id, job_type_id, job_payload, timeout, run_always,
    run_delay, run_every, run_on_the, run_at, run_date, cron, timezone, misfire_policy,
    misfire_window, max_catchup, overlap_policy, max_overlap, max_attempts, backoff_base,
    backoff_max, priority, required, status, stretch_max ON job
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;

-- The decision log: the new actions (stretch, unstretch, hold) and the cause of each row
-- (health, an operator's pin, the minimum, or an operator's command). Rows logged before this
-- migration get the cause their reason names.
CREATE TABLE decision_new (
    decision_id  INTEGER PRIMARY KEY,
    node_id      INTEGER NOT NULL REFERENCES node (node_id) ON DELETE CASCADE,
    at           INTEGER NOT NULL, -- epoch ms
    action       TEXT    NOT NULL CHECK (action IN ('activate', 'deactivate', 'stretch',
                                                    'unstretch', 'hold', 'add_instance',
                                                    'remove_instance', 'pause_writes',
                                                    'resume_writes')),
    job_id       INTEGER REFERENCES job (job_id) ON DELETE SET NULL,
    processor_id INTEGER REFERENCES job_processor (processor_id) ON DELETE SET NULL,
    subject      TEXT,             -- the job's or processor's name (names, for writes) when decided
    reason       TEXT    NOT NULL,
    evidence     TEXT CHECK (evidence IS NULL OR json_valid(evidence)),
    cause        TEXT    NOT NULL DEFAULT 'health'
                 CHECK (cause IN ('health', 'pin', 'minimum', 'operator'))
);
INSERT INTO decision_new (decision_id, node_id, at, action, job_id, processor_id, subject,
    reason, evidence, cause)
SELECT decision_id, node_id, at, action, job_id, processor_id, subject, reason, evidence,
    CASE WHEN reason LIKE '%by the operator%' THEN 'pin'
         WHEN reason LIKE '%part of the minimum%' THEN 'minimum'
         ELSE 'health' END
FROM decision;
DROP TABLE decision;
ALTER TABLE decision_new RENAME TO decision;
CREATE INDEX decision_node_at_idx ON decision (node_id, at);

-- How many instances the policy runs of each local processor on each node (between the
-- processor's `instances` and `max_instances`): kept across restarts, shown by
-- `processors list`. A missing row means the processor's own `instances`.
CREATE TABLE processor_activation (
    processor_id INTEGER NOT NULL REFERENCES job_processor (processor_id) ON DELETE CASCADE,
    node_id      INTEGER NOT NULL REFERENCES node (node_id) ON DELETE CASCADE,
    instances    INTEGER NOT NULL CHECK (instances >= 1),
    reason       TEXT,
    changed_at   INTEGER,  -- epoch ms
    PRIMARY KEY (processor_id, node_id)
) WITHOUT ROWID;
