-- Lease ids are the secrets of whoever obtained them (contract v1.1, "Credentials").
-- Journals written before it carried them in lock and node events, where ReadEvents,
-- Subscribe and recent_events handed them to anyone: drop them from stored events.
UPDATE events SET data = json_remove(data, '$.lease_id')
 WHERE type IN ('lock.acquired', 'lock.released', 'lock.expired',
                'node.acquired', 'node.rolled_back')
   AND json_valid(data)
   AND json_type(data, '$.lease_id') IS NOT NULL;
