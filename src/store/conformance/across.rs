//! Batches, what reads see, byte order, shared waits, foreseen outcomes, and the edges of reads and writes: cases across areas.

use super::*;

/// A request that fails before it writes is undone alone; the batch's other requests
/// commit.
pub(super) fn batch_request_failing_before_writing_leaves_the_rest(db: &mut Db) {
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    // Request 1 writes and succeeds.
    writes.start_request().unwrap();
    set(writes.storage(), "ns", "a", Some("1"), 1, None).unwrap();
    writes
        .storage()
        .append_event(1, T0, &event(EventType::KvSet, "{}"))
        .unwrap();
    // Request 2 reads, then is refused.
    writes.start_request().unwrap();
    assert!(writes.storage().stored("ns", "b").unwrap().is_none());
    writes.undo_request().unwrap();
    // Request 3 writes and succeeds.
    writes.start_request().unwrap();
    set(writes.storage(), "ns", "c", Some("3"), 2, None).unwrap();
    writes
        .storage()
        .append_event(2, T0, &event(EventType::KvSet, "{}"))
        .unwrap();
    writes.storage().set_head_revision(2).unwrap();
    writes.commit().unwrap();
    assert_eq!(keys(&db.read(|s| s.list("ns", "", None, 10)).0), ["a", "c"]);
    assert_eq!(db.read(|s| s.head_revision()), 2);
    assert_eq!(db.read(|s| s.length()), 2);
}

/// A request that fails after it wrote cannot be undone alone (the boundary lets an engine
/// refuse): then the writer rolls the whole batch back, and nothing of it is stored.
pub(super) fn batch_request_failing_after_writing_rolls_back_the_batch(db: &mut Db) {
    db.batch(|s, _| set(s, "ns", "kept", Some("0"), 1, None));
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.start_request().unwrap();
    set(writes.storage(), "ns", "a", Some("1"), 2, None).unwrap();
    writes.start_request().unwrap();
    set(writes.storage(), "ns", "b", Some("2"), 3, None).unwrap();
    writes
        .storage()
        .insert_lease(&lease("tool:x", "l", "ann", 1))
        .unwrap();
    match writes.undo_request() {
        // Undone alone: the rest of the batch commits.
        Ok(()) => {
            writes.commit().unwrap();
            assert_eq!(
                keys(&db.read(|s| s.list("ns", "", None, 10)).0),
                ["a", "kept"]
            );
            assert!(db.read(|s| s.leases("", None)).is_empty());
        }
        Err(err) => {
            assert!(matches!(err, Error::Unavailable(_)), "{err}");
            writes.rollback();
            assert_eq!(keys(&db.read(|s| s.list("ns", "", None, 10)).0), ["kept"]);
            assert!(db.read(|s| s.leases("", None)).is_empty());
        }
    }
    // The connection serves the next batch.
    db.batch(|s, _| set(s, "ns", "after", Some("1"), 4, None));
    assert_eq!(
        keys(&db.read(|s| s.list("ns", "", None, 10)).0),
        ["after", "kept"]
    );
}

/// A batch that fails is rolled back whole: records, events, leases, nodes, agents,
/// tokens, remembered answers, the head and the fencing counter.
pub(super) fn batch_rollback_leaves_nothing(db: &mut Db) {
    let nodes = [node("a", &[])];
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.start_request().unwrap();
    let s = writes.storage();
    set(s, "ns", "a", Some("1"), 1, None).unwrap();
    s.append_event(1, T0, &event(EventType::KvSet, "{}"))
        .unwrap();
    s.insert_lease(&lease("tool:x", "l", "ann", 1)).unwrap();
    s.store_fencing_token(1).unwrap();
    s.insert_task(&task("t", &nodes, 1)).unwrap();
    s.insert_session(&session("ann", "s")).unwrap();
    s.insert_token(&NewToken {
        token_id: "t1",
        name: "n",
        secret_hash: "h",
        scopes: &[],
        created_at_ms: T0,
        expires_at_ms: None,
    })
    .unwrap();
    s.remember("k", "Set", &[1], "{}", T0).unwrap();
    s.set_head_revision(1).unwrap();
    writes.rollback();
    let nothing = db.read(|s| {
        Ok((
            s.live("ns", "a")?.is_none(),
            s.length()? == 0,
            s.leases("", None)?.is_empty(),
            s.last_fencing_token()? == 0,
            s.task_status("t")?.is_none(),
            s.sessions()?.is_empty(),
            s.all_tokens()?.is_empty(),
            s.remembered("k")?.is_none(),
            s.head_revision()? == 0,
        ))
    });
    assert_eq!(
        nothing,
        (true, true, true, true, true, true, true, true, true)
    );
    // And the next batch starts clean.
    assert_eq!(db.batch(|s, _| s.head_revision()), 0);
}

