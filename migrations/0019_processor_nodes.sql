-- Processors may belong to one node or to any (issue 16): `nodes` is a JSON array of the node
-- names that may run the processor (start its actor, claim its runs, schedule its jobs,
-- activate them); NULL lets every node sharing the catalog run it. Names, not ids: a node may
-- be named before it first starts. The processor_update trigger (migration 3) bumps the
-- catalog generation, so running nodes start or drain the processor when the list changes.
ALTER TABLE job_processor ADD COLUMN nodes TEXT CHECK (nodes IS NULL OR json_valid(nodes));
