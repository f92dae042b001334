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

struct Row {
    name: &'static str,
    figure: String,
    target: String,
    pass: Option<bool>,
}

/// Whether the group of benchmarks named `group` runs: all of them unless
/// `BATON_BENCH_ONLY` lists some (comma-separated: state, locks, tasks, agents, tls,
/// postgres, instructions, retention; `dag` is the DAG runs of `tasks` alone).
fn only(group: &str) -> bool {
    std::env::var("BATON_BENCH_ONLY").map_or(true, |v| v.split(',').any(|g| g.trim() == group))
}

fn quick() -> bool {
    std::env::var("BATON_BENCH_QUICK").is_ok_and(|v| v == "1")
}

fn raise_open_file_limit() {
    // SAFETY: plain getrlimit/setrlimit calls on a local struct.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

fn start_daemon(dir: &Path) -> Child {
    start_daemon_with(dir, &[]).0
}

/// Starts batond with `args`; returns it and the log lines up to "listening on".
fn start_daemon_with(dir: &Path, args: &[String]) -> (Child, Vec<String>) {
    start_daemon_under(&[], dir, args)
}

/// Starts batond with `args` under `wrapper` (a program and its arguments, such as
/// valgrind's; none runs batond itself); returns it and the log lines up to "listening on".
fn start_daemon_under(wrapper: &[String], dir: &Path, args: &[String]) -> (Child, Vec<String>) {
    let batond = env!("CARGO_BIN_EXE_batond");
    let mut command = match wrapper.split_first() {
        Some((program, wrapper_args)) => {
            let mut command = Command::new(program);
            command.args(wrapper_args).arg(batond);
            command
        }
        None => Command::new(batond),
    };
    let mut child = command
        .arg("--home")
        .arg(dir.join("home"))
        .args(args)
        .env("RUST_LOG", "info")
        .env("BATON_ENV_FILE", dir.join("none.env"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start batond");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("listening on") => break,
            Some(Ok(line)) => seen.push(line),
            Some(_) => continue,
            None => panic!("batond exited before listening: {seen:?}"),
        }
    }
    // Errors the daemon logs while measured are shown: a figure beside them means little.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.contains("ERROR") {
                eprintln!("batond: {line}");
            }
        }
    });
    (child, seen)
}

/// What one durable commit costs this machine's disk, for reading the Redis ratios: the
/// median wall time and CPU time of writing 32 KiB (about one batch's WAL frames) over
/// allocated blocks of a file in `dir` and syncing it with `fdatasync`, as batond's writer
/// does at every commit. Redis with appendfsync always waits for the disk at every turn of
/// its loop; batond spends CPU on what Redis does not (SQLite, its threads).
fn disk_sync_us(dir: &Path) -> (f64, f64) {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 32 * 1024;
    const SYNCS: usize = 200;
    let path = dir.join("sync-probe");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![7u8; CHUNK];
    for _ in 0..SYNCS {
        file.write_all(&chunk).unwrap();
    }
    file.sync_all().unwrap();
    let thread_cpu_us = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime fills the local struct.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
    };
    let mut wall = Vec::with_capacity(SYNCS);
    let mut cpu = Vec::with_capacity(SYNCS);
    for i in 0..SYNCS {
        let (started, cpu_started) = (Instant::now(), thread_cpu_us());
        file.write_all_at(&chunk, (i * CHUNK) as u64).unwrap();
        file.sync_data().unwrap();
        wall.push(started.elapsed().as_secs_f64() * 1e6);
        cpu.push(thread_cpu_us() - cpu_started);
    }
    let _ = std::fs::remove_file(&path);
    (
        median(wall).unwrap_or(f64::NAN),
        median(cpu).unwrap_or(f64::NAN),
    )
}

/// The live threads of process `pid`: each one's name and its `/proc` folder.
fn threads(pid: &str) -> impl Iterator<Item = (String, std::path::PathBuf)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|task| {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            (comm.trim().to_string(), path)
        })
}

