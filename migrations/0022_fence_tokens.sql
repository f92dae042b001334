-- Fenced writes: a key's last outcome also keeps the largest fencing token of any lease on
-- that key that has ended, so a write fenced by an older token is refused after its lease
-- ended and another was granted (the live leases hold the tokens of the rest). Filled from
-- the journal's lock end events still kept.
ALTER TABLE lock_outcomes ADD COLUMN fencing_token INTEGER NOT NULL DEFAULT 0;
UPDATE lock_outcomes SET fencing_token = ended.token
FROM (SELECT resource_key, MAX(json_extract(data, '$.fencing_token')) AS token
      FROM events
      WHERE type IN ('lock.released', 'lock.expired', 'lock.broken') AND resource_key IS NOT NULL
      GROUP BY resource_key) AS ended
WHERE lock_outcomes.resource_key = ended.resource_key AND ended.token IS NOT NULL;
