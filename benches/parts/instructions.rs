//! Instructions per operation, counted by valgrind's callgrind on one batond: on the
//! writer thread and on all its threads. A count repeats for the same binary and load
//! whatever else the machine is doing, where wall-clock rates on a shared 2-core machine
//! drift by 2x between runs; so a change's effect on the work per request can be read
//! from one run of the old binary and one of the new. Under valgrind batond runs some 50
//! times slower, so batches are not those of a native run; the rows say how many writes a
//! commit held. Skipped, with a row that says so, where valgrind is not installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::locks::lock_cycles;
use super::tasks::{run_nodes, Worker};
use super::{call, concurrent_cas_sets, connect, windowed_sets, Row};

const NAME: &str = "instructions per operation (callgrind)";

/// Sends one command to the callgrind run `pid` (`-i on`, `-z`, `-d`, ...).
fn control(pid: u32, args: &[&str]) -> bool {
    Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The instructions in the dump files `out.<dump>-<thread>`: the writer thread's (the file
/// that names the writer's loop) and all threads'.
fn dumped(out: &Path, dump: usize) -> (u64, u64) {
    let dir = out.parent().unwrap();
    let prefix = format!("{}.{dump}-", out.file_name().unwrap().to_string_lossy());
    let (mut writer, mut all) = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap().map_while(Result::ok) {
        if !entry.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let count: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("summary: ").or(l.strip_prefix("totals: ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        all += count;
        if text.contains("baton::methods::writer::Writer::spawn") {
            writer += count;
        }
    }
    (writer, all)
}

async fn commits(socket: &Path) -> (u64, u64) {
    let (mut lines, mut w) = connect(socket).await;
    let m = call(
        &mut lines,
        &mut w,
        serde_json::json!({"id": 1, "method": "Metrics"}),
    )
    .await;
    let s = &m["result"]["storage"];
    (
        s["commits"].as_u64().unwrap_or(0),
        s["writes"].as_u64().unwrap_or(0),
    )
}

pub async fn count(dir: &Path, rows: &mut Vec<Row>, errors: &mut u64) {
    let installed = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !installed("valgrind") || !installed("callgrind_control") {
        rows.push(Row {
            name: NAME,
            figure: "skipped: valgrind is not installed".into(),
            target: "-".into(),
            pass: None,
        });
        return;
    }
    let home = dir.join("callgrind-home");
    let out = dir.join("callgrind.out");
    let mut daemon = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--separate-threads=yes",
            "--instr-atstart=no",
        ])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(env!("CARGO_BIN_EXE_batond"))
        .arg("--home")
        .arg(&home)
        .env("BATON_ENV_FILE", dir.join("none.env"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start batond under valgrind");
    let pid = daemon.id();
    let socket: PathBuf = home.join("baton.sock");
    let start = Instant::now();
    while tokio::net::UnixStream::connect(&socket).await.is_err() {
        if start.elapsed() > Duration::from_secs(120) || daemon.try_wait().ok().flatten().is_some()
        {
            eprintln!("instructions bench: batond under valgrind did not start listening");
            *errors += 1;
            let _ = daemon.kill();
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let quick = super::quick();
    let scale = if quick { 4 } else { 1 };
    let mut dump = 0;
    // (row, what one operation is, operations)
    let loads: [(&'static str, &str, usize); 4] = [
        (
            "instructions per durable CAS Set, 64 connections",
            "Set",
            2_048 / scale,
        ),
        (
            "instructions per durable Set, window 64",
            "Set",
            4_000 / scale,
        ),
        (
            "instructions per lock cycle, 16 connections",
            "cycle",
            800 / scale,
        ),
        (
            "instructions per node, 4 plain workers",
            "node",
            400 / scale,
        ),
    ];
    for (name, unit, ops) in loads {
        let before = commits(&socket).await;
        if !control(pid, &["-i", "on"]) || !control(pid, &["-z"]) {
            eprintln!("instructions bench: callgrind_control cannot reach batond");
            *errors += 1;
            break;
        }
        let sockets = std::slice::from_ref(&socket);
        let (ops, (_, e)) = match unit {
            "cycle" => (ops / 16 * 16, lock_cycles(sockets, 16, ops / 16).await),
            "node" => (ops, run_nodes(&socket, ops, 4, false, Worker::Plain).await),
            _ if name.contains("window") => (ops, windowed_sets(&socket, 64, ops).await),
            _ => (
                ops / 64 * 64,
                concurrent_cas_sets(sockets, 64, ops / 64).await,
            ),
        };
        *errors += e;
        dump += 1;
        let dumped_ok = control(pid, &["-d"]);
        control(pid, &["-i", "off"]);
        let after = commits(&socket).await;
        let (writer, all) = if dumped_ok {
            dumped(&out, dump)
        } else {
            (0, 0)
        };
        if all == 0 {
            eprintln!("instructions bench: no callgrind dump for {name}");
            *errors += 1;
            continue;
        }
        let per = |n: u64| n as f64 / ops as f64 / 1000.0;
        let (commits, writes) = (after.0 - before.0, after.1 - before.1);
        rows.push(Row {
            name,
            figure: format!(
                "writer {:.1} k, all threads {:.1} k per {unit} ({:.1} writes per commit)",
                per(writer),
                per(all),
                writes as f64 / commits.max(1) as f64
            ),
            target: "-".into(),
            pass: None,
        });
    }
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = daemon.wait();
}
