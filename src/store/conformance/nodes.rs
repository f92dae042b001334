//! Tasks and their nodes.

use super::*;

pub(super) fn nodes_insert_and_read_a_task(db: &mut Db) {
    let nodes = [
        node("a", &[]),
        NewNode {
            result_schema: Some(r#"{"type":"object"}"#.into()),
            max_attempts: 5,
            ..node("b", &["a"])
        },
    ];
    db.batch(|s, _| s.insert_task(&task("t1", &nodes, 1)));
    assert_eq!(db.read(|s| s.task_status("t1")), Some(TaskStatus::Running));
    assert_eq!(db.read(|s| s.task_status("none")), None);
    let b = db.read(|s| s.node("t1", "b")).unwrap();
    assert_eq!(b.state, NodeState::Pending);
    assert_eq!((b.attempts, b.max_attempts), (0, 5));
    assert_eq!(b.result_schema.as_deref(), Some(r#"{"type":"object"}"#));
    assert!(b.lease_id.is_none() && b.lease_owner.is_none() && b.lease_token_id.is_none());
    assert!(db.read(|s| s.node("t1", "zz")).is_none());
    assert!(db.read(|s| s.node("none", "a")).is_none());
    assert!(!db.read(|s| s.has_running("t1")));
    db.batch(|s, _| s.set_task_status("t1", TaskStatus::Cancelled, T0 + 9));
    assert_eq!(
        db.read(|s| s.task_status("t1")),
        Some(TaskStatus::Cancelled)
    );
    let (tasks, nodes) = db.read(|s| s.task_counts());
    assert_eq!(tasks, [("cancelled".to_string(), 1)].into());
    assert_eq!(nodes, [("PENDING".to_string(), 2)].into());
}

pub(super) fn nodes_first_runnable_of_a_label_set_by_priority_then_age(db: &mut Db) {
    let gpu = label(&["gpu"]);
    let gpu_big = label(&["big", "gpu"]);
    // Task "old" registered first (seq 1), "new" later (seq 2).
    let old = [
        node("plain", &[]),
        NewNode {
            label_key: gpu_big.clone(),
            ..node("special", &[])
        },
        NewNode {
            label_key: gpu.clone(),
            ..node("g-old", &[])
        },
        node("blocked", &["plain"]),
        node("zz", &[]),
    ];
    let new = [
        NewNode {
            priority: 5,
            ..node("urgent", &[])
        },
        NewNode {
            label_key: gpu.clone(),
            ..node("g", &[])
        },
        NewNode {
            label_key: gpu.clone(),
            priority: -1,
            ..node("g-low", &[])
        },
    ];
    db.batch(|s, _| {
        s.insert_task(&task("old", &old, 1))?;
        s.insert_task(&task("new", &new, 2))
    });
    let runnable = |db: &Db, task: Option<&str>, key: &str| db.read(|s| first(s, task, key));
    // Priority first, whatever the age.
    assert_eq!(runnable(db, None, ""), pair("new", "urgent"));
    // Within a task: by age, then node id.
    assert_eq!(runnable(db, Some("old"), ""), pair("old", "plain"));
    // Only the label set asked for, never a subset or superset of it.
    assert_eq!(runnable(db, None, &gpu_big), pair("old", "special"));
    assert_eq!(runnable(db, None, &label(&["big"])), None);
    assert_eq!(runnable(db, None, &label(&["none"])), None);
    assert_eq!(runnable(db, Some("none"), ""), None);
    // The priority carried, and how long it has been runnable.
    let found = db.read(|s| s.first_runnable(None, "")).unwrap();
    assert_eq!((found.priority, found.runnable_since), (5, 2));
    // Older first, across tasks: "g-old" (seq 1) before "g" (seq 2); a lower priority last.
    assert_eq!(runnable(db, None, &gpu), pair("old", "g-old"));
    assert_eq!(runnable(db, Some("new"), &gpu), pair("new", "g"));
    // Take "urgent" and "plain" away: then the oldest, by task id and node id among those
    // runnable since the same seq ("zz" of "old"); a RUNNING node is never runnable, nor
    // one with unfinished dependencies ("blocked").
    db.batch(|s, _| {
        s.start_node("new", "urgent", &grant("l-urgent", "w"))?;
        s.start_node("old", "plain", &grant("l-plain", "w"))?;
        Ok(())
    });
    assert_eq!(runnable(db, None, ""), pair("old", "zz"));
    assert_eq!(runnable(db, Some("new"), ""), None);
    assert!(db.read(|s| s.has_running("new")));
}

pub(super) fn nodes_start_change_release_dependents_finish(db: &mut Db) {
    let nodes = [node("a", &[]), node("b", &["a"]), node("c", &["a", "b"])];
    db.batch(|s, _| s.insert_task(&task("t", &nodes, 1)));
    let g = NodeLeaseGrant {
        token_id: Some("tok"),
        session_id: Some("sess"),
        ..grant("lease-a", "worker-1")
    };
    // What its worker is told, read in the batch that starts it.
    let told = db.batch(|s, _| {
        let told = s.node_to_start("t", "a")?.unwrap();
        s.start_node("t", "a", &g)?;
        Ok(told)
    });
    assert_eq!(told.name.as_deref(), Some("node a"));
    assert_eq!(told.payload.as_deref(), Some(r#"{"n":"a"}"#));
    assert_eq!(told.dependencies, "[]");
    assert_eq!((told.attempts, told.max_attempts), (0, 3));
    assert_eq!(told.goal, "the goal");
    assert_eq!(told.task_context.as_deref(), Some(r#"{"repo":"x"}"#));
    assert!(db.read(|s| s.node_to_start("t", "zz")).is_none());
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!(a.state, NodeState::Running);
    // The count of attempts the grant gave.
    assert_eq!(a.attempts, 1);
    assert_eq!(a.lease_id.as_deref(), Some("lease-a"));
    assert_eq!(a.lease_owner.as_deref(), Some("worker-1"));
    assert_eq!(a.lease_token_id.as_deref(), Some("tok"));
    assert!(db.read(|s| s.has_running("t")));
    assert_eq!(db.read(|s| s.running_nodes("t")), ["a"]);
    assert_eq!(
        db.read(|s| s.nodes_of_session("sess")),
        [pair("t", "a").unwrap()]
    );
    assert_eq!(
        db.read(|s| s.nodes_leased_by("worker-1")),
        [pair("t", "a").unwrap()]
    );
    assert!(db.read(|s| s.nodes_leased_by("nobody")).is_empty());
    let leases = db.read(|s| s.node_leases());
    assert_eq!(leases.len(), 1);
    assert_eq!(
        (
            leases[0].task_id.as_str(),
            leases[0].node_id.as_str(),
            leases[0].lease_id.as_str(),
            leases[0].expires_at
        ),
        ("t", "a", "lease-a", T0 + 60_000)
    );
    db.batch(|s, _| s.extend_node_lease("t", "a", T0 + 99_000));
    assert_eq!(db.read(|s| s.node_leases())[0].expires_at, T0 + 99_000);
    assert_eq!(db.read(|s| s.node_result("t", "a")), None);
    // Completing `a`: its lease ends, `b` is runnable, `c` still waits for `b`.
    let last = db.batch(|s, _| {
        s.change_node(
            "t",
            "a",
            &change(NodeState::Completed, Some(r#"{"ok": true}"#)),
        )?;
        s.release_dependents("t", "a", 5)?;
        s.finish_one("t")
    });
    assert!(!last);
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!(a.state, NodeState::Completed);
    assert!(a.lease_id.is_none());
    assert_eq!(a.attempts, 1);
    assert_eq!(
        db.read(|s| s.node_result("t", "a")).as_deref(),
        Some(r#"{"ok": true}"#)
    );
    assert!(db.read(|s| s.node_leases()).is_empty());
    assert!(!db.read(|s| s.has_running("t")));
    assert_eq!(db.read(|s| first(s, Some("t"), "")), pair("t", "b"));
    let g = grant("lease-b", "worker-2");
    db.batch(|s, _| {
        s.start_node("t", "b", &g)?;
        s.change_node("t", "b", &change(NodeState::Completed, Some("1")))?;
        s.release_dependents("t", "b", 6)?;
        assert!(!s.finish_one("t")?);
        Ok(())
    });
    assert_eq!(db.read(|s| first(s, Some("t"), "")), pair("t", "c"));
    let g = grant("lease-c", "worker-2");
    let last = db.batch(|s, _| {
        let told = s.node_to_start("t", "c")?.unwrap();
        assert_eq!(told.dependencies, r#"["a","b"]"#);
        s.start_node("t", "c", &g)?;
        s.change_node("t", "c", &change(NodeState::Completed, Some("2")))?;
        s.release_dependents("t", "c", 7)?;
        s.finish_one("t")
    });
    assert!(last, "the last unfinished node");
    assert_eq!(db.read(|s| first(s, None, "")), None);
}

pub(super) fn nodes_holds_cancel_retry_and_resume(db: &mut Db) {
    let nodes = [
        NewNode {
            ready_at: Some(T0 + 1_000),
            ..node("held", &[])
        },
        node("a", &[]),
        node("b", &[]),
        node("c", &["a"]),
    ];
    db.batch(|s, _| s.insert_task(&task("t", &nodes, 1)));
    assert_eq!(
        db.read(|s| s.held_nodes()),
        [("t".to_string(), "held".to_string(), T0 + 1_000)]
    );
    assert!(db.read(|s| s.has_running("t")), "a held node counts");
    assert_eq!(db.read(|s| first(s, Some("t"), "")), pair("t", "a"));
    assert!(db.batch(|s, _| s.release_hold("t", "held", 3)));
    assert!(
        !db.batch(|s, _| s.release_hold("t", "held", 4)),
        "no longer held"
    );
    assert!(!db.batch(|s, _| s.release_hold("t", "a", 4)), "never held");
    assert!(db.read(|s| s.held_nodes()).is_empty());
    // Released at seq 3: the oldest runnable is now `a` (seq 1), then `b`, then `held`.
    let g = grant("la", "w");
    db.batch(|s, _| {
        s.start_node("t", "a", &g)?;
        s.change_node(
            "t",
            "a",
            &NodeChange {
                error: Some(r#"{"why":"boom"}"#),
                ..change(NodeState::Failed, None)
            },
        )?;
        // `b` later than `held`.
        s.change_node(
            "t",
            "b",
            &NodeChange {
                runnable_since: Some(9),
                ..change(NodeState::Pending, None)
            },
        )
    });
    assert_eq!(db.read(|s| first(s, Some("t"), "")), pair("t", "held"));
    assert_eq!(db.read(|s| s.failed_nodes("t")), ["a"]);
    let g = grant("lh", "w");
    db.batch(|s, _| s.start_node("t", "held", &g).map(|_| ()));
    // Cancel the PENDING ones only (held is RUNNING; b and c PENDING).
    let pending_cancelled = NodesMove {
        from: &[NodeState::Pending],
        to: NodeState::Cancelled,
        runnable_since: None,
        at_ms: T0 + 30,
    };
    assert_eq!(db.batch(|s, _| s.move_nodes("t", &pending_cancelled)), 2);
    assert_eq!(
        db.read(|s| s.node("t", "held")).unwrap().state,
        NodeState::Running
    );
    assert_eq!(
        db.read(|s| s.node("t", "b")).unwrap().state,
        NodeState::Cancelled
    );
    // The failed node tried again (its task stays failed: CANCELLED), then resumed.
    let retried = NodeRetry {
        state: NodeState::Cancelled,
        attempts: 0,
        runnable_since: 10,
        at_ms: T0 + 31,
    };
    db.batch(|s, _| s.retry_node("t", "a", &retried));
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!((a.state, a.attempts), (NodeState::Cancelled, 0));
    assert!(a.lease_id.is_none());
    let listed = db.read(|s| s.task_report("t", None, 10)).unwrap().nodes;
    let a = listed.iter().find(|n| n.node_id == "a").unwrap();
    assert_eq!((a.error.as_deref(), a.updated_at), (None, T0 + 31));
    assert!(db.read(|s| s.failed_nodes("t")).is_empty());
    let resumed = NodesMove {
        from: &[NodeState::Cancelled],
        to: NodeState::Pending,
        runnable_since: Some(11),
        at_ms: T0 + 32,
    };
    assert_eq!(db.batch(|s, _| s.move_nodes("t", &resumed)), 3);
    assert_eq!(
        db.read(|s| s.node("t", "b")).unwrap().state,
        NodeState::Pending
    );
    // `c` still waits for `a`; `a` and `b` are runnable since seq 11 (ties by node id).
    assert_eq!(db.read(|s| first(s, Some("t"), "")), pair("t", "a"));
    // Every open node (PENDING or RUNNING) cancelled, its lease ended.
    let open_cancelled = NodesMove {
        from: &[NodeState::Pending, NodeState::Running],
        to: NodeState::Cancelled,
        runnable_since: None,
        at_ms: T0 + 40,
    };
    assert_eq!(db.batch(|s, _| s.move_nodes("t", &open_cancelled)), 4);
    let held = db.read(|s| s.node("t", "held")).unwrap();
    assert_eq!(held.state, NodeState::Cancelled);
    assert!(held.lease_id.is_none() && held.lease_owner.is_none());
    assert!(held.lease_token_id.is_none());
    // Nothing left in those states: nothing moves.
    assert_eq!(db.batch(|s, _| s.move_nodes("t", &open_cancelled)), 0);
    assert!(!db.read(|s| s.has_running("t")));
    assert!(db.read(|s| s.node_leases()).is_empty());
    assert_eq!(db.read(|s| first(s, None, "")), None);
    // A FAILED node retried as PENDING is runnable since `seq`.
    db.batch(|s, _| {
        s.insert_task(&task("u", &[node("x", &[])], 50))?;
        s.start_node("u", "x", &grant("lx", "w"))?;
        s.change_node("u", "x", &change(NodeState::Failed, None))?;
        s.retry_node(
            "u",
            "x",
            &NodeRetry {
                state: NodeState::Pending,
                attempts: 0,
                runnable_since: 51,
                at_ms: T0 + 51,
            },
        )
    });
    let x = db.read(|s| s.first_runnable(None, "")).unwrap();
    assert_eq!(
        (x.task_id.as_str(), x.node_id.as_str(), x.runnable_since),
        ("u", "x", 51)
    );
    assert_eq!(db.read(|s| s.node("u", "x")).unwrap().attempts, 0);
}

pub(super) fn nodes_task_report_and_list_tasks_page(db: &mut Db) {
    let nodes: Vec<NewNode> = ["n3", "n1", "n2", "n0"]
        .iter()
        .map(|id| node(id, &[]))
        .collect();
    let nodes = [
        NewNode {
            result_schema: Some("{}".into()),
            ..node("dep", &[])
        },
        NewNode {
            max_attempts: 7,
            ..node("with", &["n0", "dep"])
        },
    ]
    .into_iter()
    .chain(nodes)
    .collect::<Vec<_>>();
    db.batch(|s, _| {
        s.insert_task(&task("t-a", &nodes, 1))?;
        s.insert_task(&task("t-b", &[node("x", &[])], 2))?;
        s.insert_task(&task("t-c", &[node("x", &[])], 3))?;
        s.set_task_status("t-b", TaskStatus::Completed, T0 + 4)?;
        s.start_node("t-a", "n1", &grant("l", "w"))?;
        s.start_node("t-a", "dep", &grant("l-dep", "w"))?;
        s.change_node(
            "t-a",
            "dep",
            &change(NodeState::Completed, Some(r#"{"ok": 1}"#)),
        )?;
        s.start_node("t-a", "n2", &grant("l-n2", "w"))?;
        s.change_node(
            "t-a",
            "n2",
            &NodeChange {
                error: Some(r#""boom""#),
                ..change(NodeState::Failed, None)
            },
        )?;
        Ok(())
    });
    let rows = db.read(|s| s.task_report("t-a", None, 4)).unwrap();
    let task = &rows.task;
    assert_eq!(
        (task.task_id.as_str(), task.goal.as_str(), task.status),
        ("t-a", "the goal", TaskStatus::Running)
    );
    assert_eq!((task.created_at, task.updated_at), (T0 + 1, T0 + 1));
    // Registration order, not id order.
    let ids = |nodes: &[crate::store::boundary::ListedNode]| {
        nodes.iter().map(|n| n.node_id.clone()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&rows.nodes), ["dep", "with", "n3", "n1"]);
    // Each node's row as stored: JSON as text, times in epoch ms.
    let dep = &rows.nodes[0];
    assert_eq!(dep.state, NodeState::Completed);
    assert_eq!(dep.result.as_deref(), Some(r#"{"ok": 1}"#));
    assert_eq!((dep.error.as_deref(), dep.attempts), (None, 1));
    assert_eq!(
        (dep.lease_owner.as_deref(), dep.lease_expires_at),
        (None, None)
    );
    assert_eq!(dep.updated_at, T0 + 20);
    let with = &rows.nodes[1];
    assert_eq!(with.state, NodeState::Pending);
    assert_eq!(with.dependencies, r#"["n0","dep"]"#);
    assert_eq!((with.attempts, with.max_attempts), (0, 7));
    assert_eq!(with.name.as_deref(), Some("node with"));
    assert_eq!(
        (with.result.as_deref(), with.error.as_deref()),
        (None, None)
    );
    let n1 = &rows.nodes[3];
    assert_eq!(n1.state, NodeState::Running);
    assert_eq!(n1.lease_owner.as_deref(), Some("w"));
    assert_eq!(n1.lease_expires_at, Some(T0 + 60_000));
    assert_eq!(n1.updated_at, T0 + 10);
    // The nodes counted in each state some node is in, over every node (not the page).
    let mut counts = rows.counts.clone();
    counts.sort_by_key(|(state, _)| state.as_str());
    assert_eq!(
        counts,
        [
            (NodeState::Completed, 1),
            (NodeState::Failed, 1),
            (NodeState::Pending, 3),
            (NodeState::Running, 1),
        ]
    );
    let rows = db.read(|s| s.task_report("t-a", Some("n1"), 10)).unwrap();
    assert_eq!(ids(&rows.nodes), ["n2", "n0"]);
    assert_eq!(rows.nodes[0].error.as_deref(), Some(r#""boom""#));
    assert!(db.read(|s| s.task_report("none", None, 10)).is_none());
    // Newest first; `after` a task: those created before it.
    let ids = |tasks: Vec<crate::store::boundary::TaskRow>| {
        tasks.into_iter().map(|t| t.task_id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(db.read(|s| s.list_tasks(None, None, 10))),
        ["t-c", "t-b", "t-a"]
    );
    let listed = db.read(|s| s.list_tasks(None, None, 2));
    assert_eq!(
        (listed[1].status, listed[1].created_at, listed[1].updated_at),
        (TaskStatus::Completed, T0 + 2, T0 + 4)
    );
    assert_eq!(ids(listed), ["t-c", "t-b"]);
    assert_eq!(
        ids(db.read(|s| s.list_tasks(None, Some("t-b"), 2))),
        ["t-a"]
    );
    assert_eq!(
        ids(db.read(|s| s.list_tasks(Some(TaskStatus::Running), None, 10))),
        ["t-c", "t-a"]
    );
    assert_eq!(
        ids(db.read(|s| s.list_tasks(Some(TaskStatus::Running), Some("t-c"), 10))),
        ["t-a"]
    );
    assert!(ids(db.read(|s| s.list_tasks(Some(TaskStatus::Failed), None, 10))).is_empty());
}
