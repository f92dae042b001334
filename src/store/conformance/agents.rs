//! Agents, their sessions, names, messages, cursors, and tokens.

use super::*;

pub(super) fn session(name: &str, id: &str) -> SessionRow {
    SessionRow {
        name: name.into(),
        session_id: id.into(),
        role: Some("reviewer".into()),
        metadata: Some(r#"{"m":1}"#.into()),
        started_at: T0,
        last_seen: T0,
        expires_at: T0 + 30_000,
        token_id: Some("tok".into()),
        holder_connection: Some(3),
    }
}

pub(super) fn agents_sessions(db: &mut Db) {
    db.batch(|s, _| {
        s.insert_session(&session("bob", "s-bob"))?;
        s.insert_session(&SessionRow {
            role: None,
            metadata: None,
            token_id: None,
            holder_connection: None,
            ..session("ann", "s-ann")
        })
    });
    let bob = db.read(|s| s.session("bob")).unwrap();
    assert_eq!(
        (
            bob.session_id.as_str(),
            bob.role.as_deref(),
            bob.metadata.as_deref()
        ),
        ("s-bob", Some("reviewer"), Some(r#"{"m":1}"#))
    );
    assert_eq!(
        (bob.token_id.as_deref(), bob.holder_connection),
        (Some("tok"), Some(3))
    );
    assert_eq!(
        (bob.started_at, bob.last_seen, bob.expires_at),
        (T0, T0, T0 + 30_000)
    );
    assert_eq!(db.read(|s| s.session_by_id("s-ann")).unwrap().name, "ann");
    assert!(db.read(|s| s.session_by_id("none")).is_none());
    assert_eq!(
        db.read(|s| s.sessions())
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["ann", "bob"]
    );
    db.batch(|s, _| s.touch_session("bob", T0 + 5, T0 + 35_000));
    let bob = db.read(|s| s.session("bob")).unwrap();
    assert_eq!((bob.last_seen, bob.expires_at), (T0 + 5, T0 + 35_000));
    db.batch(|s, _| s.delete_session("bob"));
    assert!(db.read(|s| s.session("bob")).is_none());
    assert_eq!(db.read(|s| s.sessions()).len(), 1);
}

pub(super) fn agents_names_messages_and_cursors(db: &mut Db) {
    let tok = NameOwner {
        token_id: Some("tok-1".into()),
    };
    let admin = NameOwner { token_id: None };
    db.batch(|s, _| {
        assert!(s.name_owner("ann")?.is_none());
        s.remember_agent("ann", &tok, T0)?;
        // The first owner stays.
        s.remember_agent("ann", &admin, T0 + 1)?;
        s.remember_agent("bob", &admin, T0 + 2)?;
        Ok(())
    });
    assert_eq!(db.read(|s| s.name_owner("ann")), Some(tok));
    assert_eq!(db.read(|s| s.name_owner("bob")), Some(admin));
    let mut names = db.read(|s| s.agent_names());
    names.sort();
    assert_eq!(names, ["ann", "bob"]);
    let message = |seq: i64, id: &str| crate::store::boundary::MessageRow {
        seq,
        message_id: id.into(),
        sender: "cy".into(),
        recipients: r#"["ann","bob"]"#.into(),
        subject: Some("hi".into()),
        body: r#"{"text":"hello"}"#.into(),
        thread_id: Some("th".into()),
        reply_to: None,
        sent_at: T0 + seq,
    };
    db.batch(|s, _| {
        s.insert_message(&message(3, "m3"), &["ann".into(), "bob".into()])?;
        s.insert_message(&message(5, "m5"), &["ann".into()])?;
        s.insert_message(&message(8, "m8"), &["ann".into()])
    });
    let inbox = db.read(|s| s.inbox("ann", 0, 10));
    assert_eq!(inbox.iter().map(|m| m.seq).collect::<Vec<_>>(), [3, 5, 8]);
    let m = &inbox[0];
    assert_eq!(
        (
            m.message_id.as_str(),
            m.sender.as_str(),
            m.recipients.as_str()
        ),
        ("m3", "cy", r#"["ann","bob"]"#)
    );
    assert_eq!(
        (
            m.subject.as_deref(),
            m.body.as_str(),
            m.thread_id.as_deref(),
            m.reply_to.as_deref()
        ),
        (Some("hi"), r#"{"text":"hello"}"#, Some("th"), None)
    );
    assert_eq!(m.sent_at, T0 + 3);
    assert_eq!(
        db.read(|s| s.inbox("ann", 3, 1))
            .iter()
            .map(|m| m.seq)
            .collect::<Vec<_>>(),
        [5]
    );
    assert_eq!(db.read(|s| s.inbox("bob", 0, 10)).len(), 1);
    assert!(db.read(|s| s.inbox("cy", 0, 10)).is_empty());
    assert_eq!(db.read(|s| s.inbox_count("ann", 0, None)), 3);
    assert_eq!(db.read(|s| s.inbox_count("ann", 3, None)), 2);
    assert_eq!(db.read(|s| s.inbox_count("ann", 0, Some(5))), 2);
    assert_eq!(db.read(|s| s.newest_message("ann")), 8);
    assert_eq!(db.read(|s| s.newest_message("cy")), 0);
    assert_eq!(db.read(|s| s.cursor("ann")), 0);
    db.batch(|s, _| s.set_cursor("ann", 5));
    assert_eq!(db.read(|s| s.cursor("ann")), 5);
    db.batch(|s, _| s.set_cursor("ann", 8));
    assert_eq!(db.read(|s| s.cursor("ann")), 8);
    assert_eq!(db.read(|s| s.cursor("bob")), 0);
}

pub(super) fn tokens_stored_by_hash_and_id(db: &mut Db) {
    let scopes = vec!["read:*".to_string(), "locks:file:src/*".to_string()];
    db.batch(|s, _| {
        s.insert_token(&NewToken {
            token_id: "t1",
            name: "ci",
            secret_hash: "aa11",
            scopes: &scopes,
            created_at_ms: T0,
            expires_at_ms: Some(T0 + 1_000),
        })?;
        s.insert_token(&NewToken {
            token_id: "t2",
            name: "bot",
            secret_hash: "bb22",
            scopes: &[],
            created_at_ms: T0 + 1,
            expires_at_ms: None,
        })
    });
    let t = db.read(|s| s.token_by_hash("aa11")).unwrap();
    assert_eq!((t.token_id.as_str(), t.name.as_str()), ("t1", "ci"));
    assert_eq!(t.scopes, scopes);
    assert_eq!((t.created_at_ms, t.expires_at_ms), (T0, Some(T0 + 1_000)));
    assert_eq!((t.revoked_at_ms, t.last_used_at_ms), (None, None));
    assert!(db.read(|s| s.token_by_hash("cc33")).is_none());
    assert_eq!(db.read(|s| s.token_by_id("t2")).unwrap().name, "bot");
    assert!(db.read(|s| s.token_by_id("t3")).is_none());
    db.batch(|s, _| {
        s.set_token_used("t2", T0 + 7)?;
        s.set_token_revoked("t1", T0 + 8)
    });
    // Revoked, still found.
    let t = db.read(|s| s.token_by_hash("aa11")).unwrap();
    assert_eq!(t.revoked_at_ms, Some(T0 + 8));
    assert_eq!(
        db.read(|s| s.token_by_id("t2")).unwrap().last_used_at_ms,
        Some(T0 + 7)
    );
    assert_eq!(
        db.read(|s| s.all_tokens())
            .iter()
            .map(|t| t.token_id.as_str())
            .collect::<Vec<_>>(),
        ["t1", "t2"]
    );
}
