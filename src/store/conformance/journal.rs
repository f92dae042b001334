//! The journal: appends, filtered reads, limits, the scan budget, removal.

use super::*;

pub(super) fn journal_append_and_read_with_filters(db: &mut Db) {
    db.batch(|s, _| {
        let custom = EventType::from_client("custom.build").unwrap();
        let all = [
            NewEvent {
                namespace: Some("app"),
                key: Some("cfg/a"),
                actor: Some("ann"),
                ..event(EventType::KvSet, r#"{"value": 1}"#)
            },
            NewEvent {
                namespace: Some("app"),
                key: Some("other"),
                ..event(EventType::KvDelete, "{}")
            },
            NewEvent {
                resource_key: Some("file:src/main.rs"),
                ..event(EventType::LockAcquired, "{}")
            },
            NewEvent {
                task_id: Some("t1"),
                node_id: Some("n1"),
                ..event(EventType::NodeCompleted, "{}")
            },
            NewEvent {
                namespace: Some("apps"),
                key: Some("cfg/b"),
                ..event(EventType::KvSet, "{}")
            },
            NewEvent {
                resource_key: Some("file:src/lib.rs"),
                ..event(EventType::LockReleased, "{}")
            },
            event(custom, "[]"),
        ];
        for (i, e) in all.iter().enumerate() {
            s.append_event(i as i64 + 1, T0 + i as i64, e)?;
        }
        s.set_head_revision(7)?;
        // The write side reads its own batch.
        assert_eq!(s.read_events(0, 7, &filter("{}"), 100, 1 << 20)?.0.len(), 7);
        Ok(())
    });
    let read = |db: &Db, f: &str| db.read(|s| s.read_events(0, 7, &filter(f), 100, 1 << 20));
    let (events, next) = read(db, "{}");
    assert_eq!((seqs(&events), next), (vec![1, 2, 3, 4, 5, 6, 7], 7));
    let first = &events[0];
    assert_eq!(first.kind, "kv.set");
    assert_eq!(first.actor.as_deref(), Some("ann"));
    assert_eq!(
        (first.namespace.as_deref(), first.key.as_deref()),
        (Some("app"), Some("cfg/a"))
    );
    assert_eq!(first.data.get(), r#"{"value": 1}"#);
    assert_eq!(first.at, crate::clock::format_ms(T0));
    assert_eq!(events[6].at, crate::clock::format_ms(T0 + 6));
    assert_eq!(events[3].node_id.as_deref(), Some("n1"));
    assert_eq!(events[6].kind, "custom.build");
    assert_eq!(seqs(&read(db, r#"{"types": ["kv.set"]}"#).0), [1, 5]);
    assert_eq!(seqs(&read(db, r#"{"types": ["kv.*"]}"#).0), [1, 2, 5]);
    assert_eq!(
        seqs(&read(db, r#"{"types": ["lock.*", "custom.build"]}"#).0),
        [3, 6, 7]
    );
    assert_eq!(seqs(&read(db, r#"{"namespace": "app"}"#).0), [1, 2]);
    assert_eq!(
        seqs(&read(db, r#"{"namespace": "app", "key_prefix": "cfg/"}"#).0),
        [1]
    );
    assert_eq!(seqs(&read(db, r#"{"key_prefix": "cfg/"}"#).0), [1, 5]);
    assert_eq!(
        seqs(&read(db, r#"{"resource_prefix": "file:src/"}"#).0),
        [3, 6]
    );
    assert_eq!(
        seqs(&read(db, r#"{"resource_prefix": "file:src/m"}"#).0),
        [3]
    );
    assert_eq!(seqs(&read(db, r#"{"task_id": "t1"}"#).0), [4]);
    assert_eq!(
        seqs(&read(db, r#"{"namespace": "app", "types": ["kv.delete"]}"#).0),
        [2]
    );
    // Up to `head` only, and after `since_seq`.
    let (events, next) = db.read(|s| s.read_events(2, 5, &filter("{}"), 100, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![3, 4, 5], 5));
    // Nothing matched: resume from the head.
    let (events, next) = read(db, r#"{"task_id": "none"}"#);
    assert_eq!((events.len(), next), (0, 7));
    assert_eq!(db.read(|s| s.length()), 7);
    assert_eq!(db.read(|s| s.oldest_seq()), 1);
}

pub(super) fn journal_read_stops_at_limit_and_bytes_and_resumes(db: &mut Db) {
    let big = format!(r#""{}""#, "x".repeat(1000));
    db.batch(|s, _| {
        for seq in 1..=10 {
            let kind = if seq % 2 == 0 {
                EventType::KvSet
            } else {
                EventType::KvDelete
            };
            s.append_event(seq, T0, &event(kind, &big))?;
        }
        s.set_head_revision(10)?;
        Ok(())
    });
    let (events, next) = db.read(|s| s.read_events(0, 10, &filter("{}"), 3, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![1, 2, 3], 3));
    let (events, next) =
        db.read(|s| s.read_events(0, 10, &filter(r#"{"types": ["kv.set"]}"#), 2, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![2, 4], 4));
    let (events, next) =
        db.read(|s| s.read_events(4, 10, &filter(r#"{"types": ["kv.set"]}"#), 2, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![6, 8], 8));
    // The byte budget: the first event always, then about `max_bytes`.
    let (events, next) = db.read(|s| s.read_events(0, 10, &filter("{}"), 100, 10));
    assert_eq!((seqs(&events), next), (vec![1], 1));
    let (events, next) = db.read(|s| s.read_events(0, 10, &filter("{}"), 100, 2500));
    assert!(
        (2..=4).contains(&events.len()),
        "about 2,500 bytes of 1,002-byte events: {:?}",
        seqs(&events)
    );
    assert_eq!(next, *seqs(&events).last().unwrap());
}

pub(super) fn journal_scan_budget_gives_a_next_to_resume_from(db: &mut Db) {
    // More events in one namespace than a read examines (10,000), none of the type asked
    // for, then one that is.
    const N: i64 = 10_050;
    db.batch(|s, _| {
        for seq in 1..=N {
            s.append_event(
                seq,
                T0,
                &NewEvent {
                    namespace: Some("ns"),
                    key: Some("k"),
                    ..event(EventType::KvDelete, "{}")
                },
            )?;
        }
        s.append_event(
            N + 1,
            T0,
            &NewEvent {
                namespace: Some("ns"),
                key: Some("k"),
                ..event(EventType::KvSet, "{}")
            },
        )?;
        s.set_head_revision(N + 1)?;
        Ok(())
    });
    let wanted = filter(r#"{"namespace": "ns", "types": ["kv.set"]}"#);
    let head = N as u64 + 1;
    let (events, next) = db.read(|s| s.read_events(0, head, &wanted, 100, 1 << 20));
    assert!(events.is_empty());
    assert!(
        next > 0 && next < head,
        "a read that ran out of budget resumes past what it examined, before the head: {next}"
    );
    let (events, next) = db.read(|s| s.read_events(next, head, &wanted, 100, 1 << 20));
    assert_eq!((seqs(&events), next), (vec![head], head));
}

pub(super) fn journal_remove_before_moves_the_oldest_seq(db: &mut Db) {
    db.batch(|s, _| {
        for seq in 1..=6 {
            s.append_event(seq, T0, &event(EventType::KvSet, "{}"))?;
        }
        s.set_head_revision(6)?;
        Ok(())
    });
    let removed = db.batch(|s, outcomes| {
        outcomes.store_held()?;
        s.remove_before(4)
    });
    assert_eq!(removed, 3);
    assert_eq!(db.read(|s| s.oldest_seq()), 4);
    assert_eq!(db.read(|s| s.length()), 3);
    let (events, _) = db.read(|s| s.read_events(0, 6, &filter("{}"), 100, 1 << 20));
    assert_eq!(seqs(&events), [4, 5, 6]);
    // Every event removed: the head stays.
    let removed = db.batch(|s, _| s.remove_before(7));
    assert_eq!(removed, 3);
    assert_eq!(db.read(|s| s.oldest_seq()), 7);
    assert_eq!(db.read(|s| s.length()), 0);
    assert_eq!(db.read(|s| s.head_revision()), 6);
}

pub(super) fn journal_recent_for_task_oldest_first(db: &mut Db) {
    db.batch(|s, _| {
        for seq in 1..=8 {
            let task = if seq % 2 == 0 { "t" } else { "u" };
            s.append_event(
                seq,
                T0,
                &NewEvent {
                    task_id: Some(task),
                    ..event(EventType::NodeProgress, r#"{"p":1}"#)
                },
            )?;
        }
        s.set_head_revision(8)?;
        Ok(())
    });
    let recent = db.read(|s| s.recent_for_task("t", 3));
    assert_eq!(
        recent.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        [4, 6, 8]
    );
    let sent: serde_json::Value = serde_json::from_str(recent[0].1.get()).unwrap();
    assert_eq!(sent["type"], "node.progress");
    assert_eq!(sent["task_id"], "t");
    assert_eq!(sent["data"], serde_json::json!({"p": 1}));
    assert!(db.read(|s| s.recent_for_task("none", 3)).is_empty());
}
