-- Versioned state, its history, the journal, and remembered idempotent answers.

-- Daemon-wide counters; `revision` is the last revision handed out (== last journal seq).
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO meta (name, value) VALUES ('revision', 0);

-- The current state of every key ever written. A deleted key stays as a tombstone
-- (deleted = 1) so that re-creating it continues its version sequence.
CREATE TABLE records (
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    value      TEXT,               -- JSON text; NULL on a tombstone
    version    INTEGER NOT NULL,
    revision   INTEGER NOT NULL,
    updated_by TEXT,
    updated_at INTEGER NOT NULL,   -- epoch milliseconds
    deleted    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;

-- Every version of every key, append-only.
CREATE TABLE history (
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    value      TEXT,
    revision   INTEGER NOT NULL,
    updated_by TEXT,
    updated_at INTEGER NOT NULL,
    deleted    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, key, version)
) WITHOUT ROWID;

-- The journal: one row per change, seq == the revision of that change.
CREATE TABLE events (
    seq          INTEGER PRIMARY KEY,
    type         TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    actor        TEXT,
    namespace    TEXT,
    key          TEXT,
    resource_key TEXT,
    task_id      TEXT,
    node_id      TEXT,
    data         TEXT    NOT NULL
);
CREATE INDEX events_by_task ON events (task_id, seq) WHERE task_id IS NOT NULL;

-- Successful answers to requests that carried an idempotency_key (kept 24 hours).
CREATE TABLE idempotency (
    idempotency_key TEXT    PRIMARY KEY,
    method          TEXT    NOT NULL,
    request_hash    BLOB    NOT NULL,
    response        TEXT    NOT NULL,
    created_at      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX idempotency_by_age ON idempotency (created_at);
