-- Token expiry (`jobvisor tokens create --expires 30d`), as SQLite's 0021: a token is refused
-- from this instant on; NULL, it never expires (every earlier token, and the default).
ALTER TABLE api_token ADD COLUMN expires_at bigint;  -- epoch ms
