-- API tokens: bearer credentials of a user (`users`), created by `jobvisor tokens create`.
-- Only a SHA-256 of each token is kept: a token is 32 random bytes, so a fast hash is enough
-- (no dictionary to guess from), and checking one costs microseconds on every request.
CREATE TABLE api_token (
    token_id     INTEGER PRIMARY KEY,
    user_id      INTEGER NOT NULL REFERENCES users (user_id) ON DELETE CASCADE,
    token_name   TEXT    NOT NULL,
    token_hash   TEXT    NOT NULL UNIQUE,  -- hex SHA-256 of the token
    created_at   INTEGER NOT NULL,         -- epoch ms
    UNIQUE (user_id, token_name)
);
