-- Smarter task queues (contract v1.1, "Tasks: priority, labels, delay, result schema"):
-- a node has a priority (higher first) and labels a worker must all have to take it. The
-- runnable indexes lead with the node's label set and priority, so a worker's pick is one
-- ordered lookup per label subset it can serve, however many nodes wait.
ALTER TABLE nodes ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN label_key TEXT NOT NULL DEFAULT '';  -- sorted labels, joined by a unit separator
DROP INDEX nodes_runnable;
DROP INDEX nodes_runnable_by_task;
CREATE INDEX nodes_runnable ON nodes (label_key, priority DESC, runnable_since, task_id, node_id)
    WHERE state = 'PENDING' AND remaining_deps = 0;
CREATE INDEX nodes_runnable_by_task ON nodes (task_id, label_key, priority DESC, runnable_since, node_id)
    WHERE state = 'PENDING' AND remaining_deps = 0;
