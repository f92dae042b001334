-- Fenced writes: a key's last outcome also keeps the largest fencing token of any lease on
-- that key that has ended (see the SQLite migration 0022), filled from the journal's lock
-- end events still kept.
ALTER TABLE lock_outcomes ADD COLUMN IF NOT EXISTS fencing_token BIGINT NOT NULL DEFAULT 0;
UPDATE lock_outcomes SET fencing_token = ended.token
FROM (SELECT resource_key, MAX((data::jsonb ->> 'fencing_token')::bigint) AS token
      FROM events
      WHERE type IN ('lock.released', 'lock.expired', 'lock.broken') AND resource_key IS NOT NULL
      GROUP BY resource_key) AS ended
WHERE lock_outcomes.resource_key = ended.resource_key AND ended.token IS NOT NULL;
