//! Leases, the fencing counter and lock outcomes.

use super::*;

pub(super) fn leases_insert_extend_delete_by_key_prefix_and_owner(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_lease(&NewLease {
            provider: Some("claude"),
            metadata: Some(r#"{"why":"edit"}"#),
            holder_connection: Some(7),
            token_id: Some("tok-1"),
            ..lease("file:src/a.rs", "l1", "ann", 1)
        })?;
        s.insert_lease(&lease("dir:src", "l2", "bob", 2))?;
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            slots: Some(3),
            ..lease("tool:db", "l3", "ann", 3)
        })?;
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            slots: Some(3),
            ..lease("tool:db", "l4", "bob", 4)
        })?;
        Ok(())
    });
    let all = db.read(|s| s.leases("", None));
    assert_eq!(
        all.iter()
            .map(|l| (l.resource_key.as_str(), l.lease_id.as_str()))
            .collect::<Vec<_>>(),
        [
            ("dir:src", "l2"),
            ("file:src/a.rs", "l1"),
            ("tool:db", "l3"),
            ("tool:db", "l4")
        ]
    );
    let a = &all[1];
    assert_eq!(
        (a.owner.as_str(), a.provider.as_deref(), a.fencing_token),
        ("ann", Some("claude"), 1)
    );
    assert_eq!((a.acquired_at, a.expires_at), (T0, T0 + 60_000));
    assert_eq!(a.metadata.as_deref(), Some(r#"{"why":"edit"}"#));
    assert_eq!(a.holder_connection, Some(7));
    assert_eq!(a.token_id.as_deref(), Some("tok-1"));
    assert_eq!((a.mode, a.slots), (LockMode::Exclusive, None));
    assert_eq!((all[2].mode, all[2].slots), (LockMode::Shared, Some(3)));
    let of = |db: &Db, prefix: &str, owner: Option<&str>| {
        db.read(|s| s.leases(prefix, owner))
            .into_iter()
            .map(|l| l.lease_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(of(db, "file:", None), ["l1"]);
    assert_eq!(of(db, "tool:", Some("bob")), ["l4"]);
    assert_eq!(of(db, "", Some("ann")), ["l1", "l3"]);
    assert!(of(db, "file:", Some("bob")).is_empty());
    // By key and lease id: the other lease on the same key stays.
    db.batch(|s, _| {
        s.extend_lease("tool:db", "l3", T0 + 90_000)?;
        s.delete_lease("tool:db", "l4")?;
        // Another key's lease id does not match.
        s.delete_lease("dir:src", "l1")?;
        s.extend_lease("dir:src", "l1", T0 + 1)?;
        Ok(())
    });
    let db_leases = db.read(|s| s.leases("tool:db", None));
    assert_eq!(db_leases.len(), 1);
    assert_eq!(
        (db_leases[0].lease_id.as_str(), db_leases[0].expires_at),
        ("l3", T0 + 90_000)
    );
    assert_eq!(of(db, "", None), ["l2", "l1", "l3"]);
    assert_eq!(
        db.read(|s| s.leases("file:", None))[0].expires_at,
        T0 + 60_000
    );
}

pub(super) fn leases_page_in_key_and_token_order(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            ..lease("tool:b", "b9", "ann", 9)
        })?;
        s.insert_lease(&NewLease {
            mode: LockMode::Shared,
            ..lease("tool:b", "b5", "bob", 5)
        })?;
        s.insert_lease(&lease("tool:a", "a1", "ann", 1))?;
        s.insert_lease(&lease("tool:c", "c2", "ann", 2))?;
        s.insert_lease(&lease("file:x", "x3", "ann", 3))?;
        Ok(())
    });
    let page = |db: &Db, owner: Option<&str>, after: Option<(&str, u64)>, limit: u64| {
        db.read(|s| s.lease_page("tool:", owner, after, limit))
            .into_iter()
            .map(|l| l.lease_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(page(db, None, None, 10), ["a1", "b5", "b9", "c2"]);
    assert_eq!(page(db, None, None, 2), ["a1", "b5"]);
    assert_eq!(page(db, None, Some(("tool:b", 5)), 2), ["b9", "c2"]);
    assert_eq!(page(db, None, Some(("tool:b", 9)), 2), ["c2"]);
    assert_eq!(page(db, Some("ann"), Some(("tool:a", 1)), 10), ["b9", "c2"]);
    assert!(page(db, None, Some(("tool:c", 2)), 10).is_empty());
}

pub(super) fn leases_of_session_and_the_fencing_counter(db: &mut Db) {
    assert_eq!(db.read(|s| s.last_fencing_token()), 0);
    db.batch(|s, _| {
        assert_eq!(s.last_fencing_token()?, 0);
        s.insert_lease(&NewLease {
            session_id: Some("sess"),
            ..lease("tool:a", "l1", "ann", 1)
        })?;
        s.insert_lease(&lease("tool:b", "l2", "ann", 2))?;
        s.store_fencing_token(2)?;
        Ok(())
    });
    assert_eq!(db.read(|s| s.last_fencing_token()), 2);
    let of_session = db.read(|s| s.leases_of_session("sess"));
    assert_eq!(
        of_session
            .iter()
            .map(|l| l.lease_id.as_str())
            .collect::<Vec<_>>(),
        ["l1"]
    );
    assert!(db.read(|s| s.leases_of_session("other")).is_empty());
    db.batch(|s, _| {
        assert_eq!(s.last_fencing_token()?, 2);
        s.store_fencing_token(40)
    });
    assert_eq!(db.read(|s| s.last_fencing_token()), 40);
    // A batch that rolls back stores nothing: the counter is as committed.
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    writes.storage().store_fencing_token(99).unwrap();
    writes.rollback();
    assert_eq!(db.read(|s| s.last_fencing_token()), 40);
    assert_eq!(db.batch(|s, _| s.last_fencing_token()), 40);
    db.reopen();
    assert_eq!(db.batch(|s, _| s.last_fencing_token()), 40);
}

/// Records how a lease ended as the rules do: the outcome and, in the same batch, its
/// journal event (which the boundary lets an engine rely on to keep held outcomes durable).
pub(super) fn end_lease(
    s: &dyn Storage,
    o: &dyn Outcomes,
    seq: i64,
    end: &LeaseEnd<'_>,
) -> Result<()> {
    o.record_end(end)?;
    let data = serde_json::json!({
        "fencing_token": end.fencing_token,
        "outcome": end.outcome,
        "moved_to": end.moved_to,
        "note": end.note,
    })
    .to_string();
    s.append_event(
        seq,
        end.at_ms,
        &NewEvent {
            actor: Some(end.owner),
            resource_key: Some(end.resource_key),
            ..event(EventType::LockReleased, &data)
        },
    )?;
    s.set_head_revision(seq)
}

pub(super) fn ended<'a>(key: &'a str, outcome: &'a str, owner: &'a str, at: i64) -> LeaseEnd<'a> {
    LeaseEnd {
        resource_key: key,
        fencing_token: 0,
        outcome,
        owner,
        at_ms: at,
        moved_to: None,
        note: None,
    }
}

