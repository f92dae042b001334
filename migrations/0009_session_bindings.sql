-- What a session holds ends with it (contract v1.1, "Agents and sessions"): locks
-- acquired with its session_id, node leases taken with it and keys written with it.
-- The id is the session's secret: never shown, only matched.
ALTER TABLE locks ADD COLUMN session_id TEXT;
ALTER TABLE nodes ADD COLUMN lease_session_id TEXT;
ALTER TABLE records ADD COLUMN session_id TEXT;
CREATE INDEX locks_by_session ON locks (session_id) WHERE session_id IS NOT NULL;
CREATE INDEX nodes_by_session ON nodes (lease_session_id) WHERE lease_session_id IS NOT NULL;
CREATE INDEX records_by_session ON records (session_id) WHERE session_id IS NOT NULL;
