-- Delayed nodes (contract v1.1, "Tasks: priority, labels, delay, result schema"): a node
-- registered with delay_ms, or retried with retry_delay_ms, is held back until ready_at
-- (epoch ms). The hold counts as one more unfinished dependency, so the runnable indexes
-- never see it; the daemon releases it when the time comes.
ALTER TABLE nodes ADD COLUMN ready_at INTEGER;
CREATE INDEX nodes_delayed ON nodes (task_id, node_id) WHERE ready_at IS NOT NULL;
