//! The configuration's layers, defaults and refusals.

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

#[test]
fn defaults_live_under_home_dot_baton() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let config = Config::resolve(&Flags::default(), &env_of(&[("HOME", home)])).unwrap();
    assert_eq!(config.home, dir.path().join(".baton"));
    assert_eq!(config.socket_path, dir.path().join(".baton/baton.sock"));
    assert_eq!(
        config.database.sqlite_path(),
        Some(dir.path().join(".baton/baton.db").as_path())
    );
    assert_eq!(config.socket_mode, 0o600);
    assert_eq!(config.max_line_bytes, 1 << 20);
}

#[test]
fn flags_beat_environment_beat_env_file() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("baton.env");
    std::fs::write(
        &env_file,
        "BATON_MAX_LINE_BYTES=4096\nBATON_MAX_VALUE_BYTES=2048\nBATON_LOCK_TTL_SECS=7\n",
    )
    .unwrap();
    let env = env_of(&[
        ("HOME", dir.path().to_str().unwrap()),
        ("BATON_ENV_FILE", env_file.to_str().unwrap()),
        ("BATON_MAX_VALUE_BYTES", "1024"),
        ("BATON_LOCK_TTL_SECS", "9"),
    ]);
    let flags = Flags {
        lock_ttl_secs: Some("11".into()),
        ..Flags::default()
    };
    let config = Config::resolve(&flags, &env).unwrap();
    assert_eq!(config.max_line_bytes, 4096, "env file");
    assert_eq!(config.max_value_bytes, 1024, "environment over env file");
    assert_eq!(config.lock_ttl_secs, 11, "flag over environment");
}

#[test]
fn bad_values_name_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_of(&[
        ("HOME", dir.path().to_str().unwrap()),
        ("BATON_SOCKET_MODE", "rw"),
    ]);
    let err = Config::resolve(&Flags::default(), &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("BATON_SOCKET_MODE (environment)"), "{err}");
    let env = env_of(&[
        ("HOME", dir.path().to_str().unwrap()),
        ("BATON_DATABASE_URL", "mysql://x"),
    ]);
    let err = Config::resolve(&Flags::default(), &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("sqlite://PATH"), "{err}");
    let env = env_of(&[
        ("HOME", dir.path().to_str().unwrap()),
        (
            "BATON_DATABASE_URL",
            "postgres://me:secret@db.example/baton",
        ),
    ]);
    let config = Config::resolve(&Flags::default(), &env).unwrap();
    assert!(matches!(config.database, Database::Postgres(_)));
    assert_eq!(
        config.database.shown(),
        "postgres://me:***@db.example/baton"
    );
    assert_eq!(config.instance_timeout_secs, 15);
}

#[test]
fn database_url_and_tilde_expand() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_of(&[
        ("HOME", dir.path().to_str().unwrap()),
        ("BATON_DATABASE_URL", "sqlite://~/data/b.db"),
        ("BATON_SOCKET_MODE", "0660"),
    ]);
    let config = Config::resolve(&Flags::default(), &env).unwrap();
    assert_eq!(
        config.database.sqlite_path(),
        Some(dir.path().join("data/b.db").as_path())
    );
    assert_eq!(config.socket_mode, 0o660);
}

#[test]
fn listeners_parse_and_plain_tcp_stays_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let flags = Flags {
        listen: vec!["tcp://127.0.0.1:7420".into(), "tls://[::]:7421".into()],
        tls_cert: Some("/c.pem".into()),
        tls_key: Some("/k.pem".into()),
        ..Flags::default()
    };
    let config = Config::resolve(&flags, &env_of(&[("HOME", home)])).unwrap();
    let shown: Vec<String> = config.listen.iter().map(|l| l.to_string()).collect();
    assert_eq!(shown, ["tcp://127.0.0.1:7420", "tls://[::]:7421"]);
    assert_eq!(config.tls.unwrap().cert, PathBuf::from("/c.pem"));

    let refused = |listen: &str| {
        let env = env_of(&[("HOME", home), ("BATON_LISTEN", listen)]);
        Config::resolve(&Flags::default(), &env)
            .unwrap_err()
            .to_string()
    };
    let err = refused("tcp://0.0.0.0:7420");
    assert!(
        err.contains("BATON_LISTEN (environment)") && err.contains("use tls://"),
        "{err}"
    );
    assert!(refused("tls://127.0.0.1:7420").contains("BATON_TLS_CERT"));
    assert!(refused("http://x:1").contains("tls://ADDR:PORT"));
    assert!(refused("tls://example.com:1").contains("IP:PORT"));
}

#[test]
fn a_value_limit_that_would_not_fit_a_page_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_of(&[
        ("HOME", dir.path().to_str().unwrap()),
        ("BATON_MAX_VALUE_BYTES", "20000000"),
    ]);
    let err = Config::resolve(&Flags::default(), &env)
        .unwrap_err()
        .to_string();
    assert!(err.contains("BATON_MAX_VALUE_BYTES"), "{err}");
    assert!(err.contains("at most 7340032"), "{err}");
    let env = env_of(&[
        ("HOME", dir.path().to_str().unwrap()),
        ("BATON_MAX_VALUE_BYTES", "7340032"),
    ]);
    let config = Config::resolve(&Flags::default(), &env).unwrap();
    assert_eq!(config.max_value_bytes, MAX_VALUE_BYTES_CAP);
}

#[test]
fn retention_settings_parse_and_refuse_with_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let config = Config::resolve(&Flags::default(), &env_of(&[("HOME", home)])).unwrap();
    assert_eq!(config.history_keep, Some(100));
    assert_eq!(config.journal_retain, JournalRetain::All);
    for (keep, retain, want_keep, want_retain) in [
        ("5", "1000000", Some(5), JournalRetain::Events(1_000_000)),
        ("all", "7d", None, JournalRetain::Age(7 * 86_400_000)),
        ("1", "12h", Some(1), JournalRetain::Age(12 * 3_600_000)),
        ("100", "30m", Some(100), JournalRetain::Age(30 * 60_000)),
        ("100", "90s", Some(100), JournalRetain::Age(90_000)),
        ("100", "all", Some(100), JournalRetain::All),
    ] {
        let env = env_of(&[
            ("HOME", home),
            ("BATON_HISTORY_KEEP", keep),
            ("BATON_JOURNAL_RETAIN", retain),
        ]);
        let config = Config::resolve(&Flags::default(), &env).unwrap();
        assert_eq!(config.history_keep, want_keep, "{keep}");
        assert_eq!(config.journal_retain, want_retain, "{retain}");
    }
    let flags = Flags {
        history_keep: Some("3".into()),
        journal_retain: Some("10".into()),
        ..Flags::default()
    };
    let config = Config::resolve(&flags, &env_of(&[("HOME", home)])).unwrap();
    assert_eq!(config.history_keep, Some(3));
    assert_eq!(config.journal_retain, JournalRetain::Events(10));
    for (name, bad, says) in [
        ("BATON_HISTORY_KEEP", "0", "or all to keep every version"),
        ("BATON_HISTORY_KEEP", "ten", "or all to keep every version"),
        ("BATON_JOURNAL_RETAIN", "0", "an age with a unit"),
        ("BATON_JOURNAL_RETAIN", "7w", "an age with a unit"),
        ("BATON_JOURNAL_RETAIN", "d", "an age with a unit"),
    ] {
        let env = env_of(&[("HOME", home), (name, bad)]);
        let err = Config::resolve(&Flags::default(), &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("{name} (environment)")), "{err}");
        assert!(err.contains(says), "{err}");
    }
}
