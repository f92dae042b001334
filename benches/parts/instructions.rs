//! Instructions per operation, counted by valgrind's callgrind on one batond: on the
//! writer thread and on all its threads. A count repeats for the same binary and load
//! whatever else the machine is doing, where wall-clock rates on a shared 2-core machine
//! drift by 2x between runs; so a change's effect on the work per request can be read
//! from one run of the old binary and one of the new. Under valgrind batond runs some 50
//! times slower, so batches are not those of a native run; the rows say how many writes a
//! commit held. Skipped, with a row that says so, where valgrind is not installed.

use std::path::Path;
use std::process::{Command, Stdio};

use super::locks::lock_cycles;
use super::tasks::{run_nodes, Worker};
use super::{call, concurrent_cas_sets, connect, start_daemon_under, windowed_sets, Row};

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
        if text.contains("baton::engine::batches::WriterLoop") {
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

/// A load the group counts.
#[derive(Clone, Copy)]
enum Load {
    CasSets,
    WindowSets,
    LockCycles,
    Nodes,
}

impl Load {
    const ALL: [Load; 4] = [
        Load::CasSets,
        Load::WindowSets,
        Load::LockCycles,
        Load::Nodes,
    ];

    /// The row's name and what one operation is.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Load::CasSets => ("instructions per durable CAS Set, 64 connections", "Set"),
            Load::WindowSets => ("instructions per durable Set, window 64", "Set"),
            Load::LockCycles => ("instructions per lock cycle, 16 connections", "cycle"),
            Load::Nodes => ("instructions per node, 4 plain workers", "node"),
        }
    }

    /// Runs about `ops` operations (quick: a quarter); the operations run and the errors.
    async fn run(self, socket: &Path, quick: bool) -> (usize, u64) {
        let scale = if quick { 4 } else { 1 };
        let sockets = &[socket.to_path_buf()];
        match self {
            Load::CasSets => {
                let per_conn = 2_048 / scale / 64;
                (
                    64 * per_conn,
                    concurrent_cas_sets(sockets, 64, per_conn).await.1,
                )
            }
            Load::WindowSets => {
                let ops = 4_000 / scale;
                (ops, windowed_sets(socket, 64, ops).await.1)
            }
            Load::LockCycles => {
                let per_conn = 800 / scale / 16;
                (16 * per_conn, lock_cycles(sockets, 16, per_conn).await.1)
            }
            Load::Nodes => {
                let ops = 400 / scale;
                (ops, run_nodes(socket, ops, 4, false, Worker::Plain).await.1)
            }
        }
    }
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
    // A directory of its own: the main daemon runs beside it.
    let dir = dir.join("callgrind");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("callgrind.out");
    let valgrind = [
        "valgrind".to_string(),
        "--tool=callgrind".into(),
        "--separate-threads=yes".into(),
        "--instr-atstart=no".into(),
        format!("--callgrind-out-file={}", out.display()),
    ];
    let (mut daemon, _) = start_daemon_under(&valgrind, &dir, &[]);
    let pid = daemon.id();
    // `BATON_BENCH_CALLGRIND_KEEP=<dir>`: the dumps are copied there at the end, for
    // `callgrind_annotate` (dump 1 is the first load of `Load::ALL`, and so on).
    let keep = std::env::var_os("BATON_BENCH_CALLGRIND_KEEP").map(std::path::PathBuf::from);
    let socket = dir.join("home/baton.sock");

    let mut dump = 0;
    for load in Load::ALL {
        let (name, unit) = load.names();
        let before = commits(&socket).await;
        if !control(pid, &["-i", "on"]) || !control(pid, &["-z"]) {
            eprintln!("instructions bench: callgrind_control cannot reach batond");
            *errors += 1;
            break;
        }
        let (ops, e) = load.run(&socket, super::quick()).await;
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
    if let Some(keep) = keep {
        std::fs::create_dir_all(&keep).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap().map_while(Result::ok) {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("callgrind.out")
            {
                std::fs::copy(entry.path(), keep.join(entry.file_name())).unwrap();
            }
        }
        eprintln!(
            "instructions bench: callgrind dumps copied to {}",
            keep.display()
        );
    }
}
