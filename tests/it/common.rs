//! Test harness: a real `batond` per test in a fresh temp dir, and a line client that talks
//! to it as users do.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
    args: Vec<String>,
    log: Log,
    /// The wall time (epoch ms) of the manual clock, when the daemon runs on one.
    test_clock_ms: Option<i64>,
    /// The PostgreSQL database of this daemon (maybe shared with others), when it runs
    /// on PostgreSQL.
    postgres: Option<Arc<postgres::Database>>,
    /// Extra environment variables of the daemon's process.
    env: Vec<(String, String)>,
    /// RLIMIT_NOFILE of the daemon's process (soft and hard), when a test lowers it.
    nofile: Option<u64>,
}

/// The storage backend the suite runs on: `BATON_TEST_BACKEND=postgres` (each daemon gets
/// a fresh PostgreSQL database), else SQLite.
pub fn on_postgres() -> bool {
    match std::env::var("BATON_TEST_BACKEND").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Err(_) => false,
        Ok(other) => panic!("BATON_TEST_BACKEND is `{other}`; use sqlite or postgres"),
    }
}

/// Fresh PostgreSQL databases for tests: on `BATON_TEST_POSTGRES_URL`, else the local
/// service (`postgres://postgres@127.0.0.1:5432/test`); dropped with their daemon.
pub mod postgres {
    /// The server tests create their databases on (`scripts/test` sets
    /// `BATON_TEST_POSTGRES_URL` to `none` when it found none).
    pub fn server_url() -> String {
        std::env::var("BATON_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
    }

    /// A fresh database for tests of several daemons sharing one; None (said loudly) when
    /// no PostgreSQL is available.
    pub fn shared() -> Option<std::sync::Arc<Database>> {
        if server_url() == "none" {
            eprintln!("SKIPPED: no PostgreSQL available (scripts/postgres-env found none); this multi-instance test did not run");
            return None;
        }
        Some(std::sync::Arc::new(Database::create()))
    }

    fn admin<T>(sql: &str, then: impl FnOnce() -> T) -> T {
        run_sql(&server_url(), sql);
        then()
    }

    /// Runs `sql` on the database at `url`.
    fn run_sql(url: &str, sql: &str) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot reach PostgreSQL at {url} ({e}); start one or point BATON_TEST_POSTGRES_URL at a server where this user may create databases"
                    )
                });
            tokio::spawn(connection);
            client
                .batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        });
    }

    /// A database of its own, dropped (with every connection to it) when this is.
    pub struct Database {
        pub name: String,
    }

    impl Database {
        pub fn create() -> Database {
            let name = format!("baton_it_{}", uuid::Uuid::new_v4().simple());
            admin(&format!("CREATE DATABASE {name}"), || Database { name })
        }

        /// Ends every connection to it from the server's side (`pg_terminate_backend`), as
        /// a PostgreSQL restart or an administrator would.
        pub fn terminate_connections(&self) {
            admin(
                &format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
                    self.name
                ),
                || (),
            );
        }

        /// Runs `sql` in it, as an operator with psql would.
        pub fn execute(&self, sql: &str) {
            run_sql(&self.url(), sql);
        }

        /// Its URL, for `BATON_DATABASE_URL`.
        pub fn url(&self) -> String {
            let server = super::postgres::server_url();
            let base = match server.rsplit_once('/') {
                Some((base, _)) => base.to_string(),
                None => server,
            };
            format!("{base}/{}", self.name)
        }
    }

    impl Drop for Database {
        fn drop(&mut self) {
            admin(
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
                || (),
            );
        }
    }
}

impl Daemon {
    pub fn start() -> Daemon {
        Daemon::start_with(&[])
    }

    /// Starts batond with `--home <tempdir>/home` plus `args`.
    pub fn start_with(args: &[&str]) -> Daemon {
        Daemon::launch(args, None)
    }

    /// Starts batond on SQLite whatever the suite's backend: for tests of the database
    /// file itself (its mode, its lock, its schema).
    pub fn start_sqlite() -> Daemon {
        let mut daemon = Daemon {
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
            args: Vec::new(),
            log: Log::default(),
            test_clock_ms: None,
            postgres: None,
            env: Vec::new(),
            nofile: None,
        };
        daemon
            .spawn()
            .unwrap_or_else(|log| panic!("batond did not start:\n{log}"));
        daemon
    }

    /// Starts batond on the shared PostgreSQL database `db` (other daemons may use it too).
    pub fn start_shared(db: &Arc<postgres::Database>, args: &[&str]) -> Daemon {
        Daemon::start_shared_env(db, args, &[])
    }