pub(super) fn outcomes_recorded_read_and_kept_through_a_clean_close(db: &mut Db) {
    db.batch(|s, o| {
        assert!(o.previous("tool:a")?.is_none());
        end_lease(
            s,
            o,
            1,
            &LeaseEnd {
                moved_to: Some("tool:b"),
                note: Some("done"),
                ..ended("tool:a", "completed", "ann", T0 + 5)
            },
        )?;
        // Read back in the same batch.
        let p = o.previous("tool:a")?.unwrap();
        assert_eq!((p.outcome.as_str(), p.owner.as_str()), ("completed", "ann"));
        Ok(())
    });
    db.batch(|s, o| {
        let p = o.previous("tool:a")?.unwrap();
        assert_eq!((p.outcome.as_str(), p.owner.as_str()), ("completed", "ann"));
        assert_eq!(p.moved_to.as_deref(), Some("tool:b"));
        assert_eq!(p.note.as_deref(), Some("done"));
        assert_eq!(p.at, crate::clock::format_ms(T0 + 5));
        // The last end wins.
        end_lease(s, o, 2, &ended("tool:a", "failed", "bob", T0 + 6))?;
        end_lease(s, o, 3, &ended("tool:d", "completed", "dan", T0 + 6))?;
        assert!(o.previous("tool:b")?.is_none());
        Ok(())
    });
    // An end recorded in a batch that rolls back is gone; the committed ones stay.
    let writes = db.writes();
    writes.begin(&Foreseen::default()).unwrap();
    end_lease(
        writes.storage(),
        writes.outcomes(),
        4,
        &ended("tool:c", "completed", "cy", T0 + 7),
    )
    .unwrap();
    writes.rollback();
    db.batch(|_, o| {
        assert!(o.previous("tool:c")?.is_none());
        assert_eq!(o.previous("tool:a")?.unwrap().owner, "bob");
        Ok(())
    });
    // Stored before compaction removes the events that hold them.
    db.batch(|s, o| {
        o.store_held()?;
        s.remove_before(4).map(|_| ())
    });
    db.batch(|_, o| {
        assert_eq!(o.previous("tool:d")?.unwrap().owner, "dan");
        Ok(())
    });
    // A clean close keeps every outcome, held back or not.
    db.batch(|s, o| end_lease(s, o, 5, &ended("tool:e", "completed", "eve", T0 + 8)));
    db.reopen();
    db.batch(|_, o| {
        let p = o.previous("tool:a")?.unwrap();
        assert_eq!((p.outcome.as_str(), p.owner.as_str()), ("failed", "bob"));
        assert_eq!((p.moved_to, p.note), (None, None));
        assert_eq!(o.previous("tool:e")?.unwrap().owner, "eve");
        assert!(o.previous("tool:c")?.is_none());
        Ok(())
    });
    // So does a writer that went without closing (kill -9): the journal holds them.
    db.batch(|s, o| end_lease(s, o, 6, &ended("tool:f", "completed", "fay", T0 + 9)));
    db.writes = None;
    db.store = None;
    db.start();
    db.batch(|_, o| {
        assert_eq!(o.previous("tool:f")?.unwrap().owner, "fay");
        assert_eq!(o.previous("tool:e")?.unwrap().owner, "eve");
        Ok(())
    });
}

