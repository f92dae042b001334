-- History retention (BATON_HISTORY_KEEP) walks the history in revision order, a small
-- window at a time, removing versions too far behind their key's current one.
CREATE INDEX IF NOT EXISTS history_by_revision ON history (revision);
