-- Resource locks on leases, and what the last holder of each key declared.

-- Live leases, one per canonical resource key. `path` is the canonical path of file:/dir:
-- keys (NULL for other kinds); the hierarchy check reads it by point and range lookups.
CREATE TABLE locks (
    resource_key          TEXT    PRIMARY KEY,
    kind                  TEXT    NOT NULL,
    path                  TEXT,
    lease_id              TEXT    NOT NULL UNIQUE,
    owner                 TEXT    NOT NULL,
    provider              TEXT,
    fencing_token         INTEGER NOT NULL,
    acquired_at           INTEGER NOT NULL,  -- epoch milliseconds
    expires_at            INTEGER NOT NULL,  -- epoch milliseconds, for display and restarts
    metadata              TEXT,              -- JSON text
    holder_connection     INTEGER            -- with release_on_disconnect: the holding connection (this process's numbering)
) WITHOUT ROWID;
CREATE INDEX locks_by_path ON locks (path) WHERE path IS NOT NULL;
CREATE INDEX locks_by_owner ON locks (owner);

-- The last declared outcome per key (released, modified, created, deleted, moved,
-- abandoned, expired), shown to the next acquirer as `previous`.
CREATE TABLE lock_outcomes (
    resource_key TEXT    PRIMARY KEY,
    outcome      TEXT    NOT NULL,
    owner        TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    moved_to     TEXT,
    note         TEXT
) WITHOUT ROWID;

INSERT INTO meta (name, value) VALUES ('fencing_token', 0);