/// Fenced writes compare with the largest token of a key's ended leases: kept whatever
/// order they end in, read back in the batch that ended them, after commit, after a clean
/// close and after a writer that went without closing (read again from the journal).
pub(super) fn the_largest_ended_token_of_a_key_is_kept(db: &mut Db) {
    fn token(key: &str, t: u64) -> LeaseEnd<'_> {
        LeaseEnd {
            fencing_token: t,
            ..ended(key, "released", "ann", T0)
        }
    }
    db.batch(|s, o| {
        assert_eq!(o.latest_ended_token("tool:t")?, 0);
        end_lease(s, o, 1, &token("tool:t", 7))?;
        // A shared holder with an older token ends after it: 7 stays the largest.
        end_lease(s, o, 2, &token("tool:t", 5))?;
        assert_eq!(o.latest_ended_token("tool:t")?, 7);
        end_lease(s, o, 3, &token("tool:u", 9))?;
        Ok(())
    });
    db.batch(|s, o| {
        assert_eq!(o.latest_ended_token("tool:t")?, 7);
        end_lease(s, o, 4, &token("tool:t", 6))?;
        assert_eq!(o.latest_ended_token("tool:t")?, 7);
        assert_eq!(o.latest_ended_token("tool:u")?, 9);
        o.store_held()
    });
    db.batch(|s, o| end_lease(s, o, 5, &token("tool:t", 11)));
    db.reopen();
    db.batch(|s, o| {
        assert_eq!(o.latest_ended_token("tool:t")?, 11);
        end_lease(s, o, 6, &token("tool:u", 8))?;
        end_lease(s, o, 7, &token("tool:v", 3))
    });
    db.writes = None;
    db.store = None;
    db.start();
    db.batch(|_, o| {
        assert_eq!(o.latest_ended_token("tool:t")?, 11);
        assert_eq!(o.latest_ended_token("tool:u")?, 9);
        assert_eq!(o.latest_ended_token("tool:v")?, 3);
        Ok(())
    });
}
