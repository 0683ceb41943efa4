-- Token expiry (`jobvisor tokens create --expires 30d`): a token is refused from this instant
-- on. NULL: it never expires (every token made before this migration, and the default).
ALTER TABLE api_token ADD COLUMN expires_at INTEGER;  -- epoch ms
