-- How often each part of the state the writers keep in memory was changed: lock leases,
-- tasks and node leases, agents' sessions. A writer that finds a count moved since its
-- last batch reloads that part, and only that part.
INSERT INTO meta (name, value) VALUES ('locks_epoch', 0), ('tasks_epoch', 0), ('agents_epoch', 0)
ON CONFLICT (name) DO NOTHING;
