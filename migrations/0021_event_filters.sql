-- ReadEvents and Subscribe look events up by their filter's narrowest condition
-- (contract v1.2, "Bounded at any size"): a namespace (its keys' prefix is checked on
-- what it finds) or events that name a resource key (the prefix is checked likewise),
-- each in seq order so that a read resumes from where it stopped. A task's events have
-- `events_by_task`. A filter by type alone reads the journal in order, within a read's
-- scan budget.
--
-- Each index costs every write that fills it (measured under callgrind: about 5 k
-- instructions per event for an index by namespace or by type, a tenth of a durable
-- Set), and an index by key or by resource key more: it puts each event beside that
-- key's earlier ones, a page per key per batch (about 9 us of the writer's CPU per
-- durable CAS at 64 connections). See docs/performance.md.
CREATE INDEX events_by_namespace ON events (namespace, seq) WHERE namespace IS NOT NULL;
CREATE INDEX events_with_resource ON events (seq) WHERE resource_key IS NOT NULL;
