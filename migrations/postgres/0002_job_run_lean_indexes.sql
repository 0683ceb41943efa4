-- Fewer index entries per run version (as SQLite's 0007 did): on PostgreSQL every update of a
-- run that changes its status is a new row version with an entry in each index whose predicate
-- it meets (no HOT update: `status` is in partial indexes' predicates), and a run is updated
-- twice (its claim, its end). Measured on a drain of 20,000 no-op runs by 3 node processes
-- (`bench -- pg`, BENCH_CPU=1, builds alternating): the server's backends spent 616-645 ms of
-- CPU, 522-557 ms with these two changes.
--
-- The running runs of a node are few: the one partial index of running runs, scanned whole,
-- finds them (sweeps, recoveries, cancel requests, work sharing), as on SQLite.
DROP INDEX job_run_running_node_idx;

-- A slot is unique per job; a run without a slot (on demand, a retry, an inbox file) has no
-- entry at all, where the constraint gave each of its versions one under the key (job, NULL).
-- Inserts name the predicate in ON CONFLICT; `max(scheduled_for)` per job still reads it.
ALTER TABLE job_run DROP CONSTRAINT job_run_job_id_scheduled_for_key;
CREATE UNIQUE INDEX job_run_slot_idx ON job_run (job_id, scheduled_for)
    WHERE scheduled_for IS NOT NULL;
