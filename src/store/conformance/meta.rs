//! Remembered answers and the head revision.

use super::*;

pub(super) fn remembered_answers_and_their_expiry(db: &mut Db) {
    db.batch(|s, _| {
        assert!(s.remembered("k1")?.is_none());
        s.remember("k1", "Set", &[1, 2, 255], r#"{"version":1}"#, T0)?;
        s.remember("k2", "Delete", &[0], "{}", T0 + 100)?;
        Ok(())
    });
    let a = db.read(|s| s.remembered("k1")).unwrap();
    assert_eq!(
        (
            a.method.as_str(),
            a.request_hash.as_slice(),
            a.response.as_str(),
            a.created_at_ms
        ),
        ("Set", &[1u8, 2, 255][..], r#"{"version":1}"#, T0)
    );
    db.batch(|s, _| s.forget_before(T0 + 100));
    assert!(db.read(|s| s.remembered("k1")).is_none());
    assert!(
        db.read(|s| s.remembered("k2")).is_some(),
        "at `before_ms`: kept"
    );
}

pub(super) fn meta_head_revision(db: &mut Db) {
    assert_eq!(db.read(|s| s.head_revision()), 0);
    assert_eq!(db.batch(|s, _| s.head_revision()), 0);
    // A revision with its event, as the writer stores them.
    db.batch(|s, _| {
        s.append_event(1, T0, &event(EventType::KvSet, "{}"))?;
        s.set_head_revision(1)
    });
    assert_eq!(db.read(|s| s.head_revision()), 1);
    // A revision without an event.
    db.batch(|s, _| s.set_head_revision(3));
    assert_eq!(db.read(|s| s.head_revision()), 3);
    assert_eq!(db.batch(|s, _| s.head_revision()), 3);
    db.reopen();
    assert_eq!(db.batch(|s, _| s.head_revision()), 3);
    let (size, _) = db.read(|s| s.file_sizes());
    assert!(size > 0);
    // This daemon, alone: nobody silent, one live.
    let silent = db.batch(|s, _| s.instance_heartbeat("me", 1 << 40, 60_000));
    assert!(silent.is_empty());
    assert_eq!(db.read(|s| s.live_instances(60_000)), 1);
}