/// Nanoseconds for a cache line to go from one CPU to another and back (two threads, each
/// pinned to one of the first two CPUs this process may use, passing a counter), the
/// median of 3 probes; None on a single CPU. batond hands every request from a connection
/// thread to the writer and its answer back, so what this costs shows in its CPU per
/// operation; single-threaded Redis does not pay it. On this project's virtual machine it
/// moves between about 45 ns and 450 ns from one minute to the next.
fn cpu_hop_ns() -> Option<f64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    // SAFETY: an all-zero cpu_set_t is a valid empty set, and sched_getaffinity fills it.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return None;
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &allowed) })
        .take(2)
        .collect();
    let [first, second] = cpus[..] else {
        return None;
    };
    let pin = |cpu: usize| {
        // SAFETY: as above; the set names one CPU the process may use.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, size, &set);
        }
    };
    const HOPS: u64 = 200_000;
    let mut probes: Vec<f64> = (0..3)
        .map(|_| {
            let counter = AtomicU64::new(0);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    pin(second);
                    for i in 0..HOPS {
                        while counter.load(Ordering::Acquire) != 2 * i + 1 {
                            std::hint::spin_loop();
                        }
                        counter.store(2 * i + 2, Ordering::Release);
                    }
                });
                scope
                    .spawn(|| {
                        pin(first);
                        let started = Instant::now();
                        for i in 0..HOPS {
                            counter.store(2 * i + 1, Ordering::Release);
                            while counter.load(Ordering::Acquire) != 2 * i + 2 {
                                std::hint::spin_loop();
                            }
                        }
                        started.elapsed().as_nanos() as f64 / HOPS as f64
                    })
                    .join()
                    .unwrap()
            })
        })
        .collect();
    probes.sort_by(f64::total_cmp);
    Some(probes[1])
}

/// The row of [`cpu_hop_ns`], measured now; `when` says after which load.
fn cpu_hop_row(when: &'static str) -> Row {
    let hop = tokio::task::block_in_place(cpu_hop_ns);
    Row {
        name: when,
        figure: hop.map_or("one CPU: not measured".into(), |ns| format!("{ns:.0} ns")),
        target: "-".into(),
        pass: None,
    }
}

/// CPU time (user and system) process `pid` has used, in microseconds, and its thread
/// named `thread` (from the scheduler's per-thread account, which is exact where the
/// clock-tick counters of `/proc/PID/stat` are coarse; those count exited threads too).
fn cpu_us(pid: &str, thread: &str) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    // SAFETY: sysconf with a valid name.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // utime and stime are the 14th and 15th fields, 12th and 13th after the name.
    let all = (ticks(11) + ticks(12)) / hz * 1e6;
    let mut named = 0.0;
    for (comm, path) in threads(pid) {
        if comm == thread {
            named += std::fs::read_to_string(path.join("schedstat"))
                .ok()
                .and_then(|s| {
                    s.split_whitespace()
                        .next()
                        .and_then(|n| n.parse::<f64>().ok())
                })
                .unwrap_or(0.0)
                / 1e3;
        }
    }
    (all, named)
}

/// Times the threads of process `pid` went to sleep and were woken (their voluntary
/// context switches: waiting for a socket, a channel, a lock or the disk), all of them and
/// those of the thread named `thread`. Exited threads are not counted; batond's live as
/// long as it does.
fn wakeups(pid: &str, thread: &str) -> (f64, f64) {
    let (mut all, mut named) = (0.0, 0.0);
    for (comm, path) in threads(pid) {
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let count = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        all += count;
        if comm == thread {
            named += count;
        }
    }
    (all, named)
}

/// CPU spent per operation by batond (all threads, and its writer thread) and by this
/// client while `load` ran `ops` operations, and how often batond's threads slept and were
/// woken per operation: where a load's time goes.
pub struct CpuPerOp {
    daemon: f64,
    writer: f64,
    client: f64,
    daemon_wakeups: f64,
    writer_wakeups: f64,
}

impl CpuPerOp {
    pub async fn measure<F: std::future::Future<Output = T>, T>(
        daemon_pid: u32,
        load: F,
        ops: impl FnOnce(&T) -> f64,
    ) -> (T, CpuPerOp) {
        let pid = daemon_pid.to_string();
        let (d0, w0) = cpu_us(&pid, "baton-writer");
        let (c0, _) = cpu_us("self", "");
        let (dw0, ww0) = wakeups(&pid, "baton-writer");
        let out = load.await;
        let (d1, w1) = cpu_us(&pid, "baton-writer");
        let (c1, _) = cpu_us("self", "");
        let (dw1, ww1) = wakeups(&pid, "baton-writer");
        let n = ops(&out).max(1.0);
        let per_op = CpuPerOp {
            daemon: (d1 - d0) / n,
            writer: (w1 - w0) / n,
            client: (c1 - c0) / n,
            daemon_wakeups: (dw1 - dw0) / n,
            writer_wakeups: (ww1 - ww0) / n,
        };
        (out, per_op)
    }

