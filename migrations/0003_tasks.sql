-- DAG tasks and their nodes. A node is runnable when state = 'PENDING' and
-- remaining_deps = 0; the partial index lists exactly those, oldest first, so handing out
-- the next node does not depend on how many finished tasks the database holds.

CREATE TABLE tasks (
    task_id    TEXT    PRIMARY KEY,
    goal       TEXT    NOT NULL,
    context    TEXT,                      -- JSON text
    status     TEXT    NOT NULL,          -- running, completed, failed, cancelled
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    created_seq INTEGER NOT NULL          -- the revision of task.registered
) WITHOUT ROWID;
CREATE INDEX tasks_by_seq ON tasks (created_seq);
CREATE INDEX tasks_by_status ON tasks (status, created_seq);

CREATE TABLE nodes (
    task_id          TEXT    NOT NULL,
    node_id          TEXT    NOT NULL,
    position         INTEGER NOT NULL,     -- order in the registration
    name             TEXT,
    payload          TEXT,                 -- JSON text
    dependencies     TEXT    NOT NULL,     -- JSON array of node ids
    max_attempts     INTEGER NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    state            TEXT    NOT NULL,     -- PENDING, RUNNING, COMPLETED, FAILED, CANCELLED
    remaining_deps   INTEGER NOT NULL,     -- dependencies not yet COMPLETED
    runnable_since   INTEGER NOT NULL DEFAULT 0, -- revision when it last became runnable (FIFO)
    lease_id         TEXT,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    result           TEXT,                 -- JSON text
    error            TEXT,                 -- JSON text
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (task_id, node_id)
) WITHOUT ROWID;
CREATE INDEX nodes_runnable ON nodes (runnable_since, task_id, node_id)
    WHERE state = 'PENDING' AND remaining_deps = 0;
CREATE INDEX nodes_runnable_by_task ON nodes (task_id, runnable_since, node_id)
    WHERE state = 'PENDING' AND remaining_deps = 0;
CREATE INDEX nodes_running ON nodes (task_id, node_id) WHERE state = 'RUNNING';

-- Reverse edges: who waits for a node.
CREATE TABLE node_dependents (
    task_id      TEXT NOT NULL,
    node_id      TEXT NOT NULL,
    dependent_id TEXT NOT NULL,
    PRIMARY KEY (task_id, node_id, dependent_id)
) WITHOUT ROWID;
