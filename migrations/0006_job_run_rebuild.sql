-- Rebuild job_run for the hot path (measured with examples/bench.rs, see ARCHITECTURE.md):
-- * the status CHECK is a chain of comparisons: SQLite evaluates `status IN (…8 values…)` by
--   building an ephemeral table on every statement that writes status, which tripled the cost
--   of a claim or a completion;
-- * node_id is no longer a foreign key: every claim writes it, and the check forced a statement
--   journal on each claim; nodes are never deleted (a stopped node keeps its row).
-- * one partial index on running runs (by job) instead of two (by node, by job): a claim and a
--   completion each touch one index fewer; running runs are few, so finding a node's runs scans
--   it whole (`INDEXED BY job_run_running_job_idx`);
-- * partial indexes on the self-references (parent, root, retried run) let a prune delete a run
--   without scanning the table for children.
-- The migration runner turns foreign keys off around this and runs foreign_key_check after.
CREATE TABLE job_run_new (
    run_id        INTEGER PRIMARY KEY,
    job_id        INTEGER NOT NULL REFERENCES job (job_id) ON DELETE CASCADE,
    processor_id  INTEGER REFERENCES job_processor (processor_id),
    node_id       INTEGER,          -- the node running it (node.node_id)
    pid           INTEGER REFERENCES job_run (run_id),   -- parent run
    stump         INTEGER REFERENCES job_run (run_id),   -- root run of the tree
    status        TEXT    NOT NULL DEFAULT 'queued'
                  CHECK (status = 'queued' OR status = 'running' OR status = 'succeeded'
                         OR status = 'failed' OR status = 'timed_out' OR status = 'skipped'
                         OR status = 'dead' OR status = 'cancelled'),
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
    retry_of      INTEGER REFERENCES job_run (run_id),
    UNIQUE (job_id, scheduled_for)
);
INSERT INTO job_run_new (run_id, job_id, processor_id, node_id, pid, stump, status, attempt,
    priority, scheduled_for, run_after, claim_token, lease_until, created_at, started_at,
    finished_at, elapsed, params, result, error, log, retry_of)
SELECT run_id, job_id, processor_id, node_id, pid, stump, status, attempt, priority,
    scheduled_for, run_after, claim_token, lease_until, created_at, started_at, finished_at,
    elapsed, params, result, error, log, retry_of
FROM job_run;
DROP TABLE job_run;
ALTER TABLE job_run_new RENAME TO job_run;

-- Only queued runs are claimed; a partial index keeps history from slowing the claim.
CREATE INDEX job_run_queue_idx ON job_run (processor_id, priority DESC, run_after)
    WHERE status = 'queued';
CREATE INDEX job_run_job_idx ON job_run (job_id, run_id);
CREATE INDEX job_run_finished_idx ON job_run (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX job_run_running_job_idx ON job_run (job_id) WHERE status = 'running';
CREATE INDEX job_run_queued_job_idx ON job_run (job_id) WHERE status = 'queued';
CREATE INDEX job_run_pid_idx ON job_run (pid) WHERE pid IS NOT NULL;
CREATE INDEX job_run_stump_idx ON job_run (stump) WHERE stump IS NOT NULL;
CREATE INDEX job_run_retry_of_idx ON job_run (retry_of) WHERE retry_of IS NOT NULL;
