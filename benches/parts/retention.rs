//! Bounded at any size (`BATON_BENCH_ONLY=retention`): how long other writes wait behind a
//! ClearNamespace and a CompactJournal that run in steps, the database's size after many
//! overwrites with and without retention, and durable CAS with few keys and with many.
//!
//! Sizes (smaller with `BATON_BENCH_QUICK=1`), each overridable:
//! `BATON_BENCH_CLEAR_KEYS` (keys cleared, default 100,000), `BATON_BENCH_OVERWRITES`
//! (overwrites of 10 keys, default 200,000), `BATON_BENCH_CAS_KEYS` (keys in the large
//! store, default 1,000,000).

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use super::{connect, field, percentile, quick, round_trip, start_daemon_with, Row};

fn size(name: &str, full: usize, quick_size: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick() { quick_size } else { full })
}

/// Sets `keys` keys (`key(i)`) of `ns` with `value`, pipelined in bursts; the errors.
async fn load(
    path: &Path,
    ns: &str,
    count: usize,
    key: impl Fn(usize) -> String,
    value: &str,
) -> u64 {
    let (mut lines, mut w) = connect(path).await;
    let mut errors = 0;
    let mut i = 0;
    while i < count {
        let n = (count - i).min(2000);
        let mut burst = Vec::with_capacity(n * 100);
        for j in i..i + n {
            burst.extend_from_slice(
                format!(
                    "{{\"id\":{j},\"method\":\"Set\",\"params\":{{\"namespace\":\"{ns}\",\"key\":\"{}\",\"value\":{value}}}}}\n",
                    key(j)
                )
                .as_bytes(),
            );
        }
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
        i += n;
    }
    errors
}

async fn metrics(path: &Path) -> serde_json::Value {
    let (mut lines, mut w) = connect(path).await;
    let answer = round_trip(&mut lines, &mut w, b"{\"id\":1,\"method\":\"Metrics\"}\n").await;
    serde_json::from_str::<serde_json::Value>(&answer).unwrap()["result"].clone()
}

