//! Start-up and shutdown: file modes, single instance, stale and foreign socket paths,
//! SIGTERM, configuration layers, a database newer than the binary, and a database that
//! another process has open.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use crate::common::Daemon;
use serde_json::json;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn home_is_private_and_the_socket_mode_is_0600() {
    let daemon = Daemon::start_sqlite();
    assert_eq!(mode(&daemon.home()), 0o700);
    assert_eq!(mode(&daemon.socket_path()), 0o600);
    assert_eq!(mode(&daemon.home().join("baton.db")), 0o600);
    assert!(
        daemon
            .log()
            .contains(&daemon.socket_path().display().to_string()),
        "logs where it listens"
    );
}

#[test]
fn socket_mode_is_configurable() {
    let daemon = Daemon::start_with(&["--socket-mode", "0660"]);
    assert_eq!(mode(&daemon.socket_path()), 0o660);
}

#[test]
fn a_second_daemon_is_refused() {
    let daemon = Daemon::start();
    daemon.client().set("n", "k", json!(1));
    let (status, stderr) = daemon.run_another(&[]);
    assert!(!status.success());
    assert!(stderr.contains("already running"), "{stderr}");
    // Another database but the same socket: the socket probe refuses it.
    let other_db = format!("sqlite://{}", daemon.dir().join("other.db").display());
    let (status, stderr) = daemon.run_another(&["--database-url", &other_db]);
    assert!(!status.success());
    assert!(stderr.contains("already running"), "{stderr}");
    assert_eq!(
        daemon.client().get("n", "k")["value"],
        1,
        "the first daemon still serves"
    );
}

#[test]
fn a_stale_socket_is_replaced() {
    let mut daemon = Daemon::start();
    daemon.client().set("n", "k", json!(1));
    daemon.kill9();
    assert!(
        std::fs::symlink_metadata(daemon.socket_path())
            .unwrap()
            .file_type()
            .is_socket(),
        "left behind"
    );
    daemon.restart();
    assert_eq!(daemon.client().get("n", "k")["value"], 1);
}