    fn row(&self, name: &'static str) -> Row {
        Row {
            name,
            figure: format!(
                "batond {:.1} us (writer {:.1} us), client {:.1} us; batond woken {:.2} (writer {:.2})",
                self.daemon, self.writer, self.client, self.daemon_wakeups, self.writer_wakeups
            ),
            target: "-".into(),
            pass: None,
        }
    }
}

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

async fn connect(path: &Path) -> (Lines, OwnedWriteHalf) {
    let (r, w) = UnixStream::connect(path)
        .await
        .expect("connect")
        .into_split();
    (TokioBufReader::new(r).lines(), w)
}

async fn round_trip(lines: &mut Lines, w: &mut OwnedWriteHalf, line: &[u8]) -> String {
    w.write_all(line).await.unwrap();
    lines.next_line().await.unwrap().expect("an answer")
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6
}

/// Median and p99 round trip, in microseconds, of `n` sequential requests of `line`, from a
/// blocking client on its own thread (so the client adds as little as possible).
fn sequential(path: &Path, line: &'static [u8], n: usize, errors: &mut u64) -> (f64, f64) {
    use std::io::Write;
    let stream = std::os::unix::net::UnixStream::connect(path).expect("connect");
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        answer.clear();
        let start = Instant::now();
        writer.write_all(line).unwrap();
        reader.read_line(&mut answer).unwrap();
        if i >= n / 10 {
            samples.push(start.elapsed());
        }
        if answer.contains("\"error\"") {
            *errors += 1;
        }
    }
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

async fn echo_server(path: PathBuf) {
    let listener = UnixListener::bind(&path).unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut lines = TokioBufReader::new(r).lines();
            while let Ok(Some(mut line)) = lines.next_line().await {
                line.push('\n');
                if w.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
            }
        });
    }
}

/// Sets per second from `conns` connections each doing compare-and-set on its own key.
/// The text of a result's member `name` (e.g. `"version":`), read the way a lean client
/// reads an answer it knows the shape of (the Redis side parses no more than this).
fn field<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    if !answer.contains("\"result\"") {
        return None;
    }
    let rest = &answer[answer.find(name)? + name.len()..];
    let rest = rest.strip_prefix('"').unwrap_or(rest);
    let end = rest.find([',', '}', '"'])?;
    Some(&rest[..end])
}

/// Runs `client(c)` for each of `conns` clients at once, each doing `per_client`
/// operations and returning how many failed; the operations per second and the failures.
pub async fn clients<F, Fut>(conns: usize, per_client: usize, client: F) -> (f64, u64)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = u64> + Send + 'static,
{
    let start = Instant::now();
    let tasks: Vec<_> = (0..conns).map(|c| tokio::spawn(client(c))).collect();
    let mut errors = 0;
    for t in tasks {
        errors += t.await.unwrap();
    }
    let rate = (conns * per_client) as f64 / start.elapsed().as_secs_f64();
    (rate, errors)
}

/// Durable compare-and-set Sets per second from `conns` connections, each on its own key,
/// connection `c` on daemon `c % sockets.len()` (several daemons share one PostgreSQL).
async fn concurrent_cas_sets(sockets: &[PathBuf], conns: usize, per_conn: usize) -> (f64, u64) {
    // Each run its own keys, each starting from version 0.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    clients(conns, per_conn, |c| {
        let path = sockets[c % sockets.len()].clone();
        async move {
            let (mut lines, mut w) = connect(&path).await;
            let mut version = 0u64;
            let mut errors = 0;
            for i in 0..per_conn {
                let line = format!(
                    "{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"bench\",\"key\":\"cas-{run}-{c}\",\"value\":{i},\"expected_version\":{version}}}}}\n"
                );
                let answer = round_trip(&mut lines, &mut w, line.as_bytes()).await;
                match field(&answer, "\"version\":").and_then(|v| v.parse().ok()) {
                    Some(v) => version = v,
                    None => {
                        errors += 1;
                        eprintln!("unexpected answer: {answer}");
                    }
                }
            }
            errors
        }
    })
    .await
}

