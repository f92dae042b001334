-- ReadEvents and Subscribe look events up by their filter's narrowest condition
-- (contract v1.2, "Bounded at any size"): a namespace (its keys' prefix is checked on
-- what it finds), events that name a resource key (the prefix is checked likewise), or a
-- type, each in seq order so that a read resumes from where it stopped. A task's events
-- have `events_by_task`.
--
-- Every index here grows at its end (a namespace's, a type's, the journal's): a batch
-- that writes many keys or resources touches one page of each. An index by key or by
-- resource key would put each event beside that key's earlier ones, a page per key per
-- batch, which measured as about 9 us of the writer's CPU per durable CAS (half the rate
-- at 64 connections); see docs/performance.md.
CREATE INDEX events_by_namespace ON events (namespace, seq) WHERE namespace IS NOT NULL;
CREATE INDEX events_with_resource ON events (seq) WHERE resource_key IS NOT NULL;
CREATE INDEX events_by_type ON events (type, seq);
