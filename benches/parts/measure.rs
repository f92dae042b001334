//! What a load costs: CPU per operation (all threads, the writer's), wake-ups, memory,
//! the cost of a hop between CPUs, and runs taken in turns with Redis.

use super::*;

/// The live threads of process `pid`: each one's name and its `/proc` folder.
pub fn threads(pid: &str) -> impl Iterator<Item = (String, std::path::PathBuf)> {
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
pub fn cpu_hop_ns() -> Option<f64> {
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
pub fn cpu_hop_row(when: &'static str) -> Row {
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
pub fn cpu_us(pid: &str, thread: &str) -> (f64, f64) {
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
pub fn wakeups(pid: &str, thread: &str) -> (f64, f64) {
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

    /// batond's CPU per operation (all threads), in microseconds.
    pub fn daemon_us(&self) -> f64 {
        self.daemon
    }

    pub fn row(&self, name: &'static str) -> Row {
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

pub fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// Rows comparing a Baton figure with the same load on Redis (durable, and keeping
/// nothing for reference): the Redis figures and the ratio against the durable one.
/// Runs of Baton and of durable Redis, taken in turns, for each ratio against Redis.
pub const ALTERNATE_RUNS: usize = 3;

/// Baton's and durable Redis's rates of one load, taken in turns [`ALTERNATE_RUNS`] times
/// each: Baton's median run (rate, CPU per operation) and Redis's median rate (None
/// without Redis). `baton` and `redis` run the load once and return (rate, errors).
pub async fn in_turns<B, R>(
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

/// Two loads on one daemon, taken in turns [`ALTERNATE_RUNS`] times each, so that the
/// machine's drift weighs on both alike: each one's median run (rate, CPU per operation).
pub async fn alternated<A, B>(
    daemon_pid: u32,
    ops: f64,
    mut first: impl FnMut() -> A,
    mut second: impl FnMut() -> B,
    errors: &mut u64,
) -> ((f64, CpuPerOp), (f64, CpuPerOp))
where
    A: std::future::Future<Output = (f64, u64)>,
    B: std::future::Future<Output = (f64, u64)>,
{
    let (mut firsts, mut seconds) = (Vec::new(), Vec::new());
    for _ in 0..ALTERNATE_RUNS {
        let ((rate, e), cpu) = CpuPerOp::measure(daemon_pid, first(), |_| ops).await;
        *errors += e;
        firsts.push((rate, cpu));
        let ((rate, e), cpu) = CpuPerOp::measure(daemon_pid, second(), |_| ops).await;
        *errors += e;
        seconds.push((rate, cpu));
    }
    (median_run(firsts), median_run(seconds))
}

/// The median of `runs` by rate, with what was measured alongside it.
pub fn median_run<T>(mut runs: Vec<(f64, T)>) -> (f64, T) {
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    runs.swap_remove(runs.len() / 2)
}

/// The median of `rates`; None when there are none (Redis is not installed).
pub fn median(mut rates: Vec<f64>) -> Option<f64> {
    rates.sort_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied()
}

pub fn versus_redis(
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
