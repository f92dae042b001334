-- The schema SQLite's migrations 0001-0013 add up to, in PostgreSQL's types. Times are
-- epoch milliseconds (BIGINT); JSON is kept as TEXT, exactly as sent (jsonb would reorder
-- keys and renormalise numbers). Names that are listed in order or compared by range are
-- COLLATE "C": bytewise, as SQLite orders them, whatever the database's locale.

-- Database-wide counters: `revision` (the last revision handed out == the last journal
-- seq), `fencing_token`, `database_id`.
CREATE TABLE meta (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO meta (name, value) VALUES ('revision', 0), ('fencing_token', 0);

-- The current state of every key ever written; a deleted key stays as a tombstone.
CREATE TABLE records (
    namespace  TEXT COLLATE "C"    NOT NULL,
    key        TEXT COLLATE "C"    NOT NULL,
    value      TEXT,
    version    BIGINT  NOT NULL,
    revision   BIGINT  NOT NULL,
    updated_by TEXT,
    updated_at BIGINT  NOT NULL,
    deleted    BOOLEAN NOT NULL DEFAULT false,
    session_id TEXT,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX records_by_session ON records (session_id) WHERE session_id IS NOT NULL;

-- Every version of every key, append-only.
CREATE TABLE history (
    namespace  TEXT COLLATE "C"    NOT NULL,
    key        TEXT COLLATE "C"    NOT NULL,
    version    BIGINT  NOT NULL,
    value      TEXT,
    revision   BIGINT  NOT NULL,
    updated_by TEXT,
    updated_at BIGINT  NOT NULL,
    deleted    BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (namespace, key, version)
);

-- The journal: one row per change, seq == the revision of that change.
CREATE TABLE events (
    seq          BIGINT PRIMARY KEY,
    type         TEXT   NOT NULL,
    at           BIGINT NOT NULL,
    actor        TEXT,
    namespace    TEXT,
    key          TEXT,
    resource_key TEXT,
    task_id      TEXT,
    node_id      TEXT,
    data         TEXT   NOT NULL
);
CREATE INDEX events_by_task ON events (task_id, seq) WHERE task_id IS NOT NULL;

-- Successful answers to requests that carried an idempotency_key (kept 24 hours).
CREATE TABLE idempotency (
    idempotency_key TEXT   PRIMARY KEY,
    method          TEXT   NOT NULL,
    request_hash    BYTEA  NOT NULL,
    response        TEXT   NOT NULL,
    created_at      BIGINT NOT NULL
);
CREATE INDEX idempotency_by_age ON idempotency (created_at);

-- Lock leases, one row per holder (shared keys and slots have several).
CREATE TABLE locks (
    lease_id          TEXT   PRIMARY KEY,
    resource_key      TEXT COLLATE "C"   NOT NULL,
    kind              TEXT   NOT NULL,
    path              TEXT COLLATE "C",
    owner             TEXT COLLATE "C"   NOT NULL,
    provider          TEXT,
    fencing_token     BIGINT NOT NULL,
    acquired_at       BIGINT NOT NULL,
    expires_at        BIGINT NOT NULL,
    metadata          TEXT,
    holder_connection BIGINT,
    token_id          TEXT,
    session_id        TEXT,
    mode              TEXT   NOT NULL DEFAULT 'exclusive',
    slots             BIGINT
);
CREATE INDEX locks_by_key ON locks (resource_key);
CREATE INDEX locks_by_path ON locks (path, mode) WHERE path IS NOT NULL;
CREATE INDEX locks_by_owner ON locks (owner);
CREATE INDEX locks_by_session ON locks (session_id) WHERE session_id IS NOT NULL;

-- The last declared outcome per key, shown to the next acquirer as `previous`.
CREATE TABLE lock_outcomes (
    resource_key TEXT   PRIMARY KEY,
    outcome      TEXT   NOT NULL,
    owner        TEXT   NOT NULL,
    at           BIGINT NOT NULL,
    moved_to     TEXT,
    note         TEXT
);

-- DAG tasks and their nodes.
CREATE TABLE tasks (
    task_id          TEXT COLLATE "C"   PRIMARY KEY,
    goal             TEXT   NOT NULL,
    context          TEXT,
    status           TEXT   NOT NULL,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    created_seq      BIGINT NOT NULL,
    unfinished_nodes BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX tasks_by_seq ON tasks (created_seq);
CREATE INDEX tasks_by_status ON tasks (status, created_seq);

CREATE TABLE nodes (
    task_id          TEXT COLLATE "C"   NOT NULL,
    node_id          TEXT COLLATE "C"   NOT NULL,
    position         BIGINT NOT NULL,
    name             TEXT,
    payload          TEXT,
    dependencies     TEXT   NOT NULL,
    max_attempts     BIGINT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    state            TEXT   NOT NULL,
    remaining_deps   BIGINT NOT NULL,
    runnable_since   BIGINT NOT NULL DEFAULT 0,
    lease_id         TEXT,
    lease_owner      TEXT,
    lease_expires_at BIGINT,
    result           TEXT,
    error            TEXT,
    updated_at       BIGINT NOT NULL,
    lease_token_id   TEXT,
    lease_session_id TEXT,
    priority         BIGINT NOT NULL DEFAULT 0,
    label_key        TEXT COLLATE "C"   NOT NULL DEFAULT '',
    ready_at         BIGINT,
    result_schema    TEXT,
    PRIMARY KEY (task_id, node_id)
);
CREATE INDEX nodes_runnable ON nodes (label_key, priority DESC, runnable_since, task_id, node_id)
    WHERE state = 'PENDING' AND remaining_deps = 0;
CREATE INDEX nodes_runnable_by_task ON nodes (task_id, label_key, priority DESC, runnable_since, node_id)
    WHERE state = 'PENDING' AND remaining_deps = 0;
CREATE INDEX nodes_running ON nodes (task_id, node_id) WHERE state = 'RUNNING';
CREATE INDEX nodes_by_session ON nodes (lease_session_id) WHERE lease_session_id IS NOT NULL;
CREATE INDEX nodes_delayed ON nodes (task_id, node_id) WHERE ready_at IS NOT NULL;

-- Reverse edges: who waits for a node.
CREATE TABLE node_dependents (
    task_id      TEXT NOT NULL,
    node_id      TEXT NOT NULL,
    dependent_id TEXT NOT NULL,
    PRIMARY KEY (task_id, node_id, dependent_id)
);

-- Access tokens: only the secret's SHA-256 is kept.
CREATE TABLE tokens (
    token_id     TEXT   PRIMARY KEY,
    name         TEXT   NOT NULL,
    secret_hash  TEXT   NOT NULL UNIQUE,
    scopes       TEXT   NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT,
    last_used_at BIGINT
);

-- Agents' sessions (one live per name), every name that registered, and inboxes.
CREATE TABLE sessions (
    name              TEXT COLLATE "C"   PRIMARY KEY,
    session_id        TEXT   NOT NULL UNIQUE,
    role              TEXT,
    metadata          TEXT,
    started_at        BIGINT NOT NULL,
    last_seen         BIGINT NOT NULL,
    expires_at        BIGINT NOT NULL,
    token_id          TEXT,
    holder_connection BIGINT
);

CREATE TABLE agents (
    name       TEXT COLLATE "C"   PRIMARY KEY,
    first_seen BIGINT NOT NULL
);

CREATE TABLE messages (
    seq        BIGINT PRIMARY KEY,
    message_id TEXT   NOT NULL UNIQUE,
    sender     TEXT   NOT NULL,
    recipients TEXT   NOT NULL,
    subject    TEXT,
    body       TEXT   NOT NULL,
    thread_id  TEXT,
    reply_to   TEXT,
    sent_at    BIGINT NOT NULL
);

CREATE TABLE inbox (
    name TEXT COLLATE "C"   NOT NULL,
    seq  BIGINT NOT NULL,
    PRIMARY KEY (name, seq)
);

CREATE TABLE inbox_cursors (
    name  TEXT   PRIMARY KEY,
    acked BIGINT NOT NULL
);
