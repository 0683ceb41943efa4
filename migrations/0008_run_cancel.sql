-- An operator's request to cancel a run that is executing: the node that runs it sees the
-- counter below move (its catalog watch reads it with the generation), cancels the run (a
-- command's process group is killed) and records it `cancelled`. Queued runs are cancelled at
-- once and never need the flag.
ALTER TABLE job_run ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
INSERT INTO catalog_meta (key, value) VALUES ('cancel_requests', '0');
