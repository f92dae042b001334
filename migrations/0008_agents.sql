-- Agents, their sessions and their inboxes (contract v1.1, "Agents and sessions",
-- "Messages"). A name has at most one live session; its inbox outlives sessions.
CREATE TABLE sessions (
    name              TEXT    PRIMARY KEY,
    session_id        TEXT    NOT NULL UNIQUE,  -- the holder's secret
    role              TEXT,
    metadata          TEXT,                     -- JSON
    started_at        INTEGER NOT NULL,         -- epoch ms
    last_seen         INTEGER NOT NULL,
    expires_at        INTEGER NOT NULL,
    token_id          TEXT,                     -- the token that registered it; NULL: Unix admin
    holder_connection INTEGER                   -- set with release_on_disconnect
);

-- Every name that ever registered: the recipients of "*".
CREATE TABLE agents (
    name       TEXT    PRIMARY KEY,
    first_seen INTEGER NOT NULL
);

CREATE TABLE messages (
    seq        INTEGER PRIMARY KEY,            -- the journal seq of its message.sent
    message_id TEXT    NOT NULL UNIQUE,
    sender     TEXT    NOT NULL,
    recipients TEXT    NOT NULL,               -- JSON: the `to` as sent
    subject    TEXT,
    body       TEXT    NOT NULL,               -- JSON
    thread_id  TEXT,
    reply_to   TEXT,
    sent_at    INTEGER NOT NULL
);

-- One row per (recipient name, message): an inbox is a range scan.
CREATE TABLE inbox (
    name TEXT    NOT NULL,
    seq  INTEGER NOT NULL,
    PRIMARY KEY (name, seq)
) WITHOUT ROWID;

-- Each name's acknowledged cursor.
CREATE TABLE inbox_cursors (
    name  TEXT    PRIMARY KEY,
    acked INTEGER NOT NULL
);
