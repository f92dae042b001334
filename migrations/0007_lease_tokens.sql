-- A lease is bound to the token that obtained it (contract v1.1, "Remote access and
-- authentication"): another token presenting its id gets 410 as if it did not exist.
-- NULL: obtained without a token (a Unix-socket connection acting as admin).
ALTER TABLE locks ADD COLUMN token_id TEXT;
ALTER TABLE nodes ADD COLUMN lease_token_id TEXT;
