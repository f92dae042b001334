-- The last outcome of each key is stored in batches (store/sqlite/leases.rs): until then it waits
-- in the writer connection's memory, and the journal event of the release or expiry holds
-- it durably. Keyed by resource key, `lock_outcomes` took one page per key a batch
-- released, and each page is a 4 KiB frame in the write-ahead log.
--
-- `lock_outcomes_through`: every outcome in a journal event up to this revision is in
-- `lock_outcomes`. Opening the database replays the release and expiry events after it.
INSERT OR IGNORE INTO meta (name, value)
    SELECT 'lock_outcomes_through', value FROM meta WHERE name = 'revision';