    /// [`Daemon::start_shared`] with extra environment variables.
    pub fn start_shared_env(
        db: &Arc<postgres::Database>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        let mut daemon = Daemon {
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
            args: args.iter().map(|s| s.to_string()).collect(),
            log: Log::default(),
            test_clock_ms: None,
            postgres: Some(db.clone()),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nofile: None,
        };
        daemon
            .spawn()
            .unwrap_or_else(|log| panic!("batond did not start:\n{log}"));
        daemon
    }

    /// Starts batond on a manual clock (`BATON_TEST_CLOCK_MS`, from the real time now):
    /// nothing expires until [`Daemon::advance_clock`] moves it.
    pub fn start_on_test_clock() -> Daemon {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        Daemon::launch(&[], Some(now))
    }

    /// [`Daemon::start_on_test_clock`] with `args`.
    pub fn start_on_test_clock_with(args: &[&str]) -> Daemon {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        Daemon::launch(args, Some(now))
    }

    /// The address a network listener of this scheme (`tls`, `tcp`) bound, as logged.
    pub fn listening(&self, scheme: &str) -> std::net::SocketAddr {
        let marker = format!("serving {scheme}://");
        let log = self.log();
        let at = log
            .find(&marker)
            .unwrap_or_else(|| panic!("no {scheme} listener in the log:\n{log}"));
        let rest = &log[at + marker.len()..];
        let end = rest.find(' ').expect("the address ends");
        rest[..end].parse().expect("an address")
    }

