-- Work sharing across nodes (issue 16). A node whose claim for a processor found nothing due
-- asks the live node holding the most claimed-but-unstarted runs of that processor to give
-- some back (at most half of them, at most what the asker can start); that node hears it
-- with its next heartbeat, which takes the request, puts that many of its unstarted runs back
-- in the queue (the last it would have started) and claims again for the processor only once
-- one of its instances is free. One request per (processor, node) at a time.
CREATE TABLE give_back (
    processor_id INTEGER NOT NULL REFERENCES job_processor (processor_id) ON DELETE CASCADE,
    node_id      INTEGER NOT NULL REFERENCES node (node_id) ON DELETE CASCADE,
    runs         INTEGER NOT NULL CHECK (runs > 0),
    asked_by     INTEGER NOT NULL,  -- the idle node
    asked_at     INTEGER NOT NULL,  -- epoch ms
    PRIMARY KEY (processor_id, node_id)
) WITHOUT ROWID;
