-- Job type `custom`: a job whose runs an embedding application's registered executor carries
-- out (`payload.executor` names it; `EngineBuilder::executor`). The CHECK list of job_type is
-- part of the table, so the table is rebuilt (SQLite's procedure: the migration runner turns
-- foreign keys off around it and runs foreign_key_check after).
CREATE TABLE job_type_new (
    job_type_id INTEGER PRIMARY KEY,
    job_type    TEXT    NOT NULL UNIQUE
                CHECK (job_type IN ('function', 'sql', 'url', 'rpc', 'command', 'workflow',
                                    'custom')),
    status      INTEGER NOT NULL DEFAULT 1 CHECK (status IN (0, 1)),
    create_date INTEGER NOT NULL DEFAULT (unixepoch())
);
INSERT INTO job_type_new (job_type_id, job_type, status, create_date)
    SELECT job_type_id, job_type, status, create_date FROM job_type;
INSERT INTO job_type_new (job_type_id, job_type) VALUES (7, 'custom');
DROP TABLE job_type;
ALTER TABLE job_type_new RENAME TO job_type;
