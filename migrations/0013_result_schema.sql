-- A node may carry the JSON Schema its result must match (contract v1.1, "Tasks:
-- priority, labels, delay, result schema"); CompleteNode checks it.
ALTER TABLE nodes ADD COLUMN result_schema TEXT;
