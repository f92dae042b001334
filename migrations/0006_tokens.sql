-- Access tokens for network clients (contract v1.1, "Remote access and authentication").
-- The secret itself is never stored: only its SHA-256, so a copy of this database grants
-- nothing. Tokens are looked up by that hash when a connection authenticates.
CREATE TABLE tokens (
    token_id     TEXT    PRIMARY KEY,
    name         TEXT    NOT NULL,
    secret_hash  TEXT    NOT NULL UNIQUE,
    scopes       TEXT    NOT NULL,       -- JSON array of grants
    created_at   INTEGER NOT NULL,       -- epoch ms
    expires_at   INTEGER,                -- epoch ms; NULL: never
    revoked_at   INTEGER,                -- epoch ms; NULL: not revoked
    last_used_at INTEGER                 -- epoch ms of the last successful Authenticate
);
