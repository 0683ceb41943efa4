-- When a job runs next (issue 27): each node's scheduler plans the jobs active on it, and nodes
-- may plan one job differently (a stretch, a backoff read at another moment), so the next run
-- is kept per node beside the activation state, written by that node alone (no row two nodes
-- write, no lock on `job`, which claims update). A job's next run, as read, is the earliest
-- among the live nodes where it is active (`catalog::definitions`). `job.next_run_at`, which
-- nothing wrote, goes. Not in the generation triggers: writing it changes no plan.
ALTER TABLE job_activation ADD COLUMN next_run_at INTEGER;  -- epoch ms
DROP INDEX job_next_run_idx;
ALTER TABLE job DROP COLUMN next_run_at;
