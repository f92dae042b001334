//! Issue 12, "Trust": what batond refuses to trust at start (foreign or shared homes, env
//! files and sockets, a database reached through a hard link, a missing or damaged
//! database), how it answers signals and a bounded shutdown, what Health and Metrics report
//! about failing storage and accept errors, and reads that are snapshots.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Client, Daemon};
use serde_json::json;

/// Long enough for anything that should happen to happen on a loaded machine; a test that
/// waits this long has failed.
const PATIENCE: Duration = Duration::from_secs(20);

/// A batond started by a test itself (a home of its own choosing, limits, ...).
struct Proc {
    child: Child,
    log: Arc<Mutex<String>>,
    /// Whether it logged "listening on" (false: it exited first).
    started: bool,
    socket: PathBuf,
}

/// `batond --home HOME` with a private HOME and no env file unless the test gives one.
fn batond(dir: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_batond"));
    cmd.arg("--home")
        .arg(home)
        .env("RUST_LOG", "info")
        .env("HOME", dir)
        .env("BATON_ENV_FILE", dir.join("absent.env"))
        .env_remove("BATON_SOCKET_PATH")
        .env_remove("BATON_DATABASE_URL")
        .env_remove("BATON_SOCKET_MODE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

impl Proc {
    /// Spawns and waits until it listens or exits.
    fn spawn(mut cmd: Command, socket: PathBuf) -> Proc {
        let mut child = cmd.spawn().expect("spawn batond");
        let stderr = child.stderr.take().expect("stderr");
        let log: Arc<Mutex<String>> = Arc::default();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut ready_tx = Some(ready_tx);
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    log.lock().unwrap().push_str(&format!("{line}\n"));
                    if line.contains("listening on") {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                }
            });
        }
        let started = ready_rx.recv_timeout(PATIENCE).is_ok();
        Proc {
            child,
            log,
            started,
            socket,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits for the log to contain `needle`; false after PATIENCE.
    fn wait_for_log(&self, needle: &str) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    /// Waits for the process to exit; None if it is still running after `limit`.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the log reader catch up with the last lines.
                std::thread::sleep(Duration::from_millis(20));
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Asserts the daemon refused to start (a non-zero exit) and returns its log.
    #[track_caller]
    fn assert_refused(mut self) -> String {
        assert!(
            !self.started,
            "batond started but should have refused:\n{}",
            self.log()
        );
        let status = self.wait_exit(PATIENCE).expect("exits after refusing");
        assert!(!status.success(), "{status:?}\n{}", self.log());
        self.log()
    }

    fn signal(&self, signal: i32) {
        // SAFETY: a signal to our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    fn client(&self) -> Client {
        Client::connect(&self.socket)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts batond on `home` inside `dir` with extra args.
fn start(dir: &Path, home: &Path, args: &[&str]) -> Proc {
    let mut cmd = batond(dir, home);
    cmd.args(args);
    Proc::spawn(cmd, home.join("baton.sock"))
}

fn private_dir(path: &Path) {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(path)
        .unwrap();
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

// ---- item 5: one database, one daemon, whatever path reaches it ----

#[test]
fn a_hard_link_to_a_running_daemons_database_is_refused() {
    let daemon = Daemon::start();
    daemon.client().set("n", "k", json!(1));
    let other_home = daemon.dir().join("other-home");
    private_dir(&other_home);
    std::fs::hard_link(daemon.home().join("baton.db"), other_home.join("baton.db")).unwrap();
    let log = start(daemon.dir(), &other_home, &[]).assert_refused();
    assert!(log.contains("already running"), "{log}");
    assert!(log.contains("hard link"), "says how this can happen: {log}");
    let mut c = daemon.client();
    c.set("n", "k", json!(2));
    assert_eq!(c.get("n", "k")["value"], 2, "the first daemon still serves");
}
