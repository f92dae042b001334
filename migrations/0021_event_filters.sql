-- ReadEvents and Subscribe look events up by their filter's narrowest condition
-- (contract v1.2, "Bounded at any size": a filtered read costs what it returns, not the
-- journal): the keys of a namespace, a namespace, resource keys, or a type, each with seq
-- so that a read resumes from where it stopped. A task's events have `events_by_task`.
CREATE INDEX events_by_key ON events (namespace, key, seq) WHERE key IS NOT NULL;
CREATE INDEX events_by_namespace ON events (namespace, seq) WHERE namespace IS NOT NULL;
CREATE INDEX events_by_resource ON events (resource_key, seq) WHERE resource_key IS NOT NULL;
CREATE INDEX events_by_type ON events (type, seq);
