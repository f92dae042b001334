-- How many nodes of each task are not yet COMPLETED, so CompleteNode can tell that it
-- finished its task without counting the task's nodes (O(1), not O(nodes)).

ALTER TABLE tasks ADD COLUMN unfinished_nodes INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET unfinished_nodes =
    (SELECT COUNT(*) FROM nodes WHERE nodes.task_id = tasks.task_id AND nodes.state != 'COMPLETED');
