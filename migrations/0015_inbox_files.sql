-- Inbox files (issue 14, point 3): each file an inbox moved into a run's folder, by the key of
-- that folder (`<job>/<folder>` under <data_dir>/inbox/), recorded in the transaction that
-- queues the file's run. The key is what makes a file's run exactly one: a node that died
-- between the move and the queueing finds the folder again at start and queues it only if its
-- key is not here. No foreign key to job_run: the row outlives its run's pruning (a key must
-- never be queued again), and a prune then checks nothing here.
CREATE TABLE inbox_file (
    inbox_key  TEXT    PRIMARY KEY,
    run_id     INTEGER NOT NULL,   -- job_run.run_id of its run
    path       TEXT    NOT NULL,   -- where the file is now, in its run's folder
    source     TEXT    NOT NULL,   -- where it landed, in the watched folder
    created_at INTEGER NOT NULL    -- epoch ms
) WITHOUT ROWID;
