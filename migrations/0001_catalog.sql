-- The job catalog (DESIGN.md §3), with the millix column names and units:
-- create_date is unix seconds; last_date_begin / last_date_end / next_run_at / scheduled_for
-- are epoch milliseconds; last_elapse, run_delay, timeout and backoff are milliseconds.
-- status columns are 1 = active, 0 = disabled, as in millix.

CREATE TABLE object (
    object_id         INTEGER PRIMARY KEY,
    object_name       TEXT    NOT NULL UNIQUE,
    object_name_field TEXT,
    object_key        TEXT,
    object_type       TEXT    NOT NULL DEFAULT 'table'
                      CHECK (object_type IN ('table', 'file', 'view')),
    id_length         INTEGER CHECK (id_length IS NULL OR id_length > 0),
    search_prefix     TEXT,
    time_to_live      INTEGER CHECK (time_to_live IS NULL OR time_to_live >= 0), -- seconds
    allow_prune       INTEGER NOT NULL DEFAULT 0 CHECK (allow_prune IN (0, 1)),
    allow_list        INTEGER NOT NULL DEFAULT 0 CHECK (allow_list IN (0, 1)),
    conn_string       TEXT,
    description       TEXT,
    status            INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date       INTEGER NOT NULL DEFAULT (unixepoch())
);

CREATE TABLE job_type (
    job_type_id INTEGER PRIMARY KEY,
    job_type    TEXT    NOT NULL UNIQUE
                CHECK (job_type IN ('function', 'sql', 'url', 'rpc', 'command', 'workflow')),
    status      INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date INTEGER NOT NULL DEFAULT (unixepoch())
);
INSERT INTO job_type (job_type_id, job_type) VALUES
    (1, 'function'), (2, 'sql'), (3, 'url'), (4, 'rpc'), (5, 'command'), (6, 'workflow');

CREATE TABLE job_group (
    job_group_id   INTEGER PRIMARY KEY,
    job_group_name TEXT    NOT NULL UNIQUE,
    maintenance    INTEGER NOT NULL DEFAULT 0 CHECK (maintenance IN (0, 1)),
    description    TEXT,
    status         INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date    INTEGER NOT NULL DEFAULT (unixepoch())
);

CREATE TABLE job_processor (
    processor_id   INTEGER PRIMARY KEY,
    processor_name TEXT    NOT NULL UNIQUE,
    instances      INTEGER NOT NULL DEFAULT 1 CHECK (instances >= 1),
    max_instances  INTEGER CHECK (max_instances IS NULL OR max_instances >= instances),
    ip_address     TEXT,   -- NULL: a local processor; set: a remote node
    port           INTEGER CHECK (port IS NULL OR port BETWEEN 1 AND 65535),
    rpc_user       TEXT,
    rpc_password   TEXT,
    status         INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date    INTEGER NOT NULL DEFAULT (unixepoch())
);

CREATE TABLE job (
    job_id          INTEGER PRIMARY KEY,
    job_name        TEXT    NOT NULL UNIQUE,
    processor_id    INTEGER NOT NULL REFERENCES job_processor (processor_id),
    job_group_id    INTEGER REFERENCES job_group (job_group_id),
    job_type_id     INTEGER NOT NULL REFERENCES job_type (job_type_id),
    job_payload     TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(job_payload)),
    description     TEXT,
    timeout         INTEGER NOT NULL DEFAULT 0 CHECK (timeout >= 0),          -- ms, 0 = none
    run_always      INTEGER NOT NULL DEFAULT 0 CHECK (run_always IN (0, 1)),
    run_delay       INTEGER NOT NULL DEFAULT 0 CHECK (run_delay >= 0),        -- ms
    run_every       INTEGER CHECK (run_every IS NULL OR run_every >= 1),      -- minutes
    run_on_the      INTEGER CHECK (run_on_the IS NULL OR run_on_the BETWEEN 0 AND 59),
    run_at          TEXT,
    run_date        TEXT,
    cron            TEXT,
    timezone        TEXT,
    misfire_policy  TEXT    NOT NULL DEFAULT 'once' CHECK (misfire_policy IN ('once', 'skip', 'all')),
    misfire_window  INTEGER NOT NULL DEFAULT 60000 CHECK (misfire_window >= 0), -- ms
    max_catchup     INTEGER NOT NULL DEFAULT 10 CHECK (max_catchup >= 1),
    overlap_policy  TEXT    NOT NULL DEFAULT 'forbid' CHECK (overlap_policy IN ('forbid', 'queue', 'allow')),
    max_overlap     INTEGER NOT NULL DEFAULT 1 CHECK (max_overlap >= 1),
    max_attempts    INTEGER NOT NULL DEFAULT 1 CHECK (max_attempts >= 1),
    backoff_base    INTEGER NOT NULL DEFAULT 1000 CHECK (backoff_base >= 0),   -- ms
    backoff_max     INTEGER NOT NULL DEFAULT 300000 CHECK (backoff_max >= 0),  -- ms
    priority        INTEGER NOT NULL DEFAULT 0,   -- larger is more important
    required        INTEGER NOT NULL DEFAULT 0 CHECK (required IN (0, 1)),
    in_progress     INTEGER NOT NULL DEFAULT 0 CHECK (in_progress >= 0),
    last_date_begin INTEGER,                      -- epoch ms
    last_date_end   INTEGER,                      -- epoch ms
    last_elapse     INTEGER,                      -- ms
    last_response   TEXT,
    next_run_at     INTEGER,                      -- epoch ms
    status          INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date     INTEGER NOT NULL DEFAULT (unixepoch())
);
CREATE INDEX job_processor_idx ON job (processor_id);
CREATE INDEX job_next_run_idx ON job (next_run_at) WHERE status = 1;

