-- An agent name belongs to the token that first registered it (contract v1.2, "Trust on
-- every surface"): only that token, or an admin, registers it again, and so reads its
-- inbox. `claimed_at` says when it was claimed; with a claim, a NULL `owner_token_id` is
-- the Unix socket's admin. A name with a live session belongs to that session's token;
-- a name registered before owners were kept, with no live session, goes to the next
-- token that registers it.
ALTER TABLE agents ADD COLUMN claimed_at INTEGER;
ALTER TABLE agents ADD COLUMN owner_token_id TEXT;
UPDATE agents
   SET claimed_at = (SELECT started_at FROM sessions WHERE sessions.name = agents.name),
       owner_token_id = (SELECT token_id FROM sessions WHERE sessions.name = agents.name)
 WHERE name IN (SELECT name FROM sessions);
