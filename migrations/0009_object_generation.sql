-- An object's change is a change of what the runtime uses (its writer's database file): bump
-- the generation, so a running node notices an object added, edited or removed by anyone.
CREATE TRIGGER object_insert AFTER INSERT ON object
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER object_update AFTER UPDATE ON object
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
CREATE TRIGGER object_delete AFTER DELETE ON object
BEGIN UPDATE catalog_meta SET value = value + 1 WHERE key = 'generation'; END;