CREATE TABLE job_object (
    job_id    INTEGER NOT NULL REFERENCES job (job_id) ON DELETE CASCADE,
    object_id INTEGER NOT NULL REFERENCES object (object_id),
    PRIMARY KEY (job_id, object_id)
) WITHOUT ROWID;
CREATE INDEX job_object_object_idx ON job_object (object_id);

CREATE TABLE node (
    node_id      INTEGER PRIMARY KEY,
    node_name    TEXT    NOT NULL UNIQUE,
    host         TEXT,
    pid          INTEGER,
    version      TEXT,
    started_at   INTEGER,   -- epoch ms
    heartbeat_at INTEGER,   -- epoch ms
    status       INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date  INTEGER NOT NULL DEFAULT (unixepoch())
);

CREATE TABLE job_run (
    run_id        INTEGER PRIMARY KEY,
    job_id        INTEGER NOT NULL REFERENCES job (job_id) ON DELETE CASCADE,
    processor_id  INTEGER REFERENCES job_processor (processor_id),
    node_id       INTEGER REFERENCES node (node_id),
    pid           INTEGER REFERENCES job_run (run_id),   -- parent run
    stump         INTEGER REFERENCES job_run (run_id),   -- root run of the tree
    status        TEXT    NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'timed_out',
                                    'skipped', 'dead', 'cancelled')),
    attempt       INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    priority      INTEGER NOT NULL DEFAULT 0,
    scheduled_for INTEGER,          -- epoch ms: the slot; NULL for on-demand runs
    run_after     INTEGER NOT NULL, -- epoch ms: not claimable before (retry backoff)
    claim_token   INTEGER,
    lease_until   INTEGER,          -- epoch ms
    created_at    INTEGER NOT NULL, -- epoch ms
    started_at    INTEGER,          -- epoch ms
    finished_at   INTEGER,          -- epoch ms
    elapsed       INTEGER,          -- ms
    params        TEXT CHECK (params IS NULL OR json_valid(params)),
    result        TEXT,
    error         TEXT,
    log           TEXT,
    UNIQUE (job_id, scheduled_for)
);
-- Only queued runs are claimed; a partial index keeps history from slowing the claim.
CREATE INDEX job_run_queue_idx ON job_run (processor_id, priority DESC, run_after)
    WHERE status = 'queued';
CREATE INDEX job_run_running_idx ON job_run (node_id) WHERE status = 'running';
CREATE INDEX job_run_job_idx ON job_run (job_id, run_id);

CREATE TABLE stat_type (
    stat_type_id INTEGER PRIMARY KEY,
    stat_type    TEXT    NOT NULL UNIQUE,   -- e.g. device.cpu_used
    unit         TEXT,
    description  TEXT,
    status       INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date  INTEGER NOT NULL DEFAULT (unixepoch())
);

CREATE TABLE stat (
    stat_id      INTEGER PRIMARY KEY,
    stat_type_id INTEGER NOT NULL REFERENCES stat_type (stat_type_id),
    node_id      INTEGER REFERENCES node (node_id),
    subject      TEXT,      -- the object, processor or job the value is about; NULL for the device
    value        REAL    NOT NULL,
    sampled_at   INTEGER NOT NULL -- epoch ms
);
CREATE INDEX stat_type_time_idx ON stat (stat_type_id, sampled_at);

CREATE TABLE users (
    user_id       INTEGER PRIMARY KEY,
    user_name     TEXT    NOT NULL UNIQUE,
    password_hash TEXT    NOT NULL,  -- argon2id PHC string
    role          TEXT    NOT NULL DEFAULT 'viewer' CHECK (role IN ('admin', 'operator', 'viewer')),
    status        INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date   INTEGER NOT NULL DEFAULT (unixepoch())
);

-- Append-only: the triggers below refuse updates and deletes.
CREATE TABLE audit (
    audit_id    INTEGER PRIMARY KEY,
    at          INTEGER NOT NULL,  -- epoch ms
    actor       TEXT    NOT NULL,  -- user name, 'cli', or 'node:<name>'
    action      TEXT    NOT NULL,  -- e.g. import, job.add, job.edit
    subject     TEXT,
    detail      TEXT CHECK (detail IS NULL OR json_valid(detail))
);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END;

-- Facts about this catalog file itself, such as when it was seeded.
CREATE TABLE catalog_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
