-- Two indexes nothing reads any more. The writer judges conflicts (by path, with the
-- `dir:`/`file:` hierarchy) from its copy of the live leases (methods/locks/held.rs),
-- and the statements left look leases up by key, lease id or session. Each index was
-- one more B-tree, and one more page in the write-ahead log, on every acquire and
-- every release.
DROP INDEX IF EXISTS locks_by_path;
DROP INDEX IF EXISTS locks_by_owner;
