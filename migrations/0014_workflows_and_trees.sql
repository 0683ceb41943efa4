-- Workflows and job trees (issue 14). Every column is added in place (no rebuild): a run that
-- is no part of a tree keeps the defaults, and a plain completion checks them in its one UPDATE.

-- The workflow step a run executes: its parent (`pid`) is the workflow's run, which has one
-- latest run per step name (earlier ones are attempts that a retry superseded).
ALTER TABLE job_run ADD COLUMN step TEXT;
-- How many of the run's children (the runs it spawned, or a workflow's steps queued) have not
-- ended. A run ends with its last child, in that child's transaction.
ALTER TABLE job_run ADD COLUMN children_open INTEGER NOT NULL DEFAULT 0;
-- How the run's own execution ended while its children went on (a workflow's run: its steps
-- were queued). The run is *waiting* while this is set and `finished_at` is not: its status is
-- `running`, or `failed` once a failure shows in its tree, until its last child ends.
ALTER TABLE job_run ADD COLUMN own_status TEXT;
-- The worst way a child of the run ended (`failed` or `cancelled`; NULL while none ended
-- badly): the run's final status is the worse of it and its own (the minimum over its tree).
ALTER TABLE job_run ADD COLUMN tree_status TEXT;