#[test]
fn something_at_the_socket_path_that_is_not_a_socket_is_never_deleted() {
    let daemon = Daemon::start();
    let path = daemon.dir().join("precious.txt");
    std::fs::write(&path, "keep me").unwrap();
    let other_home = daemon.dir().join("other-home");
    let (status, stderr) = daemon.run_another(&[
        "--home",
        other_home.to_str().unwrap(),
        "--socket",
        path.to_str().unwrap(),
    ]);
    assert!(!status.success());
    assert!(stderr.contains("not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "keep me");
}

#[test]
fn sigterm_finishes_in_flight_writes_removes_the_socket_and_exits_0() {
    let mut daemon = Daemon::start();
    let mut c = daemon.client();
    let mut batch = String::new();
    for i in 0..200 {
        batch.push_str(&json!({"id": i, "method": "Set", "params": {"namespace": "n", "key": format!("k{i}"), "value": i}}).to_string());
        batch.push('\n');
    }
    c.send_raw(batch.as_bytes());
    let first = c.read_line();
    assert_eq!(first["id"], 0);
    let status = daemon.sigterm();
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    assert!(!daemon.socket_path().exists(), "socket removed");
    // Whatever was answered before the stop is durable.
    let mut answered = vec![first];
    while let Some(line) = c.try_read_line() {
        answered.push(line);
    }
    daemon.restart();
    let mut c = daemon.client();
    for answer in &answered {
        assert!(answer["result"]["version"] == 1, "{answer}");
        let key = format!("k{}", answer["id"]);
        assert_eq!(c.get("n", &key)["found"], true, "{key}");
    }
}

/// A stopping daemon does not leave its waiters hanging: every waiting lock and node
/// request is answered 503 (nothing written, retry once it is back) and the daemon exits.
#[test]
fn sigterm_answers_waiting_requests_503_and_exits_0() {
    let mut daemon = Daemon::start();
    let mut c = daemon.client();
    c.result(
        "AcquireResourceLock",
        json!({"resource_key": "file:a", "owner": "holder"}),
    );
    let task = c.result(
        "RegisterTask",
        json!({"goal": "g", "nodes": [{"id": "a"}, {"id": "b", "dependencies": ["a"]}]}),
    );
    c.result(
        "AcquireNextNode",
        json!({"task_id": task["task_id"], "lease_owner": "w1"}),
    );
    let mut lock_waiter = daemon.client();
    lock_waiter.send_line(
        &json!({"id": "lock", "method": "AcquireResourceLock",
        "params": {"resource_key": "file:a", "owner": "waiter", "wait_ms": 600_000}})
        .to_string(),
    );
    let mut node_waiter = daemon.client();
    node_waiter.send_line(
        &json!({"id": "node", "method": "AcquireNextNode",
        "params": {"task_id": task["task_id"], "lease_owner": "w2", "wait_ms": 600_000}})
        .to_string(),
    );
    loop {
        let m = c.result("Metrics", json!({}));
        if m["locks"]["waiting"] == 1 && m["node_waiters"] == 1 {
            break;
        }
        std::thread::yield_now();
    }
    let status = daemon.sigterm();
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    for (client, id) in [(&mut lock_waiter, "lock"), (&mut node_waiter, "node")] {
        let answer = client.read_line();
        assert_eq!(answer["id"], id);
        assert_eq!(answer["error"]["code"], 503, "{answer}");
        assert_eq!(answer["error"]["data"]["kind"], "unavailable");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("retry"),
            "{answer}"
        );
    }
}

#[test]
fn environment_and_env_file_configure_the_daemon_flags_win() {
    let daemon = Daemon::start();
    let env_file = daemon.dir().join("custom.env");
    let socket = daemon.dir().join("from-env-file.sock");
    std::fs::write(
        &env_file,
        format!(
            "BATON_SOCKET_PATH={}\nBATON_MAX_VALUE_BYTES=8\n",
            socket.display()
        ),
    )
    .unwrap();
    let home = daemon.dir().join("h2");
    let mut cmd = daemon.command();
    cmd.env("BATON_ENV_FILE", &env_file)
        .env("BATON_MAX_VALUE_BYTES", "16")
        .args(["--home", home.to_str().unwrap()]);
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    assert!(lines.any(|l| l.unwrap().contains("listening on")));
    let mut c = crate::common::Client::connect(&socket);
    // 16 from the environment beats 8 from the env file.
    assert_eq!(c.set("n", "k", json!("123456789012"))["version"], 1);
    let err = c.error(
        "Set",
        json!({"namespace": "n", "key": "k", "value": "12345678901234567890"}),
    );
    crate::common::assert_error(&err, 413, "value_too_large");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}

#[test]
fn bad_configuration_is_refused_with_its_source() {
    let daemon = Daemon::start();
    let (status, stderr) = daemon.run_another(&["--max-line-bytes", "lots"]);
    assert!(!status.success());
    assert!(stderr.contains("--max-line-bytes"), "{stderr}");
    let (status, stderr) = daemon.run_another(&["--database-url", "mysql://db"]);
    assert!(!status.success());
    assert!(
        stderr.contains("sqlite://PATH") && stderr.contains("postgres://"),
        "{stderr}"
    );
}

#[test]
fn a_database_newer_than_the_binary_is_refused() {
    let mut daemon = Daemon::start_sqlite();
    daemon.sigterm();
    let db = daemon.home().join("baton.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)",
        [],
    )
    .unwrap();
    drop(conn);
    let (status, stderr) = daemon.run_another(&[]);
    assert!(!status.success());
    assert!(stderr.contains("newer"), "{stderr}");
}

/// batond keeps its SQLite database to itself: another process cannot read it while the
/// daemon runs (it is told so, and the daemon keeps serving), can once the daemon stopped,
/// and a daemon does not start while another process is reading it.
#[test]
fn the_database_is_the_daemons_alone_while_it_runs() {
    let mut daemon = Daemon::start_sqlite();
    daemon.client().set("n", "k", json!("kept"));
    let db = daemon.home().join("baton.db");
    let outsider = rusqlite::Connection::open(&db).unwrap();
    outsider.busy_timeout(std::time::Duration::ZERO).unwrap();
    let read = |c: &rusqlite::Connection| {
        c.query_row(
            "SELECT value FROM records WHERE namespace = 'n' AND key = 'k'",
            [],
            |r| r.get::<_, String>(0),
        )
    };
    let refused = read(&outsider).unwrap_err();
    assert_eq!(
        refused.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy),
        "{refused}"
    );
    assert_eq!(daemon.client().get("n", "k")["value"], "kept");
    assert!(daemon.sigterm().success());
    assert_eq!(read(&outsider).unwrap(), "\"kept\"");

    // The outsider now holds a read transaction: the daemon cannot have the database.
    outsider.execute_batch("BEGIN").unwrap();
    read(&outsider).unwrap();
    let (status, stderr) = daemon.run_another(&[]);
    assert!(!status.success());
    assert!(
        stderr.contains("open in another process") && stderr.contains("close that process"),
        "{stderr}"
    );
    outsider.execute_batch("COMMIT").unwrap();
    drop(outsider);
    daemon.restart();
    assert_eq!(daemon.client().get("n", "k")["value"], "kept");
}
