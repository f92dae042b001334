//! `scripts/bench`: batond's speed and memory beside a bare tokio Unix-socket line echo.
//! Prints one table of figures with each target; exits non-zero only if the daemon
//! answered with errors. `BATON_BENCH_QUICK=1` shortens every run.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as TokioBufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};

#[path = "parts/agents.rs"]
mod agents;
#[path = "parts/locks.rs"]
mod locks;
#[path = "parts/redis.rs"]
mod redis;
#[path = "parts/tasks.rs"]
mod tasks;

use tasks::Worker;

type Lines = tokio::io::Lines<TokioBufReader<OwnedReadHalf>>;

/// TLS on loopback against the Unix socket, on one daemon.
#[path = "parts/tls.rs"]
mod tls;

/// Two daemons on one PostgreSQL database, beside one on SQLite.
#[path = "parts/postgres.rs"]
mod postgres;

/// Retention and work in steps: write stalls, the file's size, CAS as the store grows.
#[path = "parts/retention.rs"]
mod retention;

/// Instructions per operation on one daemon under callgrind.
#[path = "parts/instructions.rs"]
mod instructions;

/// The harness hooks as whole processes.
#[path = "parts/hooks.rs"]
mod hooks;

#[path = "parts/daemon.rs"]
mod daemon;
#[path = "parts/load.rs"]
mod load;
#[path = "parts/measure.rs"]
mod measure;

use daemon::*;
use load::*;
use measure::*;

struct Row {
    name: &'static str,
    figure: String,
    target: String,
    pass: Option<bool>,
}

/// Whether the group of benchmarks named `group` runs: all of them unless
/// `BATON_BENCH_ONLY` lists some (comma-separated: state, locks, tasks, agents, tls,
/// postgres, instructions, retention, hooks; `dag` is the DAG runs of `tasks` alone).
fn only(group: &str) -> bool {
    std::env::var("BATON_BENCH_ONLY").map_or(true, |v| v.split(',').any(|g| g.trim() == group))
}

fn quick() -> bool {
    std::env::var("BATON_BENCH_QUICK").is_ok_and(|v| v == "1")
}

