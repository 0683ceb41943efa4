-- Pauses an operator set on a processor, a job group or a job, on one node or on every node
-- sharing the catalog: nothing new of it is claimed while the row exists; running runs finish.
CREATE TABLE pause (
    scope     TEXT   NOT NULL CHECK (scope IN ('processor', 'group', 'job')),
    target    TEXT   NOT NULL,             -- the processor's, group's or job's name
    node_name TEXT   NOT NULL DEFAULT '',  -- '': every node (the fleet)
    paused_by TEXT   NOT NULL,
    paused_at BIGINT NOT NULL,             -- epoch ms
    reason    TEXT,
    PRIMARY KEY (scope, target, node_name)
);
