-- Start deadlines (issue 29): a job may say its runs must start within some time of becoming
-- due (`start_within`, ms), and a run may carry a deadline of its own (`start_by`, epoch ms);
-- a run not started by its deadline ends `expired`, not failed. SQLite cannot change a CHECK
-- in place: `job_run` is rebuilt (as 0021 did) with the new state, its indexes made anew, and
-- the decision log too, for the operator's pauses and resumes it now records.
ALTER TABLE job ADD COLUMN start_within INTEGER CHECK (start_within IS NULL OR start_within > 0);
DROP TRIGGER job_def_update;
CREATE TRIGGER job_def_update AFTER UPDATE OF
    job_name, processor_id, job_group_id, job_type_id, job_payload, timeout, run_always,
    run_delay, run_every, run_on_the, run_at, run_date, cron, timezone, misfire_policy,
    misfire_window, max_catchup, overlap_policy, max_overlap, max_attempts, backoff_base,
    backoff_max, priority, required, status, stretch_max, start_within ON job
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;

CREATE TABLE job_run_new (
    run_id           INTEGER PRIMARY KEY,
    job_id           INTEGER NOT NULL REFERENCES job (job_id) ON DELETE CASCADE,
    processor_id     INTEGER REFERENCES job_processor (processor_id),
    node_id          INTEGER,          -- the node that claimed it (node.node_id)
    pid              INTEGER REFERENCES job_run (run_id),   -- parent run
    stump            INTEGER REFERENCES job_run (run_id),   -- root run of the tree
    status           TEXT    NOT NULL DEFAULT 'queued'
                     CHECK (status = 'queued' OR status = 'claimed' OR status = 'running'
                            OR status = 'succeeded' OR status = 'failed'
                            OR status = 'timed_out' OR status = 'skipped' OR status = 'dead'
                            OR status = 'cancelled' OR status = 'expired'),
    attempt          INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    priority         INTEGER NOT NULL DEFAULT 0,
    scheduled_for    INTEGER,          -- epoch ms: the slot; NULL for on-demand runs
    run_after        INTEGER NOT NULL, -- epoch ms: not claimable before (retry backoff)
    claim_token      INTEGER,
    lease_until      INTEGER,          -- epoch ms
    created_at       INTEGER NOT NULL, -- epoch ms
    started_at       INTEGER,          -- epoch ms: when it started executing
    finished_at      INTEGER,          -- epoch ms
    elapsed          INTEGER,          -- ms
    params           TEXT CHECK (params IS NULL OR json_valid(params)),
    result           TEXT,
    error            TEXT,
    log              TEXT,
    retry_of         INTEGER REFERENCES job_run (run_id),
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    suspect          INTEGER NOT NULL DEFAULT 0,
    crashes          INTEGER NOT NULL DEFAULT 0,
    step             TEXT,
    children_open    INTEGER NOT NULL DEFAULT 0,
    own_status       TEXT,
    tree_status      TEXT,
    claimed_at       INTEGER,          -- epoch ms: when a node claimed it
    start_by         INTEGER,          -- epoch ms: expires unless started by then
    UNIQUE (job_id, scheduled_for)
);
INSERT INTO job_run_new (run_id, job_id, processor_id, node_id, pid, stump, status, attempt,
    priority, scheduled_for, run_after, claim_token, lease_until, created_at, started_at,
    finished_at, elapsed, params, result, error, log, retry_of, cancel_requested, suspect,
    crashes, step, children_open, own_status, tree_status, claimed_at, start_by)
SELECT run_id, job_id, processor_id, node_id, pid, stump, status, attempt, priority,
    scheduled_for, run_after, claim_token, lease_until, created_at, started_at, finished_at,
    elapsed, params, result, error, log, retry_of, cancel_requested, suspect, crashes, step,
    children_open, own_status, tree_status, claimed_at, NULL
FROM job_run;
DROP TABLE job_run;
ALTER TABLE job_run_new RENAME TO job_run;

CREATE INDEX job_run_queue_idx ON job_run (processor_id, priority DESC, run_after)
    WHERE status = 'queued';
CREATE INDEX job_run_job_idx ON job_run (job_id, run_id);
CREATE INDEX job_run_running_job_idx ON job_run (job_id)
    WHERE (status = 'claimed' OR status = 'running');
CREATE INDEX job_run_pid_idx ON job_run (pid) WHERE pid IS NOT NULL;
CREATE INDEX job_run_stump_idx ON job_run (stump) WHERE stump IS NOT NULL;
CREATE INDEX job_run_retry_of_idx ON job_run (retry_of) WHERE retry_of IS NOT NULL;
CREATE INDEX job_run_queued_slot_idx ON job_run (job_id)
    WHERE status = 'queued' AND scheduled_for IS NOT NULL;

-- The queued runs with a deadline of their own, for the sweep that expires those no node
-- claims (their processor paused or running nowhere).
CREATE INDEX job_run_start_by_idx ON job_run (start_by) WHERE status = 'queued' AND start_by IS NOT NULL;

CREATE TABLE decision_new (
    decision_id  INTEGER PRIMARY KEY,
    node_id      INTEGER NOT NULL REFERENCES node (node_id) ON DELETE CASCADE,
    at           INTEGER NOT NULL, -- epoch ms
    action       TEXT    NOT NULL CHECK (action IN ('activate', 'deactivate', 'stretch',
                                                    'unstretch', 'hold', 'add_instance',
                                                    'remove_instance', 'pause_writes',
                                                    'resume_writes', 'pause', 'resume')),
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
SELECT decision_id, node_id, at, action, job_id, processor_id, subject, reason, evidence, cause
FROM decision;
DROP TABLE decision;
ALTER TABLE decision_new RENAME TO decision;
CREATE INDEX decision_node_at_idx ON decision (node_id, at);
