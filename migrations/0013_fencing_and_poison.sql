-- A node name is held under a generation (a fencing token): taking the name bumps it, and the
-- holder's heartbeats and claims carry the generation they took it under, so a process that
-- lost its name (stopped past three heartbeats, then taken over) changes nothing.
ALTER TABLE node ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;

-- Poison runs: `suspect` is 1 once a run's node died while the run was claimed, and 2 while
-- such a run is executing (marked before it starts); `crashes` counts node deaths during its
-- execution. Recovery quarantines a run (status dead) after min(max_attempts, 3) of them.
ALTER TABLE job_run ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_run ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