/// The read side sees the last commit, never a batch still open.
pub(super) fn reads_see_only_what_was_committed(db: &mut Db) {
    db.batch(|s, _| set(s, "ns", "a", Some("1"), 1, None));
    let writes = db.writes.as_deref_mut().unwrap();
    writes.begin(&Foreseen::default()).unwrap();
    writes.start_request().unwrap();
    set(writes.storage(), "ns", "a", Some("2"), 2, None).unwrap();
    set(writes.storage(), "ns", "b", Some("2"), 3, None).unwrap();
    writes.storage().set_head_revision(3).unwrap();
    // Read while the batch is open (its writes sent: the writer read after them).
    assert_eq!(
        writes.storage().live("ns", "a").unwrap().unwrap().version,
        2
    );
    let store = db.store.as_ref().unwrap();
    let seen = store
        .read(|s| {
            Ok((
                s.live("ns", "a")?.map(|r| r.version),
                s.live("ns", "b")?.is_some(),
            ))
        })
        .unwrap();
    assert_eq!(seen, (Some(1), false));
    writes.commit().unwrap();
    let seen = db.read(|s| Ok((s.live("ns", "a")?.map(|r| r.version), s.head_revision()?)));
    assert_eq!(seen, (Some(2), 3));
}

/// Keys sort and match by their bytes (upper case before lower, multi-byte UTF-8 after
/// ASCII), whatever the database's locale.
pub(super) fn keys_are_ordered_and_matched_by_bytes(db: &mut Db) {
    let names = ["b", "B", "_x", "é1", "éa", "Z", "a", "ü"];
    db.batch(|s, _| {
        for (i, key) in names.iter().enumerate() {
            let seq = i as i64 + 1;
            set(s, "ns", key, Some("1"), seq, None)?;
            s.insert_lease(&lease(
                &format!("tool:{key}"),
                &format!("l{i}"),
                key,
                seq as u64,
            ))?;
            s.insert_session(&session(key, &format!("s{i}")))?;
            s.append_event(
                seq,
                T0,
                &NewEvent {
                    namespace: Some("ns"),
                    key: Some(key),
                    resource_key: Some(&format!("tool:{key}")),
                    ..event(EventType::KvSet, "{}")
                },
            )?;
        }
        s.set_head_revision(names.len() as i64)
    });
    let sorted = ["B", "Z", "_x", "a", "b", "é1", "éa", "ü"];
    assert_eq!(keys(&db.read(|s| s.list("ns", "", None, 100)).0), sorted);
    assert_eq!(
        db.read(|s| s.export(None, None, 100))
            .0
            .iter()
            .map(|r| r.key.as_str())
            .collect::<Vec<_>>(),
        sorted
    );
    assert_eq!(
        db.read(|s| s.leases("tool:", None))
            .iter()
            .map(|l| l.owner.as_str())
            .collect::<Vec<_>>(),
        sorted
    );
    assert_eq!(
        db.read(|s| s.lease_page("tool:", None, Some(("tool:_x", 3)), 3))
            .iter()
            .map(|l| l.owner.as_str())
            .collect::<Vec<_>>(),
        ["a", "b", "é1"]
    );
    assert_eq!(
        db.read(|s| s.sessions())
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        sorted
    );
    assert_eq!(
        keys(&db.read(|s| s.list("ns", "é", None, 100)).0),
        ["é1", "éa"]
    );
    assert_eq!(
        keys(&db.read(|s| s.list("ns", "", Some("b"), 100)).0),
        ["é1", "éa", "ü"]
    );
    assert_eq!(keys(&db.read(|s| s.list("ns", "B", None, 100)).0), ["B"]);
    let read = |f: &str| {
        let (events, _) = db.read(|s| s.read_events(0, 8, &filter(f), 100, 1 << 20));
        events
            .into_iter()
            .map(|e| e.key.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        read(r#"{"namespace": "ns", "key_prefix": "é"}"#),
        ["é1", "éa"]
    );
    assert_eq!(read(r#"{"key_prefix": "B"}"#), ["B"]);
    assert_eq!(read(r#"{"resource_prefix": "tool:é"}"#), ["é1", "éa"]);
    assert_eq!(read(r#"{"resource_prefix": "tool:Z"}"#), ["Z"]);
}

/// Waits to acquire in one order, where the daemons sharing a database keep them (an
/// engine with none keeps them in the writer's memory).
pub(super) fn shared_waits_in_one_order(db: &mut Db) {
    let wait = |key: &str, connection: u64| crate::store::boundary::QueuedWait {
        queued: 0,
        resource_key: key.into(),
        connection,
        owner: format!("o{connection}"),
        mode: LockMode::Exclusive,
        slots: None,
    };
    let order = db.batch(|s, _| {
        let Some(waits) = s.shared_waits() else {
            return Ok(None);
        };
        let first = waits.queue_wait(&wait("tool:a", 10))?;
        let second = waits.queue_wait(&wait("tool:b", 11))?;
        let third = waits.queue_wait(&wait("tool:a", (1 << 40) + 1))?;
        assert!(first < second && second < third);
        Ok(Some((first, second, third)))
    });
    let Some((first, second, third)) = order else {
        eprintln!(
            "{:?} keeps no shared waits (one daemon per database)",
            db.engine
        );
        return;
    };
    let queued = db.batch(|s, _| s.shared_waits().unwrap().queued_waits());
    assert_eq!(
        queued.iter().map(|w| w.queued).collect::<Vec<_>>(),
        [first, second, third]
    );
    assert_eq!(queued[2].connection, (1 << 40) + 1);
    assert_eq!(queued[0].owner, "o10");
    db.batch(|s, _| {
        let waits = s.shared_waits().unwrap();
        waits.end_wait(second)?;
        // A silent daemon's connections: [2^40, 2^41).
        waits.end_waits_of((1 << 40)..(1 << 41))
    });
    let queued = db.batch(|s, _| s.shared_waits().unwrap().queued_waits());
    assert_eq!(queued.iter().map(|w| w.queued).collect::<Vec<_>>(), [first]);
}

/// Outcomes a batch was foreseen to read (read ahead by an engine whose reads are round
/// trips) answer as those read on demand, and follow what the batch records.
pub(super) fn outcomes_foreseen_agree_with_those_read(db: &mut Db) {
    db.batch(|s, o| end_lease(s, o, 1, &ended("tool:a", "completed", "ann", T0 + 1)));
    let writes = db.writes();
    let foreseen = Foreseen {
        lock_outcomes: vec!["tool:a".into(), "tool:b".into()],
    };
    writes.begin(&foreseen).unwrap();
    writes.start_request().unwrap();
    let (s, o) = (writes.storage(), writes.outcomes());
    assert_eq!(o.previous("tool:a").unwrap().unwrap().owner, "ann");
    assert!(o.previous("tool:b").unwrap().is_none());
    end_lease(s, o, 2, &ended("tool:b", "failed", "bob", T0 + 2)).unwrap();
    end_lease(s, o, 3, &ended("tool:a", "completed", "cy", T0 + 3)).unwrap();
    // A request that joins late.
    writes
        .foresee(&Foreseen {
            lock_outcomes: vec!["tool:c".into(), "tool:a".into()],
        })
        .unwrap();
    let o = writes.outcomes();
    assert_eq!(o.previous("tool:a").unwrap().unwrap().owner, "cy");
    assert_eq!(o.previous("tool:b").unwrap().unwrap().outcome, "failed");
    assert!(o.previous("tool:c").unwrap().is_none());
    writes.commit().unwrap();
    db.batch(|_, o| {
        assert_eq!(o.previous("tool:a")?.unwrap().owner, "cy");
        assert_eq!(o.previous("tool:b")?.unwrap().owner, "bob");
        Ok(())
    });
}

/// A node put back to PENDING with a `ready_at` is held (one more unfinished dependency)
/// until `release_hold`; without one it is runnable since the seq given.
pub(super) fn nodes_back_to_pending_held_until_a_time(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_task(&task("t", &[node("a", &[]), node("b", &[])], 1))?;
        s.start_node("t", "a", &grant("la", "w"))?;
        s.start_node("t", "b", &grant("lb", "w"))?;
        Ok(())
    });
    db.batch(|s, _| {
        s.change_node(
            "t",
            "a",
            &NodeChange {
                error: Some(r#"{"retry":true}"#),
                runnable_since: Some(5),
                ready_at: Some(T0 + 5_000),
                ..change(NodeState::Pending, None)
            },
        )?;
        s.change_node(
            "t",
            "b",
            &NodeChange {
                runnable_since: Some(6),
                ..change(NodeState::Pending, None)
            },
        )
    });
    let a = db.read(|s| s.node("t", "a")).unwrap();
    assert_eq!((a.state, a.attempts), (NodeState::Pending, 1));
    assert!(a.lease_id.is_none());
    assert!(db.read(|s| s.node_leases()).is_empty());
    assert_eq!(
        db.read(|s| s.held_nodes()),
        [("t".to_string(), "a".to_string(), T0 + 5_000)]
    );
    assert!(db.read(|s| s.has_running("t")), "held");
    assert_eq!(db.read(|s| first(s, None, "")), pair("t", "b"));
    assert!(db.batch(|s, _| s.release_hold("t", "a", 7)));
    // `b` (runnable since 6) before `a` (since 7).
    assert_eq!(db.read(|s| first(s, None, "")), pair("t", "b"));
    db.batch(|s, _| s.start_node("t", "b", &grant("lb2", "w")).map(|_| ()));
    assert_eq!(db.read(|s| first(s, None, "")), pair("t", "a"));
    // With the attempts it had, for the rules to count the next one.
    assert_eq!(db.read(|s| s.node_to_start("t", "a")).unwrap().attempts, 1);
    let grant = NodeLeaseGrant {
        attempts: 2,
        ..grant("la2", "w")
    };
    db.batch(|s, _| s.start_node("t", "a", &grant).map(|_| ()));
    assert_eq!(db.read(|s| s.node("t", "a")).unwrap().attempts, 2);
}

/// The head revision and the fencing counter are only ever raised: a lower value stored
/// (a writer whose memory went back) leaves them as they were, so no revision or token is
/// handed out twice.
pub(super) fn head_and_fencing_counter_are_only_raised(db: &mut Db) {
    db.batch(|s, _| {
        s.set_head_revision(10)?;
        s.store_fencing_token(10)
    });
    db.batch(|s, _| {
        s.set_head_revision(4)?;
        s.store_fencing_token(4)
    });
    let stored = db.read(|s| Ok((s.head_revision()?, s.last_fencing_token()?)));
    assert_eq!(stored, (10, 10));
    // Within one batch too.
    let in_batch = db.batch(|s, _| {
        s.store_fencing_token(12)?;
        s.store_fencing_token(11)?;
        s.last_fencing_token()
    });
    assert_eq!(in_batch, 12);
    db.reopen();
    assert_eq!(
        db.batch(|s, _| Ok((s.head_revision()?, s.last_fencing_token()?))),
        (10, 12)
    );
}

/// Edges the rules meet: reads past the head or before the first version, pages after
/// something absent, a second answer for one idempotency key, a name's second session.
pub(super) fn edges_of_reads_and_writes(db: &mut Db) {
    db.batch(|s, _| {
        set(s, "ns", "a", Some("1"), 1, None)?;
        s.append_event(1, T0, &event(EventType::KvSet, "{}"))?;
        s.set_head_revision(1)?;
        s.insert_task(&task("t1", &[node("a", &[])], 1))?;
        s.insert_session(&session("x", "s1"))?;
        s.remember("k", "Set", &[1], "{}", T0)
    });
    // A reader ahead of the head resumes where it is.
    let (events, next) = db.read(|s| s.read_events(9, 1, &filter("{}"), 10, 1000));
    assert_eq!((events.len(), next), (0, 9));
    assert!(db.read(|s| s.history("ns", "a", Some(1), 10)).is_empty());
    // After a node or task that does not exist: nothing.
    let report = db.read(|s| s.task_report("t1", Some("zz"), 10)).unwrap();
    assert!(report.nodes.is_empty());
    assert_eq!(report.task.task_id, "t1");
    assert!(db.read(|s| s.list_tasks(None, Some("zz"), 10)).is_empty());
    assert_eq!(db.read(|s| s.inbox_count("x", 3, Some(1))), 0);
    // A second answer for a key replaces the first.
    db.batch(|s, _| s.remember("k", "Set", &[2], r#"{"x":1}"#, T0 + 1));
    let answer = db.read(|s| s.remembered("k")).unwrap();
    assert_eq!(
        (answer.request_hash, answer.response),
        (vec![2], r#"{"x":1}"#.into())
    );
    // A name has one session: a second is refused, and its batch stores nothing.
    db.batch(|s, _| s.delete_session("nobody"));
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.start_request().unwrap();
    set(writes.storage(), "ns", "b", Some("1"), 2, None).unwrap();
    let refused = writes.storage().insert_session(&session("x", "s2"));
    match refused {
        // Says which constraint: SQLite's "UNIQUE constraint failed: sessions.name",
        // PostgreSQL's "duplicate key value violates unique constraint ... (SQLSTATE 23505)".
        Err(Error::Internal(why)) => assert!(why.to_lowercase().contains("unique"), "{why}"),
        other => panic!("a second session of a name: {other:?}"),
    }
    assert!(writes.undo_request().is_err());
    writes.rollback();
    assert_eq!(db.read(|s| s.session("x")).unwrap().session_id, "s1");
    assert!(db.read(|s| s.live("ns", "b")).is_none());
}

/// The writer's reads of leases in a batch (which an engine may answer from what it read
/// as the batch began) agree with the store and follow the batch's own writes.
pub(super) fn leases_read_in_a_batch_follow_its_writes(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_lease(&lease("tool:a", "l1", "ann", 1))?;
        s.insert_lease(&lease("tool:b", "l2", "bob", 2))?;
        s.store_fencing_token(2)
    });
    // A writer that starts over reads every live lease as its first batch begins.
    db.reopen();
    let ids = |rows: Vec<crate::store::boundary::LeaseRow>| {
        rows.into_iter().map(|l| l.lease_id).collect::<Vec<_>>()
    };
    db.batch(|s, _| {
        assert_eq!(ids(s.leases("", None)?), ["l1", "l2"]);
        assert_eq!(ids(s.leases("tool:b", None)?), ["l2"]);
        assert_eq!(ids(s.leases("", Some("ann"))?), ["l1"]);
        assert_eq!(s.last_fencing_token()?, 2);
        s.delete_lease("tool:a", "l1")?;
        s.insert_lease(&lease("tool:c", "l3", "ann", 3))?;
        assert_eq!(ids(s.leases("", None)?), ["l2", "l3"]);
        assert_eq!(ids(s.leases("", Some("ann"))?), ["l3"]);
        s.extend_lease("tool:c", "l3", T0 + 1)?;
        assert_eq!(s.leases("tool:c", None)?[0].expires_at, T0 + 1);
        s.store_fencing_token(3)
    });
    assert_eq!(ids(db.read(|s| s.leases("", None))), ["l2", "l3"]);
    db.batch(|s, _| {
        assert_eq!(ids(s.leases("", None)?), ["l2", "l3"]);
        assert_eq!(s.last_fencing_token()?, 3);
        Ok(())
    });
}
