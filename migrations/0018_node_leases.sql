-- Leases across nodes sharing the catalog (issue 16). Each node states its lease TTL when it
-- takes its name: a node whose heartbeat is older than its own TTL is dead, and any other node
-- sweeps it — fences it (a new generation, so that its process, if it was only stopped, stops
-- at its next heartbeat) and returns its runs whose leases expired to the queue. The sweeper
-- judges each node by the TTL that node stated, so nodes configured differently never take
-- each other's runs early. `fenced_at` (epoch ms) and `fenced_by` (the sweeper's name) say
-- when and by whom; taking the name clears them.
ALTER TABLE node ADD COLUMN lease_ttl INTEGER NOT NULL DEFAULT 30000;
ALTER TABLE node ADD COLUMN fenced_at INTEGER;
ALTER TABLE node ADD COLUMN fenced_by TEXT;