/// Best and median rate of `rounds` bursts of `n` pipelined Sets on one connection.
async fn pipelined_sets(path: &Path, n: usize, rounds: usize) -> (f64, f64, u64) {
    let (mut lines, mut w) = connect(path).await;
    let mut rates = Vec::new();
    let mut errors = 0;
    for round in 0..rounds {
        let mut burst = Vec::with_capacity(n * 100);
        for i in 0..n {
            burst.extend_from_slice(
                format!("{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"pipe\",\"key\":\"k{round}-{i}\",\"value\":{i}}}}}\n").as_bytes(),
            );
        }
        let start = Instant::now();
        w.write_all(&burst).await.unwrap();
        for _ in 0..n {
            if lines
                .next_line()
                .await
                .unwrap()
                .expect("an answer")
                .contains("\"error\"")
            {
                errors += 1;
            }
        }
        rates.push(n as f64 / start.elapsed().as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    (rates[rates.len() - 1], rates[rates.len() / 2], errors)
}

/// Sets per second on one connection keeping `window` requests in flight.
async fn windowed_sets(path: &Path, window: usize, total: usize) -> (f64, u64) {
    let (mut lines, mut w) = connect(path).await;
    let (mut sent, mut answered, mut errors) = (0, 0, 0);
    let start = Instant::now();
    while answered < total {
        let mut out = Vec::new();
        while sent < total && sent - answered < window {
            out.extend_from_slice(
                format!("{{\"id\":{sent},\"method\":\"Set\",\"params\":{{\"namespace\":\"window\",\"key\":\"k{sent}\",\"value\":{sent}}}}}\n").as_bytes(),
            );
            sent += 1;
        }
        if !out.is_empty() {
            w.write_all(&out).await.unwrap();
        }
        let answer = lines.next_line().await.unwrap().expect("an answer");
        if answer.contains("\"error\"") {
            errors += 1;
        }
        answered += 1;
    }
    (total as f64 / start.elapsed().as_secs_f64(), errors)
}

/// Rows comparing a Baton figure with the same load on Redis (durable, and keeping
/// nothing for reference): the Redis figures and the ratio against the durable one.
/// Runs of Baton and of durable Redis, taken in turns, for each ratio against Redis.
const ALTERNATE_RUNS: usize = 3;

/// Baton's and durable Redis's rates of one load, taken in turns [`ALTERNATE_RUNS`] times
/// each: Baton's median run (rate, CPU per operation) and Redis's median rate (None
/// without Redis). `baton` and `redis` run the load once and return (rate, errors).
async fn in_turns<B, R>(
    daemon_pid: u32,
    ops: f64,
    mut baton: impl FnMut() -> B,
    mut redis: Option<impl FnMut() -> R>,
    errors: &mut u64,
) -> ((f64, CpuPerOp), Option<f64>)
where
    B: std::future::Future<Output = (f64, u64)>,
    R: std::future::Future<Output = (f64, u64)>,
{
    let mut runs = Vec::new();
    let mut on_redis = Vec::new();
    for _ in 0..ALTERNATE_RUNS {
        let ((rate, e), cpu) = CpuPerOp::measure(daemon_pid, baton(), |_| ops).await;
        *errors += e;
        runs.push((rate, cpu));
        if let Some(redis) = redis.as_mut() {
            let (rate, e) = redis().await;
            *errors += e;
            on_redis.push(rate);
        }
    }
    (median_run(runs), median(on_redis))
}

/// The median of `runs` by rate, with what was measured alongside it.
fn median_run<T>(mut runs: Vec<(f64, T)>) -> (f64, T) {
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs.swap_remove(runs.len() / 2)
}

/// The median of `rates`; None when there are none (Redis is not installed).
fn median(mut rates: Vec<f64>) -> Option<f64> {
    rates.sort_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied()
}

fn versus_redis(
    rows: &mut Vec<Row>,
    names: [&'static str; 3],
    baton: f64,
    durable: Option<f64>,
    volatile: Option<f64>,
    at_least: f64,
) {
    let (Some(durable), Some(volatile)) = (durable, volatile) else {
        rows.push(Row {
            name: names[2],
            figure: "redis-server is not installed: not compared".into(),
            target: format!(">= {at_least:.1}x"),
            pass: None,
        });
        return;
    };
    rows.push(Row {
        name: names[0],
        figure: format!("{durable:.0} /s"),
        target: "-".into(),
        pass: None,
    });
    rows.push(Row {
        name: names[1],
        figure: format!("{volatile:.0} /s"),
        target: "-".into(),
        pass: None,
    });
    let ratio = baton / durable;
    rows.push(Row {
        name: names[2],
        figure: format!("{ratio:.2}x ({baton:.0} vs {durable:.0} /s)"),
        target: format!(">= {at_least:.1}x"),
        pass: Some(ratio >= at_least),
    });
}

async fn call(
    lines: &mut Lines,
    w: &mut OwnedWriteHalf,
    request: serde_json::Value,
) -> serde_json::Value {
    let mut line = request.to_string();
    line.push('\n');
    serde_json::from_str(&round_trip(lines, w, line.as_bytes()).await).unwrap()
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
