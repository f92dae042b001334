-- TaskStatus pages a task's nodes in registration order (contract v1.2, "Bounded at any
-- size"): each page starts after a node's position, found through this index instead of
-- sorting every node of the task.
CREATE INDEX nodes_by_position ON nodes (task_id, position);
