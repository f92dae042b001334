-- AckMessages past the newest message of an inbox is refused now (contract v1.2, "Trust
-- on every surface"). Before, such a cursor was stored, and every later message with a
-- seq below it stayed hidden. A cursor past its inbox's newest message goes back to that
-- message (0 for an empty inbox), so that messages from now on are seen again.
UPDATE inbox_cursors
   SET acked = COALESCE((SELECT MAX(seq) FROM inbox WHERE inbox.name = inbox_cursors.name), 0)
 WHERE acked > COALESCE((SELECT MAX(seq) FROM inbox WHERE inbox.name = inbox_cursors.name), 0);
