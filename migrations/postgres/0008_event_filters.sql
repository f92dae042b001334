-- ReadEvents and Subscribe look events up by their filter's narrowest condition
-- (contract v1.2, "Bounded at any size"): a namespace (its keys' prefix is checked on
-- what it finds) or events that name a resource key (the prefix is checked likewise),
-- each in seq order so that a read resumes from where it stopped. A task's events have
-- `events_by_task`. The same indexes as SQLite's (migrations/0021_event_filters.sql says
-- why there are no others).
CREATE INDEX events_by_namespace ON events (namespace, seq) WHERE namespace IS NOT NULL;
CREATE INDEX events_with_resource ON events (seq) WHERE resource_key IS NOT NULL;