    /// Starts batond with `args`, extra environment variables and, when given, its open-file
    /// limit (soft and hard: batond raises its soft limit to the hard one) set to `nofile`.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], nofile: Option<u64>) -> Daemon {
        Daemon::launch_with(args, None, env, nofile)
    }

    fn launch(args: &[&str], test_clock_ms: Option<i64>) -> Daemon {
        Daemon::launch_with(args, test_clock_ms, &[], None)
    }

    fn launch_with(
        args: &[&str],
        test_clock_ms: Option<i64>,
        env: &[(&str, &str)],
        nofile: Option<u64>,
    ) -> Daemon {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut daemon = Daemon {
            dir,
            child: None,
            args: args.iter().map(|s| s.to_string()).collect(),
            log: Log::default(),
            test_clock_ms,
            postgres: on_postgres().then(|| Arc::new(postgres::Database::create())),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            nofile,
        };
        daemon
            .spawn()
            .unwrap_or_else(|log| panic!("batond did not start:\n{log}"));
        daemon
    }

    /// Moves the manual clock `ms` forward; returns once the daemon has ended what came
    /// due (AdvanceClock answers after the writer has run).
    pub fn advance_clock(&mut self, ms: u64) -> Value {
        let clock = self
            .test_clock_ms
            .as_mut()
            .expect("started on the test clock");
        *clock += ms as i64;
        self.client().result("AdvanceClock", json!({ "ms": ms }))
    }

    /// Starts the daemon again (the previous one must have exited) as if it had been down
    /// for `ms`: its manual clock resumes that much later.
    pub fn restart_later(&mut self, ms: u64) {
        *self
            .test_clock_ms
            .as_mut()
            .expect("started on the test clock") += ms as i64;
        self.restart();
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_batond"));
        cmd.arg("--home")
            .arg(self.home())
            .args(&self.args)
            .env("RUST_LOG", "info")
            .env("HOME", self.dir.path())
            .env("BATON_ENV_FILE", self.dir.path().join("absent.env"))
            .env_remove("BATON_SOCKET_PATH")
            .env_remove("BATON_DATABASE_URL")
            .env_remove("BATON_TEST_CLOCK_MS")
            .env_remove("BATON_TEST_CLOCK_SKEW_MS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(ms) = self.test_clock_ms {
            cmd.env("BATON_TEST_CLOCK_MS", ms.to_string());
        }
        if let Some(db) = &self.postgres {
            cmd.env("BATON_DATABASE_URL", db.url());
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(nofile) = self.nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; it runs in the child before exec.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: nofile as libc::rlim_t,
                        rlim_max: nofile as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd
    }

    /// Spawns the daemon and waits until it says it serves; Err(log) if it exits first.
    fn spawn(&mut self) -> Result<(), String> {
        let (child, ready) = spawn_ready(self.command(), self.dir.path(), &self.log);
        self.child = Some(child);
        if ready {
            Ok(())
        } else {
            let _ = self.wait();
            Err(self.log())
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket_path(&self) -> PathBuf {
        self.home().join("baton.sock")
    }

    pub fn log(&self) -> String {
        self.log.text()
    }

    /// Waits until the log contains `needle` (it comes from another process, through a
    /// pipe); false if it does not within `limit`.
    pub fn wait_for_log(&self, needle: &str, limit: Duration) -> bool {
        self.log.wait_for(0, needle, Some(limit))
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket_path())
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child process.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        self.wait();
    }

    pub fn sigterm(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait()
    }

    pub fn wait(&mut self) -> ExitStatus {
        self.child.as_mut().expect("running").wait().expect("wait")
    }

    /// Starts the daemon again on the same home (the previous one must have exited).
    pub fn restart(&mut self) {
        self.spawn()
            .unwrap_or_else(|log| panic!("batond did not restart:\n{log}"));
    }

    /// Runs a second batond with this one's settings plus `extra`; returns its exit status and stderr.
    pub fn run_another(&self, extra: &[&str]) -> (ExitStatus, String) {
        let mut cmd = self.command();
        cmd.args(extra);
        let mut child = cmd.spawn().expect("spawn");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (child.wait().unwrap(), stderr)
    }
}

/// Spawns a batond and waits until it tells, as it tells systemd (READY=1 on
/// NOTIFY_SOCKET, a datagram socket in `dir`), that it serves: true then, false if it exits
/// first. Its stderr goes to `log`.
pub fn spawn_ready(mut cmd: Command, dir: &Path, log: &Log) -> (Child, bool) {
    let path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&path);
    let notify = UnixDatagram::bind(&path).expect("bind the notify socket");
    // Waits in steps, to notice a batond that exits instead of serving.
    notify
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    cmd.env("NOTIFY_SOCKET", &path);
    let mut child = cmd.spawn().expect("spawn batond");
    let from = log.len();
    log.follow(child.stderr.take().expect("stderr"));
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut buf = [0u8; 512];
    loop {
        match notify.recv(&mut buf) {
            Ok(n)
                if String::from_utf8_lossy(&buf[..n])
                    .lines()
                    .any(|l| l == "READY=1") =>
            {
                // What it logged before it was ready (the addresses it serves, a one-time
                // token) comes through a pipe that another thread reads: the tests that
                // read it find it all. That line is already written; this waits for the
                // pipe, not for batond.
                let caught_up = log.wait_for(from, "listening on", Some(Duration::from_secs(60)));
                assert!(
                    caught_up,
                    "batond's start-up log did not arrive:\n{}",
                    log.text()
                );
                return (child, true);
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if child.try_wait().expect("try_wait").is_some() {
                    return (child, false);
                }
                assert!(
                    Instant::now() < deadline,
                    "batond neither served nor exited:\n{}",
                    log.text()
                );
            }
            Err(e) => panic!("the notify socket: {e}"),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The PostgreSQL database, if any, is dropped with the field, after the daemon.
    }
}

/// A daemon's stderr as threads collect it (one per process started on it): the text so
/// far, and waits for a line to appear or the streams to end on a condition variable,
/// never by sleeping.
#[derive(Clone, Default)]
pub struct Log {
    inner: Arc<(Mutex<LogState>, Condvar)>,
}

#[derive(Default)]
struct LogState {
    text: String,
    /// Streams still being read.
    open: usize,
}

impl Log {
    /// Starts a thread that appends every line of `stderr` to this log.
    pub fn follow(&self, stderr: ChildStderr) {
        let inner = self.inner.clone();
        inner.0.lock().unwrap().open += 1;
        std::thread::spawn(move || {
            let (state, changed) = &*inner;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                state.lock().unwrap().text.push_str(&format!("{line}\n"));
                changed.notify_all();
            }
            state.lock().unwrap().open -= 1;
            changed.notify_all();
        });
    }

    pub fn text(&self) -> String {
        self.inner.0.lock().unwrap().text.clone()
    }

    /// Bytes logged so far: pass to [`Log::wait_for`] to look only at what comes next.
    pub fn len(&self) -> usize {
        self.inner.0.lock().unwrap().text.len()
    }

    /// Waits until what was logged after byte `from` contains `needle` (true), or every
    /// stream ends or `limit` passes without it (false).
    pub fn wait_for(&self, from: usize, needle: &str, limit: Option<Duration>) -> bool {
        let deadline = limit.map(|l| Instant::now() + l);
        let (state, changed) = &*self.inner;
        let mut guard = state.lock().unwrap();
        loop {
            if guard.text[from.min(guard.text.len())..].contains(needle) {
                return true;
            }
            if guard.open == 0 {
                return false;
            }
            guard = match deadline {
                None => changed.wait(guard).unwrap(),
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    changed.wait_timeout(guard, left).unwrap().0
                }
            };
        }
    }

    /// Waits until every stream has ended (the processes exited, their last lines are in).
    pub fn wait_end(&self) {
        let (state, changed) = &*self.inner;
        let mut guard = state.lock().unwrap();
        while guard.open > 0 {
            guard = changed.wait(guard).unwrap();
        }
    }
}

pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Client {
        let stream = UnixStream::connect(path).expect("connect to batond");
        Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            next_id: 1,
        }
    }

    /// Sends one request and returns the whole response object.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(&json!({"id": id, "method": method, "params": params}).to_string());
        let response = self.read_line();
        assert_eq!(
            response["id"],
            json!(id),
            "answer to another request: {response}"
        );
        response
    }

    /// The `result` of a call; panics on an error answer.
    pub fn result(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} failed: {response}"),
        }
    }

    /// The `error` of a call; panics on success.
    pub fn error(&mut self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        match response.get("error") {
            Some(error) => error.clone(),
            None => panic!("{method} should have failed: {response}"),
        }
    }

    /// Makes a read that waits longer than `timeout` fail the test instead of hanging it.
    pub fn set_read_timeout(&mut self, timeout: std::time::Duration) {
        self.writer.set_read_timeout(Some(timeout)).unwrap();
    }

    /// Writes that block longer than `timeout` fail (a daemon that stopped reading).
    pub fn set_write_timeout(&mut self, timeout: std::time::Duration) {
        self.writer.set_write_timeout(Some(timeout)).unwrap();
    }

    /// Closes the writing side only (as `nc -N` does after its last request); answers
    /// still arrive.
    pub fn shutdown_write(&mut self) {
        self.writer
            .shutdown(std::net::Shutdown::Write)
            .expect("shut down the writing side");
    }

    pub fn send_line(&mut self, line: &str) {
        self.send_raw(format!("{line}\n").as_bytes());
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write to batond");
    }

    /// Sends bytes; false when the daemon is gone.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> bool {
        self.writer.write_all(bytes).is_ok()
    }

    pub fn read_line(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("read from batond");
        assert!(n > 0, "batond closed the connection");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Reads one line; None when the connection is closed or broken.
    pub fn try_read_line(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(n) if n > 0 => serde_json::from_str(&line).ok(),
            _ => None,
        }
    }

    // Shorthands for the state methods.
    pub fn set(&mut self, namespace: &str, key: &str, value: Value) -> Value {
        self.result(
            "Set",
            json!({"namespace": namespace, "key": key, "value": value}),
        )
    }

    pub fn get(&mut self, namespace: &str, key: &str) -> Value {
        self.result("Get", json!({"namespace": namespace, "key": key}))
    }
}

// ---- locks, taken and given back the same way by every test module ----

/// AcquireResourceLock of `key` by `owner` with `extra` params merged in (`json!({})` for
/// none); its answer, whatever it is.
pub fn acquire_with(client: &mut Client, key: &str, owner: &str, extra: Value) -> Value {
    let mut params = json!({"resource_key": key, "owner": owner});
    let extra = extra
        .as_object()
        .expect("extra params are an object")
        .clone();
    params.as_object_mut().unwrap().extend(extra);
    client.result("AcquireResourceLock", params)
}

/// AcquireResourceLock of `key` by `owner`; its answer, whatever it is.
pub fn acquire(client: &mut Client, key: &str, owner: &str) -> Value {
    acquire_with(client, key, owner, json!({}))
}

/// [`acquire_with`], which must be granted.
#[track_caller]
pub fn acquired_with(client: &mut Client, key: &str, owner: &str, extra: Value) -> Value {
    let lease = acquire_with(client, key, owner, extra);
    assert_eq!(lease["status"], "acquired", "{lease}");
    lease
}

/// [`acquire`], which must be granted.
#[track_caller]
pub fn acquired(client: &mut Client, key: &str, owner: &str) -> Value {
    acquired_with(client, key, owner, json!({}))
}

/// ReleaseResourceLock of a lease an acquire answered, with `outcome`.
pub fn release(client: &mut Client, lease: &Value, outcome: &str) -> Value {
    client.result(
        "ReleaseResourceLock",
        json!({"resource_key": lease["resource_key"], "lease_id": lease["lease_id"], "outcome": outcome}),
    )
}

/// Waits until `condition` holds, asking again and again; fails after `limit`.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "the condition did not hold within {limit:?}"
        );
    }
}

/// One numeric field of every object in a JSON array: `u64s(&history, "version")`.
#[track_caller]
pub fn u64s(list: &Value, field: &str) -> Vec<u64> {
    let list = list
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"));
    list.iter()
        .map(|item| {
            item[field]
                .as_u64()
                .unwrap_or_else(|| panic!("no {field} in {item}"))
        })
        .collect()
}

/// Asserts an error object has this code and kind; returns its data.
#[track_caller]
pub fn assert_error(error: &Value, code: i64, kind: &str) -> Value {
    assert_eq!(error["code"], json!(code), "wrong code: {error}");
    assert_eq!(error["data"]["kind"], json!(kind), "wrong kind: {error}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "every error has a message: {error}"
    );
    error["data"].clone()
}
