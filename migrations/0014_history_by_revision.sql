-- History in revision order. Keyed by (namespace, key, version), every batch dirtied one
-- page of the history per key it wrote, and each dirty page is a 4 KiB frame in the
-- write-ahead log: with many keys written at once, most of what a commit wrote was
-- history. Keyed by revision, a write appends to the end of the table.
--
-- A key's versions are found from its current row (`records.revision`, the newest)
-- through `prev`, the revision of the version before; `history_marks` holds where every
-- 64th version of a key is, so reading versions before any one walks at most 63 rows
-- before the first it returns.
CREATE TABLE history_log (
    revision   INTEGER PRIMARY KEY,
    namespace  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    value      TEXT,               -- JSON text; NULL on a tombstone
    updated_by TEXT,
    updated_at INTEGER NOT NULL,   -- epoch milliseconds
    deleted    INTEGER NOT NULL DEFAULT 0,
    prev       INTEGER             -- the revision of this key's previous version
);

CREATE TABLE history_marks (
    namespace TEXT    NOT NULL,
    key       TEXT    NOT NULL,
    version   INTEGER NOT NULL,    -- a multiple of 64
    revision  INTEGER NOT NULL,
    PRIMARY KEY (namespace, key, version)
) WITHOUT ROWID;

INSERT INTO history_log (revision, namespace, key, version, value, updated_by, updated_at, deleted, prev)
SELECT revision, namespace, key, version, value, updated_by, updated_at, deleted,
       LAG(revision) OVER (PARTITION BY namespace, key ORDER BY version)
FROM history;

INSERT INTO history_marks (namespace, key, version, revision)
SELECT namespace, key, version, revision FROM history WHERE version % 64 = 0;

DROP TABLE history;