/// The database's size once background retention has settled (unchanged for a second).
async fn settled_db_bytes(path: &Path) -> u64 {
    let mut last = 0;
    let mut same = 0;
    loop {
        let now = metrics(path).await["storage"]["db_bytes"]
            .as_u64()
            .unwrap_or(0);
        same = if now == last { same + 1 } else { 0 };
        last = now;
        if same >= 5 {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// While `request` runs on one connection, another does sequential durable Sets: how
/// long the request took, and the probe's Sets in that time (count, p50, p99, max in us).
async fn stall_behind(
    path: &Path,
    request: String,
    errors: &mut u64,
) -> (f64, usize, f64, f64, f64) {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let probe = {
        let (done, path) = (done.clone(), path.to_path_buf());
        tokio::spawn(async move {
            let (mut lines, mut w) = connect(&path).await;
            let mut samples = Vec::new();
            let mut i = 0u64;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let line = format!(
                    "{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"probe\",\"key\":\"p\",\"value\":{i}}}}}\n"
                );
                let start = Instant::now();
                let answer = round_trip(&mut lines, &mut w, line.as_bytes()).await;
                samples.push(start.elapsed());
                assert!(answer.contains("\"result\""), "{answer}");
                i += 1;
            }
            samples
        })
    };
    // The probe is running before the request goes.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (mut lines, mut w) = connect(path).await;
    let start = Instant::now();
    let answer = round_trip(&mut lines, &mut w, request.as_bytes()).await;
    let took = start.elapsed();
    done.store(true, std::sync::atomic::Ordering::Release);
    if !answer.contains("\"result\"") {
        eprintln!("unexpected answer: {answer}");
        *errors += 1;
    }
    let mut samples = probe.await.unwrap();
    samples.sort();
    let max = samples.last().map_or(0.0, |d| d.as_secs_f64() * 1e6);
    (
        took.as_secs_f64() * 1e3,
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        max,
    )
}

/// CAS Sets per second from `conns` connections, each on keys of its own among `keys`
/// (preloaded at version 1), in a scattered order.
async fn cas_among(path: &Path, keys: usize, conns: usize, per_conn: usize) -> (f64, u64) {
    super::clients(conns, per_conn, |c| {
        let path = path.to_path_buf();
        async move {
            let (mut lines, mut w) = connect(&path).await;
            let mine: Vec<usize> = (c..keys).step_by(conns).collect();
            let mut versions = std::collections::HashMap::new();
            let mut errors = 0;
            let mut at = (c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            for i in 0..per_conn {
                at = at.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let key = mine[(at >> 33) as usize % mine.len()];
                let version = versions.entry(key).or_insert(1u64);
                let line = format!(
                    "{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"cas\",\"key\":\"k{key}\",\"value\":{i},\"expected_version\":{version}}}}}\n"
                );
                let answer = round_trip(&mut lines, &mut w, line.as_bytes()).await;
                match field(&answer, "\"version\":").and_then(|v| v.parse().ok()) {
                    Some(v) => *version = v,
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

fn stop(mut daemon: std::process::Child) {
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let _ = daemon.wait();
}

pub async fn measure(rows: &mut Vec<Row>, errors: &mut u64) {
    let clear_keys = size("BATON_BENCH_CLEAR_KEYS", 100_000, 20_000);
    let overwrites = size("BATON_BENCH_OVERWRITES", 200_000, 20_000);
    let cas_keys = size("BATON_BENCH_CAS_KEYS", 1_000_000, 100_000);
    let cas_per_conn = if quick() { 300 } else { 1_500 };

    // Writes behind a clear and a compaction.
    let dir = tempfile::tempdir().unwrap();
    let (daemon, _) = start_daemon_with(dir.path(), &[]);
    let socket = dir.path().join("home/baton.sock");
    *errors += load(&socket, "clear", clear_keys, |i| format!("k{i:08}"), "1").await;
    let (took, n, p50, p99, max) = stall_behind(
        &socket,
        "{\"id\":1,\"method\":\"ClearNamespace\",\"params\":{\"namespace\":\"clear\"}}\n".into(),
        errors,
    )
    .await;
    rows.push(Row {
        name: "write stall behind ClearNamespace",
        figure: format!(
            "{clear_keys} keys in {took:.0} ms; {n} Sets meanwhile: p50 {p50:.0} us, p99 {p99:.0} us, max {max:.0} us"
        ),
        target: "max <= 10 ms".into(),
        pass: Some(max <= 10_000.0),
    });
    let head = metrics(&socket).await["journal"]["head_seq"]
        .as_u64()
        .unwrap_or(0);
    let (took, n, p50, p99, max) = stall_behind(
        &socket,
        format!(
            "{{\"id\":1,\"method\":\"CompactJournal\",\"params\":{{\"before_seq\":{head}}}}}\n"
        ),
        errors,
    )
    .await;
    rows.push(Row {
        name: "write stall behind CompactJournal",
        figure: format!(
            "{head} events in {took:.0} ms; {n} Sets meanwhile: p50 {p50:.0} us, p99 {p99:.0} us, max {max:.0} us"
        ),
        target: "max <= 10 ms".into(),
        pass: Some(max <= 10_000.0),
    });
    stop(daemon);

    // The file after many overwrites of 10 keys, keeping every version and the default 100.
    let mut sizes = Vec::new();
    for keep in ["all", "100"] {
        let dir = tempfile::tempdir().unwrap();
        let (daemon, _) = start_daemon_with(dir.path(), &["--history-keep".into(), keep.into()]);
        let socket = dir.path().join("home/baton.sock");
        let value = format!("\"{}\"", "v".repeat(100));
        *errors += load(
            &socket,
            "over",
            overwrites,
            |i| format!("k{}", i % 10),
            &value,
        )
        .await;
        let written = settled_db_bytes(&socket).await;
        let head = metrics(&socket).await["journal"]["head_seq"]
            .as_u64()
            .unwrap_or(0);
        let (mut lines, mut w) = connect(&socket).await;
        let compact = format!(
            "{{\"id\":1,\"method\":\"CompactJournal\",\"params\":{{\"before_seq\":{}}}}}\n",
            head + 1
        );
        if !round_trip(&mut lines, &mut w, compact.as_bytes())
            .await
            .contains("\"result\"")
        {
            *errors += 1;
        }
        let compacted = settled_db_bytes(&socket).await;
        sizes.push((keep, written, compacted));
        stop(daemon);
    }
    let mb = |b: u64| b as f64 / 1e6;
    for (keep, written, compacted) in &sizes {
        rows.push(Row {
            name: if *keep == "all" {
                "db size, overwrites of 10 keys, keep all"
            } else {
                "db size, overwrites of 10 keys, keep 100"
            },
            figure: format!(
                "{overwrites}: {:.1} MB, {:.2} MB after CompactJournal",
                mb(*written),
                mb(*compacted)
            ),
            target: if *keep == "all" {
                "-".into()
            } else {
                "<= 1 MB compacted".into()
            },
            pass: (*keep != "all").then_some(*compacted <= 1_000_000),
        });
    }

    // Durable CAS among few keys and among many.
    let mut rates = Vec::new();
    for keys in [1_000, cas_keys] {
        let dir = tempfile::tempdir().unwrap();
        let (daemon, _) = start_daemon_with(dir.path(), &[]);
        let socket = dir.path().join("home/baton.sock");
        let loaded = Instant::now();
        *errors += load(&socket, "cas", keys, |i| format!("k{i}"), "0").await;
        let load_s = loaded.elapsed().as_secs_f64();
        let db = metrics(&socket).await["storage"]["db_bytes"]
            .as_u64()
            .unwrap_or(0);
        let (rate, e) = cas_among(&socket, keys, 8, cas_per_conn).await;
        *errors += e;
        rates.push((keys, rate, db, load_s));
        stop(daemon);
    }
    let (few, many) = (rates[0], rates[1]);
    rows.push(Row {
        name: "CAS Sets/s, 8 conns, 1k keys vs many",
        figure: format!(
            "{:.0} vs {:.0} with {} keys ({:.0} MB, loaded in {:.0} s): {:.2}x",
            few.1,
            many.1,
            many.0,
            mb(many.2),
            many.3,
            many.1 / few.1
        ),
        target: ">= 0.9x".into(),
        pass: Some(many.1 >= 0.9 * few.1),
    });
}
