//! Lock benchmarks: acquire+release cycles, acquire latency as locks pile up, the hand-off
//! from a release to a queued waiter, and a guard check as a whole `baton` process.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tokio::io::AsyncWriteExt;

use super::{call, clients, connect, field, percentile, round_trip};

pub fn acquire_request(key: &str, owner: &str) -> serde_json::Value {
    serde_json::json!({"id": 1, "method": "AcquireResourceLock",
        "params": {"resource_key": key, "owner": owner, "ttl_secs": 600}})
}

pub fn release_request(lease: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({"id": 2, "method": "ReleaseResourceLock",
        "params": {"resource_key": lease["resource_key"], "lease_id": lease["lease_id"]}})
}

/// Durable acquire+release cycles per second from `conns` connections on distinct keys,
/// connection `c` on daemon `c % sockets.len()`.
pub async fn lock_cycles(sockets: &[PathBuf], conns: usize, per_conn: usize) -> (f64, u64) {
    clients(conns, per_conn, |c| {
        let path = sockets[c % sockets.len()].clone();
        async move {
            let (mut lines, mut w) = connect(&path).await;
            let mut errors = 0;
            for i in 0..per_conn {
                let key = format!("file:cycle/c{c}/k{i}.rs");
                let acquire = format!("{{\"id\":1,\"method\":\"AcquireResourceLock\",\"params\":{{\"resource_key\":\"{key}\",\"owner\":\"bench\",\"ttl_secs\":600}}}}\n");
                let lease = round_trip(&mut lines, &mut w, acquire.as_bytes()).await;
                let Some(lease_id) = field(&lease, "\"lease_id\":") else {
                    errors += 1;
                    eprintln!("unexpected answer: {lease}");
                    continue;
                };
                let release = format!("{{\"id\":2,\"method\":\"ReleaseResourceLock\",\"params\":{{\"resource_key\":\"{key}\",\"lease_id\":\"{lease_id}\"}}}}\n");
                let released = round_trip(&mut lines, &mut w, release.as_bytes()).await;
                if !released.contains("\"result\"") {
                    errors += 1;
                    eprintln!("unexpected answer: {released}");
                }
            }
            errors
        }
    })
    .await
}

/// Median wall time in milliseconds of `baton guard check` over `n` paths, one of them
/// held by someone else (as a pre-commit hook runs it).
pub fn guard_check(socket: &Path, n: usize) -> f64 {
    let paths: Vec<String> = (0..n)
        .map(|i| format!("guarded/dir{}/f{i}.rs", i % 7))
        .collect();
    let held = format!(
        "{{\"id\":1,\"method\":\"AcquireResourceLock\",\"params\":{{\"resource_key\":\"file:{}\",\"owner\":\"other\",\"ttl_secs\":600}}}}\n",
        paths[n / 2]
    );
    let mut probe = std::os::unix::net::UnixStream::connect(socket).unwrap();
    std::io::Write::write_all(&mut probe, held.as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(&probe).read_line(&mut answer).unwrap();
    let mut samples = Vec::new();
    for _ in 0..11 {
        let start = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["guard", "check", "--owner", "me"])
            .args(&paths)
            .env("BATON_SOCKET_PATH", socket)
            .env_remove("BATON_URL")
            .output()
            .expect("run baton");
        samples.push(start.elapsed());
        assert_eq!(out.status.code(), Some(5), "one path is held by another");
    }
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

/// Median acquire round trip in microseconds on one connection (each lease released
/// after it is timed), with keys under `dir`.
pub async fn acquire_latency(path: &Path, dir: &str, n: usize, errors: &mut u64) -> f64 {
    let (mut lines, mut w) = connect(path).await;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let key = format!("file:{dir}/probe-{i}.rs");
        let start = Instant::now();
        let lease = call(&mut lines, &mut w, acquire_request(&key, "probe")).await;
        samples.push(start.elapsed());
        if lease["result"]["status"] != "acquired" {
            *errors += 1;
            eprintln!("unexpected answer: {lease}");
            continue;
        }
        call(&mut lines, &mut w, release_request(&lease["result"])).await;
    }
    samples.sort();
    percentile(&samples, 0.5)
}

/// Takes `n` locks in pipelined bursts, spread over directories 100 files each.
pub async fn fill_locks(path: &Path, n: usize) -> u64 {
    let (mut lines, mut w) = connect(path).await;
    let mut errors = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut burst = Vec::new();
        for i in chunk {
            let mut line =
                acquire_request(&format!("file:fill/d{}/f{i}.rs", i / 100), "filler").to_string();
            line.push('\n');
            burst.extend_from_slice(line.as_bytes());
        }
        w.write_all(&burst).await.unwrap();
        for _ in chunk {
            if !lines
                .next_line()
                .await
                .unwrap()
                .expect("an answer")
                .contains("\"acquired\"")
            {
                errors += 1;
            }
        }
    }
    errors
}

/// Median and p99 time, in microseconds, from sending a release to the queued waiter
/// reading its grant. The first holder is on `holder_path`, the first waiter on
/// `waiter_path` (two daemons sharing a database: each round hands the lock across).
pub async fn hand_off(
    holder_path: &Path,
    waiter_path: &Path,
    rounds: usize,
    errors: &mut u64,
) -> (f64, f64) {
    let (mut holder_lines, mut holder) = connect(holder_path).await;
    let (mut waiter_lines, mut waiter) = connect(waiter_path).await;
    // Watches the waiting count on each side.
    let (mut obs_lines, mut obs) = connect(waiter_path).await;
    let (mut other_obs_lines, mut other_obs) = connect(holder_path).await;
    let mut samples = Vec::with_capacity(rounds);
    let mut lease = call(
        &mut holder_lines,
        &mut holder,
        acquire_request("tool:baton", "h0"),
    )
    .await["result"]
        .clone();
    for round in 0..rounds {
        let mut wait = acquire_request("tool:baton", &format!("w{round}"));
        wait["params"]["wait_ms"] = serde_json::json!(60_000);
        let mut line = wait.to_string();
        line.push('\n');
        waiter.write_all(line.as_bytes()).await.unwrap();
        // Until the daemon has queued the waiter.
        loop {
            let m = call(
                &mut obs_lines,
                &mut obs,
                serde_json::json!({"id": 3, "method": "Metrics"}),
            )
            .await;
            if m["result"]["locks"]["waiting"] == 1 {
                break;
            }
        }
        let mut line = release_request(&lease).to_string();
        line.push('\n');
        let start = Instant::now();
        holder.write_all(line.as_bytes()).await.unwrap();
        let granted: serde_json::Value =
            serde_json::from_str(&waiter_lines.next_line().await.unwrap().expect("an answer"))
                .unwrap();
        samples.push(start.elapsed());
        let released = holder_lines.next_line().await.unwrap().expect("an answer");
        if granted["result"]["status"] != "acquired" || released.contains("\"error\"") {
            *errors += 1;
            eprintln!("unexpected answers: {granted} / {released}");
            break;
        }
        lease = granted["result"].clone();
        // The waiter becomes the holder for the next round.
        std::mem::swap(&mut holder, &mut waiter);
        std::mem::swap(&mut holder_lines, &mut waiter_lines);
        std::mem::swap(&mut obs, &mut other_obs);
        std::mem::swap(&mut obs_lines, &mut other_obs_lines);
    }
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}