async fn run() -> (Vec<Row>, u64) {
    let dir = tempfile::tempdir().unwrap();
    // The durable peer, and the same server keeping nothing, for reference.
    let redis_aof = redis::start(&dir.path().join("redis-aof"), true).await;
    let redis_mem = redis::start(&dir.path().join("redis-mem"), false).await;
    let mut rows = Vec::new();
    let mut errors = 0;
    let (n_seq, cas_per_conn, rounds) = if quick() {
        (2_000, 200, 3)
    } else {
        (20_000, 1_500, 10)
    };
    let (cycles_per_conn, hand_rounds, probes, live_locks, finished_tasks) = if quick() {
        (200, 100, 500, 10_000, 1_000)
    } else {
        (2_000, 1_000, 3_000, 100_000, 10_000)
    };

    let (sync_wall, sync_cpu) = tokio::task::block_in_place(|| disk_sync_us(dir.path()));
    rows.push(Row {
        name: "disk: 32 KiB write + fdatasync (median)",
        figure: format!("{sync_wall:.0} us, of which CPU {sync_cpu:.0} us"),
        target: "-".into(),
        pass: None,
    });

    // Memory first, on a fresh daemon.
    let mut daemon = start_daemon(dir.path());
    let socket = dir.path().join("home/baton.sock");
    let idle = rss_mb(daemon.id());
    rows.push(Row {
        name: "RSS idle",
        figure: format!("{idle:.1} MB"),
        target: "< 30 MB".into(),
        pass: Some(idle < 30.0),
    });
    let mut idle_conns = Vec::new();
    for _ in 0..1000 {
        let (mut lines, mut w) = connect(&socket).await;
        round_trip(&mut lines, &mut w, b"{\"id\":1,\"method\":\"Health\"}\n").await;
        idle_conns.push((lines, w));
    }
    let loaded = rss_mb(daemon.id());
    rows.push(Row {
        name: "RSS with 1,000 idle connections",
        figure: format!("{loaded:.1} MB"),
        target: "< 100 MB".into(),
        pass: Some(loaded < 100.0),
    });
    drop(idle_conns);

    if only("state") {
        // The ceiling: a bare line echo.
        let echo_path = dir.path().join("echo.sock");
        let echo = echo_path.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(echo_server(echo));
        });
        while UnixStream::connect(&echo_path).await.is_err() {
            tokio::task::yield_now().await;
        }
        let get: &'static [u8] =
        b"{\"id\":1,\"method\":\"Get\",\"params\":{\"namespace\":\"bench\",\"key\":\"small\"}}\n";
        let (echo_p50, echo_p99) =
            tokio::task::block_in_place(|| sequential(&echo_path, get, n_seq, &mut 0));
        rows.push(Row {
            name: "echo round trip (ceiling)",
            figure: format!("p50 {echo_p50:.1} us, p99 {echo_p99:.1} us"),
            target: "-".into(),
            pass: None,
        });

        {
            let (mut lines, mut w) = connect(&socket).await;
            round_trip(&mut lines, &mut w, b"{\"id\":0,\"method\":\"Set\",\"params\":{\"namespace\":\"bench\",\"key\":\"small\",\"value\":{\"usd\":10000}}}\n").await;
        }
        let (get_p50, get_p99) =
            tokio::task::block_in_place(|| sequential(&socket, get, n_seq, &mut errors));
        rows.push(Row {
            name: "sequential Get round trip",
            figure: format!(
                "p50 {get_p50:.1} us ({:.2}x echo), p99 {get_p99:.1} us",
                get_p50 / echo_p50
            ),
            target: "p50 <= 2.5x echo".into(),
            pass: Some(get_p50 <= 2.5 * echo_p50),
        });

        // Baton and Redis take turns, three runs each: one run lasts about a second, and
        // this machine's speed drifts by more than the margin between them.
        let ((cas_rate, cpu), on_redis_aof) = in_turns(
            daemon.id(),
            (64 * cas_per_conn) as f64,
            || concurrent_cas_sets(std::slice::from_ref(&socket), 64, cas_per_conn),
            redis_aof
                .as_ref()
                .map(|r| || redis::cas_sets(&r.socket, 64, cas_per_conn)),
            &mut errors,
        )
        .await;
        rows.push(Row {
            name: "durable CAS Set, 64 connections (median of 3)",
            figure: format!("{cas_rate:.0} /s"),
            target: ">= 25,000 /s".into(),
            pass: Some(cas_rate >= 25_000.0),
        });
        rows.push(cpu.row("CPU per durable CAS Set, 64 connections"));

        // The same load with every Set fenced by a lease held the whole time (one per
        // connection, on a key of its own), in turns with plain runs: what the fence adds.
        let fences = Fences::hold(&socket, 64).await;
        let ((plain_rate, plain_cpu), (fenced_rate, fenced_cpu)) = alternated(
            daemon.id(),
            (64 * cas_per_conn) as f64,
            || concurrent_cas_sets(std::slice::from_ref(&socket), 64, cas_per_conn),
            || fenced_cas_sets(&socket, 64, cas_per_conn, &fences),
            &mut errors,
        )
        .await;
        errors += fences.release(&socket).await;
        let time_ratio = plain_rate / fenced_rate;
        let cpu_ratio = fenced_cpu.daemon_us() / plain_cpu.daemon_us();
        rows.push(Row {
            name: "fenced CAS Set, 64 connections (median of 3)",
            figure: format!(
                "{fenced_rate:.0} /s: {time_ratio:.2}x the time of a plain CAS Set ({plain_rate:.0} /s, in turns), batond CPU {cpu_ratio:.2}x"
            ),
            target: "<= 1.10x plain".into(),
            pass: Some(time_ratio <= 1.10),
        });
        rows.push(fenced_cpu.row("CPU per fenced CAS Set, 64 connections"));

        let on_redis = [
            on_redis_aof,
            match &redis_mem {
                Some(r) => {
                    let (rate, e) = redis::cas_sets(&r.socket, 64, cas_per_conn).await;
                    errors += e;
                    Some(rate)
                }
                None => None,
            },
        ];
        versus_redis(
            &mut rows,
            [
                "Redis Lua CAS, 64 conns, fsync always (median of 3)",
                "Redis Lua CAS, 64 conns, no persistence",
                "durable CAS Set vs Redis fsync always",
            ],
            cas_rate,
            on_redis[0],
            on_redis[1],
            1.0,
        );
        rows.push(cpu_hop_row("CPU to CPU and back, just after (cache line)"));

        let total = cas_per_conn * 64;
        let (window_rate, e) = windowed_sets(&socket, 64, total).await;
        errors += e;
        rows.push(Row {
            name: "durable Sets, window 64, 1 connection",
            figure: format!("{window_rate:.0} /s"),
            target: ">= 60,000 /s".into(),
            pass: Some(window_rate >= 60_000.0),
        });
        for (redis, name) in [
            (&redis_aof, "Redis SETs, window 64, fsync always"),
            (&redis_mem, "Redis SETs, window 64, no persistence"),
        ] {
            if let Some(r) = redis {
                let (rate, e) = redis::windowed_sets(&r.socket, 64, total).await;
                errors += e;
                rows.push(Row {
                    name,
                    figure: format!("{rate:.0} /s ({:.2}x Baton)", rate / window_rate),
                    target: "-".into(),
                    pass: None,
                });
            }
        }

        let (best, median, pipe_errors) = pipelined_sets(&socket, 1000, rounds).await;
        errors += pipe_errors;
        rows.push(Row {
            name: "1,000 pipelined Sets, 1 connection",
            figure: format!("best {best:.0} /s, median {median:.0} /s"),
            target: ">= 15,000 /s".into(),
            pass: Some(median >= 15_000.0),
        });
    }

    if only("locks") {
        // In turns with Redis, as the CAS runs above.
        let ((cycle_rate, cpu), on_redis_aof) = in_turns(
            daemon.id(),
            (16 * cycles_per_conn) as f64,
            || locks::lock_cycles(std::slice::from_ref(&socket), 16, cycles_per_conn),
            redis_aof
                .as_ref()
                .map(|r| || redis::lock_pairs(&r.socket, 16, cycles_per_conn)),
            &mut errors,
        )
        .await;
        rows.push(Row {
            name: "lock acquire+release, 16 connections (median of 3)",
            figure: format!("{cycle_rate:.0} cycles/s"),
            target: ">= 15,000 /s".into(),
            pass: Some(cycle_rate >= 15_000.0),
        });
        rows.push(cpu.row("CPU per lock cycle, 16 connections"));
        let on_redis = [
            on_redis_aof,
            match &redis_mem {
                Some(r) => {
                    let (rate, e) = redis::lock_pairs(&r.socket, 16, cycles_per_conn).await;
                    errors += e;
                    Some(rate)
                }
                None => None,
            },
        ];
        versus_redis(
            &mut rows,
            [
                "Redis lock pairs, 16 conns, fsync always (median of 3)",
                "Redis lock pairs, 16 conns, no persistence",
                "lock cycles vs Redis fsync always",
            ],
            cycle_rate,
            on_redis[0],
            on_redis[1],
            1.0,
        );
        rows.push(cpu_hop_row("CPU to CPU and back, just after (cache line)"));

        let (hand_p50, hand_p99) =
            locks::hand_off(&socket, &socket, hand_rounds, &mut errors).await;
        rows.push(Row {
            name: "lock hand-off, release to waiter",
            figure: format!("p50 {hand_p50:.0} us, p99 {hand_p99:.0} us"),
            target: "p50 < 1,000 us".into(),
            pass: Some(hand_p50 < 1000.0),
        });

        let guard_ms = tokio::task::block_in_place(|| locks::guard_check(&socket, 100));
        rows.push(Row {
            name: "baton guard check, 100 paths",
            figure: format!("median {guard_ms:.1} ms (a whole `baton` process)"),
            target: "<= 50 ms".into(),
            pass: Some(guard_ms <= 50.0),
        });

        let empty_p50 = locks::acquire_latency(&socket, "fill/d5", probes, &mut errors).await;
        errors += locks::fill_locks(&socket, live_locks).await;
        let full_p50 = locks::acquire_latency(&socket, "fill/d5", probes, &mut errors).await;
        rows.push(Row {
            name: "acquire latency, none vs many held",
            figure: format!(
                "p50 {empty_p50:.0} us vs {full_p50:.0} us with {live_locks} ({:.2}x)",
                full_p50 / empty_p50
            ),
            target: "<= 1.5x".into(),
            pass: Some(full_p50 <= 1.5 * empty_p50),
        });
    }

    if only("agents") {
        let delivery = agents::delivery(&socket, if quick() { 100 } else { 1000 }).await;
        rows.push(Row {
            name: "message delivery to a waiting reader",
            figure: format!("p50 {delivery:.0} us"),
            target: "p50 < 1,000 us".into(),
            pass: Some(delivery < 1000.0),
        });
        let per_agent = if quick() { 200 } else { 2000 };
        let (rate, e) = agents::exchange(&socket, 16, per_agent).await;
        errors += e;
        rows.push(Row {
            name: "16 agents messaging one another",
            figure: format!("{rate:.0} messages/s"),
            target: ">= 10,000 /s".into(),
            pass: Some(rate >= 10_000.0),
        });
    }

    if only("tasks") || only("dag") {
        for (style, how) in [(Worker::Plain, "plain"), (Worker::Pipelined, "pipelined")] {
            // One run of 1,000 nodes takes a quarter of a second: the median of three.
            let mut runs = Vec::new();
            for _ in 0..3 {
                let ((rate, e), cpu) = CpuPerOp::measure(
                    daemon.id(),
                    tasks::run_nodes(&socket, 1000, 4, false, style),
                    |_| 1000.0,
                )
                .await;
                errors += e;
                runs.push((rate, cpu));
            }
            let (rate, cpu) = median_run(runs);
            rows.push(Row {
                name: if how == "plain" {
                    "1,000 independent nodes, 4 plain workers (median of 3)"
                } else {
                    "1,000 independent nodes, 4 pipelined workers (median of 3)"
                },
                figure: format!("{rate:.0} nodes/s"),
                target: ">= 5,000 /s".into(),
                pass: Some(rate >= 5_000.0),
            });
            rows.push(cpu.row(if how == "plain" {
                "CPU per node, 4 plain workers"
            } else {
                "CPU per node, 4 pipelined workers"
            }));
            let mut rates = Vec::new();
            for _ in 0..3 {
                let (rate, e) = tasks::run_nodes(&socket, 200, 1, true, style).await;
                errors += e;
                rates.push(rate);
            }
            let rate = median(rates).unwrap_or(0.0);
            rows.push(Row {
                name: if how == "plain" {
                    "200-node chain, 1 plain worker (median of 3)"
                } else {
                    "200-node chain, 1 pipelined worker (median of 3)"
                },
                figure: format!("{rate:.0} nodes/s"),
                target: ">= 1,500 /s".into(),
                pass: Some(rate >= 1_500.0),
            });
        }
    }
    if only("tasks") {
        // A pick among 10 queued nodes, then among 100,000 across priorities and labels
        // (on a daemon of its own, so the earlier groups' nodes do not count).
        let queue_dir = tempfile::tempdir().unwrap();
        let mut queue_daemon = start_daemon(queue_dir.path());
        let queue_socket = queue_dir.path().join("home/baton.sock");
        let big = if quick() { 20_000 } else { 100_000 };
        // Ten queued, all ten picked, twenty times over: a median of 200 picks, as many
        // as among the many.
        let mut small = Vec::new();
        for _ in 0..20 {
            tasks::queue_nodes(&queue_socket, 10).await;
            small.extend(tasks::labelled_pick_latency(&queue_socket, 10).await);
        }
        small.sort();
        let small_p50 = percentile(&small, 0.5);
        tasks::queue_nodes(&queue_socket, big).await;
        let big_p50 = percentile(
            &tasks::labelled_pick_latency(&queue_socket, probes / 10).await,
            0.5,
        );
        rows.push(Row {
            name: "AcquireNextNode with labels, 10 vs many queued",
            figure: format!(
                "p50 {small_p50:.0} us vs {big_p50:.0} us with {big} ({:.2}x)",
                big_p50 / small_p50
            ),
            target: "<= 1.5x".into(),
            pass: Some(big_p50 <= 1.5 * small_p50),
        });
        unsafe { libc::kill(queue_daemon.id() as i32, libc::SIGTERM) };
        let _ = queue_daemon.wait();

        let before = tasks::acquire_node_latency(&socket, probes / 10).await;
        tasks::finish_tasks(&socket, finished_tasks).await;
        let after = tasks::acquire_node_latency(&socket, probes / 10).await;
        rows.push(Row {
            name: "AcquireNextNode, before vs after finished tasks",
            figure: format!(
                "p50 {before:.0} us vs {after:.0} us with {finished_tasks} more ({:.2}x)",
                after / before
            ),
            target: "no growth".into(),
            pass: Some(after <= 1.5 * before),
        });
    }

    if only("tls") {
        tls::compare(&mut rows, &mut errors, n_seq, cas_per_conn).await;
    }
    if only("postgres") {
        postgres::compare(&mut rows, &mut errors, cas_per_conn).await;
    }
    if only("instructions") {
        instructions::count(dir.path(), &mut rows, &mut errors).await;
    }
    if only("retention") {
        retention::measure(&mut rows, &mut errors).await;
    }
    if only("hooks") {
        hooks::measure(&mut rows, if quick() { 20 } else { 200 }).await;
    }

    let (mut lines, mut w) = connect(&socket).await;
    let metrics: serde_json::Value = serde_json::from_str(
        &round_trip(&mut lines, &mut w, b"{\"id\":1,\"method\":\"Metrics\"}\n").await,
    )
    .unwrap();
    let storage = &metrics["result"]["storage"];
    // Only the groups that write on this daemon (tls and postgres start their own).
    if storage["writes"].as_u64().unwrap_or(0) > 0 {
        rows.push(Row {
            name: "group commit (whole run)",
            figure: format!(
                "{} writes in {} commits, mean batch {:.1}, max {}",
                storage["writes"],
                storage["commits"],
                storage["mean_batch"].as_f64().unwrap_or(0.0),
                storage["max_batch"]
            ),
            target: "-".into(),
            pass: None,
        });
    }
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
    (rows, errors)
}

fn main() {
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (rows, errors) = runtime.block_on(run());
    println!();
    println!(
        "{:<50} {:<48} {:<18} result",
        "benchmark", "figure", "target"
    );
    for row in &rows {
        let result = match row.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "",
        };
        println!(
            "{:<50} {:<48} {:<18} {result}",
            row.name, row.figure, row.target
        );
    }
    if errors > 0 {
        eprintln!("batond answered {errors} requests with errors");
        std::process::exit(1);
    }
}
