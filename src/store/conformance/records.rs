//! Records: versions, tombstones, lists, history, export, session keys.

use super::*;

pub(super) fn records_store_versions_and_tombstones(db: &mut Db) {
    db.batch(|s, _| {
        assert!(s.stored("ns", "a")?.is_none());
        assert_eq!(set(s, "ns", "a", Some(r#"{"x": 1.50}"#), 1, None)?, 1);
        // The write side reads its own batch.
        let stored = s.stored("ns", "a")?.unwrap();
        assert_eq!(
            (stored.version, stored.revision, stored.deleted),
            (1, 1, false)
        );
        assert_eq!(set(s, "ns", "a", Some("[1,2]"), 2, None)?, 2);
        Ok(())
    });
    let live = db.read(|s| s.live("ns", "a")).unwrap();
    assert_eq!(
        live.value.get(),
        "[1,2]",
        "values come back as the text stored"
    );
    assert_eq!((live.version, live.revision), (2, 2));
    assert_eq!(live.updated_by.as_deref(), Some("writer-a"));
    assert_eq!(live.updated_at, crate::clock::format_ms(T0 + 2));
    assert!(db.read(|s| s.live("ns", "nothing")).is_none());
    assert!(db.read(|s| s.live("other", "a")).is_none());
    // A tombstone: stored (deleted), not live; a later version revives the key.
    db.batch(|s, _| set(s, "ns", "a", None, 3, None));
    let stored = db.read(|s| s.stored("ns", "a")).unwrap();
    assert_eq!(
        (stored.version, stored.revision, stored.deleted),
        (3, 3, true)
    );
    assert!(db.read(|s| s.live("ns", "a")).is_none());
    // Written at or before any revision.
    let all = i64::MAX as u64;
    assert!(db
        .read(|s| s.live_versions_page("ns", None, all, 10))
        .is_empty());
    db.batch(|s, _| set(s, "ns", "a", Some(r#""back""#), 4, None));
    let live = db.read(|s| s.live("ns", "a")).unwrap();
    assert_eq!((live.value.get(), live.version), (r#""back""#, 4));
    db.batch(|s, _| set(s, "ns", "b", Some("true"), 5, None));
    db.batch(|s, _| set(s, "other", "c", Some("1"), 6, None));
    let page = |after: Option<&'static str>, up_to: u64, limit: u64| {
        db.read(|s| s.live_versions_page("ns", after, up_to, limit))
    };
    let a = || ("a".to_string(), 4, 4);
    let b = || ("b".to_string(), 1, 5);
    assert_eq!(page(None, all, 10), [a(), b()]);
    // At most `limit`, after a key, written at or before a revision.
    assert_eq!(page(None, all, 1), [a()]);
    assert_eq!(page(Some("a"), all, 10), [b()]);
    assert_eq!(page(None, 4, 10), [a()]);
    assert!(page(Some("b"), all, 10).is_empty());
}

pub(super) fn records_list_prefix_after_limit_and_more(db: &mut Db) {
    db.batch(|s, _| {
        let mut revision = 0;
        for key in ["app/b", "app/a", "app/c", "apq", "ap", "app/d", "zz"] {
            revision += 1;
            set(s, "ns", key, Some("1"), revision, None)?;
        }
        set(s, "other", "app/x", Some("1"), revision + 1, None)?;
        // A tombstone is not listed.
        set(s, "ns", "app/c", None, revision + 2, None)?;
        Ok(())
    });
    let (all, more) = db.read(|s| s.list("ns", "", None, 100));
    assert_eq!(keys(&all), ["ap", "app/a", "app/b", "app/d", "apq", "zz"]);
    assert!(!more);
    assert!(all.iter().all(|r| r.namespace == "ns"));
    let (page, more) = db.read(|s| s.list("ns", "app/", None, 2));
    assert_eq!(
        (keys(&page), more),
        (vec!["app/a".into(), "app/b".into()], true)
    );
    let (page, more) = db.read(|s| s.list("ns", "app/", Some("app/b"), 2));
    assert_eq!((keys(&page), more), (vec!["app/d".to_string()], false));
    // Exactly `limit` left: no more.
    let (page, more) = db.read(|s| s.list("ns", "app/", Some("app/a"), 2));
    assert_eq!(
        (keys(&page), more),
        (vec!["app/b".to_string(), "app/d".to_string()], false)
    );
    // `after` needs not be a stored key; a prefix with LIKE's and GLOB's wildcards is text.
    let (page, _) = db.read(|s| s.list("ns", "", Some("app/bb"), 100));
    assert_eq!(keys(&page), ["app/d", "apq", "zz"]);
    db.batch(|s, _| {
        set(s, "w", "a%b", Some("1"), 20, None)?;
        set(s, "w", "a_c", Some("1"), 21, None)?;
        set(s, "w", "a*d", Some("1"), 22, None)?;
        set(s, "w", "axe", Some("1"), 23, None)?;
        Ok(())
    });
    assert_eq!(keys(&db.read(|s| s.list("w", "a%", None, 10)).0), ["a%b"]);
    assert_eq!(keys(&db.read(|s| s.list("w", "a_", None, 10)).0), ["a_c"]);
    assert_eq!(keys(&db.read(|s| s.list("w", "a*", None, 10)).0), ["a*d"]);
    assert!(db.read(|s| s.list("none", "", None, 10)).0.is_empty());
}

pub(super) fn records_history_newest_first_before_a_version(db: &mut Db) {
    // 70 versions of one key (past a history mark every 64), a tombstone among them,
    // interleaved with another key's.
    db.batch(|s, _| {
        let mut revision = 0;
        for v in 1..=70u64 {
            revision += 1;
            let value = (v != 40).then(|| v.to_string());
            set(s, "ns", "k", value.as_deref(), revision, None)?;
            revision += 1;
            set(s, "ns", "other", Some("0"), revision, None)?;
        }
        Ok(())
    });
    let all = db.read(|s| s.history("ns", "k", None, 1000));
    assert_eq!(
        all.iter().map(|h| h.version).collect::<Vec<_>>(),
        (1..=70).rev().collect::<Vec<_>>()
    );
    assert_eq!(all[0].value.get(), "70");
    assert_eq!(all[0].revision, 139);
    assert_eq!(all[0].updated_at, crate::clock::format_ms(T0 + 139));
    assert_eq!(all[0].updated_by.as_deref(), Some("writer-a"));
    let tomb = all.iter().find(|h| h.version == 40).unwrap();
    assert!(tomb.deleted);
    assert_eq!(tomb.value.get(), "null");
    assert!(all.iter().filter(|h| h.version != 40).all(|h| !h.deleted));
    let page = db.read(|s| s.history("ns", "k", Some(66), 5));
    assert_eq!(
        page.iter().map(|h| h.version).collect::<Vec<_>>(),
        [65, 64, 63, 62, 61]
    );
    assert_eq!(page[0].value.get(), "65");
    let page = db.read(|s| s.history("ns", "k", Some(3), 10));
    assert_eq!(page.iter().map(|h| h.version).collect::<Vec<_>>(), [2, 1]);
    assert!(db.read(|s| s.history("ns", "k", Some(1), 10)).is_empty());
    // Before a version past the newest: from the newest.
    let page = db.read(|s| s.history("ns", "k", Some(1000), 2));
    assert_eq!(page.iter().map(|h| h.version).collect::<Vec<_>>(), [70, 69]);
    assert!(db.read(|s| s.history("ns", "nothing", None, 10)).is_empty());
}

pub(super) fn records_export_in_namespace_key_order_with_the_head(db: &mut Db) {
    db.batch(|s, _| {
        set(s, "b", "x", Some("1"), 1, None)?;
        set(s, "a", "z", Some("2"), 2, None)?;
        set(s, "a", "y", Some("3"), 3, None)?;
        set(s, "c", "gone", Some("4"), 4, None)?;
        set(s, "c", "gone", None, 5, None)?;
        s.append_event(5, T0, &event(EventType::KvSet, "{}"))?;
        s.set_head_revision(5)?;
        Ok(())
    });
    let names = |records: &[crate::protocol::state::Record]| {
        records
            .iter()
            .map(|r| format!("{}/{}", r.namespace, r.key))
            .collect::<Vec<_>>()
    };
    let (all, head) = db.read(|s| s.export(None, None, 100));
    assert_eq!(names(&all), ["a/y", "a/z", "b/x"]);
    assert_eq!(head, 5);
    assert_eq!(all[0].state.value.get(), "3");
    let (page, _) = db.read(|s| s.export(None, None, 2));
    assert_eq!(names(&page), ["a/y", "a/z"]);
    let (page, _) = db.read(|s| s.export(None, Some(("a", "z")), 2));
    assert_eq!(names(&page), ["b/x"]);
    let (page, _) = db.read(|s| s.export(None, Some(("a", "y")), 1));
    assert_eq!(names(&page), ["a/z"]);
    let (page, _) = db.read(|s| s.export(Some("a"), Some(("a", "y")), 10));
    assert_eq!(names(&page), ["a/z"]);
    let (page, _) = db.read(|s| s.export(Some("b"), None, 10));
    assert_eq!(names(&page), ["b/x"]);
    assert!(db.read(|s| s.export(Some("c"), None, 10)).0.is_empty());
}

pub(super) fn records_session_keys_and_counts(db: &mut Db) {
    db.batch(|s, _| {
        set(s, "n2", "k", Some("1"), 1, Some("sess-1"))?;
        set(s, "n1", "b", Some("1"), 2, Some("sess-1"))?;
        set(s, "n1", "a", Some("1"), 3, Some("sess-2"))?;
        // Rewritten without the session: unbound.
        set(s, "n1", "c", Some("1"), 4, Some("sess-1"))?;
        set(s, "n1", "c", Some("2"), 5, None)?;
        // Deleted: not live.
        set(s, "n1", "d", Some("1"), 6, Some("sess-1"))?;
        set(s, "n1", "d", None, 7, Some("sess-1"))?;
        Ok(())
    });
    assert_eq!(
        db.read(|s| s.keys_of_session("sess-1")),
        vec![
            ("n1".to_string(), "b".to_string()),
            ("n2".into(), "k".into())
        ]
    );
    assert!(db.read(|s| s.keys_of_session("nobody")).is_empty());
    assert_eq!(db.read(|s| s.counts()), (4, 1));
}
