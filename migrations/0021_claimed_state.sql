-- Run states say what is true: a run a node has taken but not started is `claimed` (its node
-- and `claimed_at` set, no start time); `running` means started (`started_at` set). A run in
-- flight is either, and every rule that counted running runs (overlap, caps, busy objects,
-- leases, recovery) counts both: the partial index of running runs becomes the index of runs
-- in flight, its predicate written exactly as the queries write it, so SQLite matches it.
-- SQLite cannot change a CHECK in place: the table is rebuilt (as 0006 did), its indexes made
-- anew. A catalog written before this has no claimed run: its running runs were claimed and
-- marked running at once; their start time stays what it was.
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
                            OR status = 'cancelled'),
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
    UNIQUE (job_id, scheduled_for)
);
INSERT INTO job_run_new (run_id, job_id, processor_id, node_id, pid, stump, status, attempt,
    priority, scheduled_for, run_after, claim_token, lease_until, created_at, started_at,
    finished_at, elapsed, params, result, error, log, retry_of, cancel_requested, suspect,
    crashes, step, children_open, own_status, tree_status, claimed_at)
SELECT run_id, job_id, processor_id, node_id, pid, stump, status, attempt, priority,
    scheduled_for, run_after, claim_token, lease_until, created_at, started_at, finished_at,
    elapsed, params, result, error, log, retry_of, cancel_requested, suspect, crashes, step,
    children_open, own_status, tree_status,
    CASE WHEN status = 'running' THEN started_at END
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
