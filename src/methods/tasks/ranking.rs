//! Which runnable node a worker gets: storage finds the first runnable node of each of
//! the worker's label sets (what its index answers), and this rule picks among them.

use std::cmp::Reverse;

use crate::error::Result;
use crate::store::boundary::{Nodes, RunnableNode};

/// A runnable node and how many labels it needs.
type Candidate = (RunnableNode, usize);

/// Where a candidate stands: the highest priority first, then the node runnable longest,
/// then the one that needs more of the worker's labels (a specialist's work goes to it
/// before work anyone could do), then by task and node id.
fn rank((node, labels): &Candidate) -> (Reverse<i64>, i64, Reverse<usize>, &str, &str) {
    (
        Reverse(node.priority),
        node.runnable_since,
        Reverse(*labels),
        &node.task_id,
        &node.node_id,
    )
}

/// Of the best candidate so far and another, the one that goes first ([`rank`]).
fn better(best: Option<Candidate>, candidate: Candidate) -> Option<Candidate> {
    match best {
        Some(best) if rank(&best) <= rank(&candidate) => Some(best),
        _ => Some(candidate),
    }
}

/// The node a worker who may take nodes of `label_keys` gets next, of one task or any:
/// storage finds the first runnable node of each label set, the rules pick among them.
pub(super) fn next_runnable(
    nodes: &dyn Nodes,
    task_id: Option<&str>,
    label_keys: &[String],
) -> Result<Option<RunnableNode>> {
    let mut best = None;
    for label_key in label_keys {
        if let Some(node) = nodes.first_runnable(task_id, label_key)? {
            best = better(best, (node, super::label_count(label_key)));
        }
    }
    Ok(best.map(|(node, _)| node))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(priority: i64, runnable_since: i64, task_id: &str, node_id: &str) -> RunnableNode {
        RunnableNode {
            priority,
            runnable_since,
            task_id: task_id.into(),
            node_id: node_id.into(),
        }
    }

    /// What a worker gets of the first runnable node of each of its label sets (each with
    /// how many labels it needs), asked in this order.
    fn chosen(found: &[(RunnableNode, usize)]) -> Option<(String, String)> {
        found
            .iter()
            .cloned()
            .fold(None, better)
            .map(|(n, _)| (n.task_id, n.node_id))
    }

    fn pair(task_id: &str, node_id: &str) -> Option<(String, String)> {
        Some((task_id.into(), node_id.into()))
    }

    #[test]
    fn nothing_runnable_chooses_nothing() {
        assert_eq!(chosen(&[]), None);
    }

    #[test]
    fn the_highest_priority_goes_first_however_young_and_plain() {
        let found = [
            (node(0, 1, "t", "old"), 2),
            (node(5, 9, "t", "urgent"), 0),
            (node(-3, 0, "t", "oldest"), 3),
        ];
        assert_eq!(chosen(&found), pair("t", "urgent"));
    }

    #[test]
    fn among_equal_priorities_the_node_runnable_longest() {
        let found = [(node(1, 7, "a", "n"), 3), (node(1, 4, "z", "n"), 0)];
        assert_eq!(chosen(&found), pair("z", "n"));
    }

    #[test]
    fn among_equals_the_node_that_needs_more_of_the_workers_labels() {
        let found = [
            (node(0, 1, "t", "plain"), 0),
            (node(0, 1, "t", "special"), 2),
            (node(0, 1, "t", "gpu"), 1),
        ];
        assert_eq!(chosen(&found), pair("t", "special"));
    }

    #[test]
    fn last_by_task_then_node_id() {
        let found = [
            (node(0, 1, "t2", "a"), 1),
            (node(0, 1, "t1", "b"), 1),
            (node(0, 1, "t1", "c"), 1),
        ];
        assert_eq!(chosen(&found), pair("t1", "b"));
        // Whatever order the label sets were asked in.
        let mut reversed = found.to_vec();
        reversed.reverse();
        assert_eq!(chosen(&reversed), pair("t1", "b"));
    }

    #[test]
    fn a_label_key_counts_its_labels() {
        assert_eq!(super::super::label_count(""), 0);
        assert_eq!(super::super::label_count("gpu"), 1);
        assert_eq!(super::super::label_count("big\u{1f}gpu"), 2);
    }
}
