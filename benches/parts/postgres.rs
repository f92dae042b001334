//! Two batond on one PostgreSQL database (a fresh one on `BATON_BENCH_POSTGRES_URL`'s
//! server, else the local service), and the same loads on one SQLite daemon in the same
//! run: durable CAS from 64 connections spread over both, lock cycles from 16, a lock
//! handed across instances, and a write on one instance reaching a subscriber on the other.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Instant;

use tokio::io::AsyncWriteExt;

use super::{connect, percentile, round_trip, start_daemon_with, Row};

fn server_url() -> String {
    std::env::var("BATON_BENCH_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Runs `sql` on the server's own database; false (said on stderr) if it cannot.
async fn admin(sql: &str) -> bool {
    match tokio_postgres::connect(&server_url(), tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            match client.batch_execute(sql).await {
                Ok(()) => true,
                Err(e) => {
                    eprintln!("postgres bench: {sql}: {e}");
                    false
                }
            }
        }
        Err(e) => {
            eprintln!(
                "postgres bench: no PostgreSQL at {} ({e}); set BATON_BENCH_POSTGRES_URL",
                server_url()
            );
            false
        }
    }
}

/// Median microseconds from sending a Set to `writer_path` until a subscriber on
/// `reader_path` reads its event.
async fn delivery(writer_path: &Path, reader_path: &Path, rounds: usize, errors: &mut u64) -> f64 {
    let (mut sub_lines, mut sub) = connect(reader_path).await;
    let subscribe = b"{\"id\":1,\"method\":\"Subscribe\",\"params\":{\"filter\":{\"namespace\":\"delivery\"}}}\n";
    let answer = round_trip(&mut sub_lines, &mut sub, subscribe).await;
    if !answer.contains("\"result\"") {
        *errors += 1;
        eprintln!("unexpected answer: {answer}");
        return f64::NAN;
    }
    let (mut lines, mut w) = connect(writer_path).await;
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let set = format!(
            "{{\"id\":{i},\"method\":\"Set\",\"params\":{{\"namespace\":\"delivery\",\"key\":\"k\",\"value\":{i}}}}}\n"
        );
        let start = Instant::now();
        w.write_all(set.as_bytes()).await.unwrap();
        let event = sub_lines.next_line().await.unwrap().expect("an event");
        samples.push(start.elapsed());
        let answer = lines.next_line().await.unwrap().expect("an answer");
        if !event.contains("\"Event\"") || !answer.contains("\"result\"") {
            *errors += 1;
            eprintln!("unexpected answers: {event} / {answer}");
        }
    }
    samples.sort();
    percentile(&samples, 0.5)
}

struct Daemons {
    children: Vec<Child>,
    sockets: Vec<PathBuf>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for child in &mut self.children {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

fn start(n: usize, database_url: Option<&str>) -> Daemons {
    let mut daemons = Daemons {
        children: Vec::new(),
        sockets: Vec::new(),
        _dirs: Vec::new(),
    };
    for _ in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let args: Vec<String> = match database_url {
            Some(url) => vec!["--database-url".into(), url.into()],
            None => Vec::new(),
        };
        let (child, _) = start_daemon_with(dir.path(), &args);
        daemons.children.push(child);
        daemons.sockets.push(dir.path().join("home/baton.sock"));
        daemons._dirs.push(dir);
    }
    daemons
}

fn row(rows: &mut Vec<Row>, name: &'static str, figure: String, target: &str, pass: Option<bool>) {
    rows.push(Row {
        name,
        figure,
        target: target.into(),
        pass,
    });
}

/// Adds the PostgreSQL rows (nothing but a note when no PostgreSQL answers).
pub async fn compare(rows: &mut Vec<Row>, errors: &mut u64, cas_per_conn: usize) {
    let name = format!("baton_bench_{}", uuid::Uuid::new_v4().simple());
    if !admin(&format!("CREATE DATABASE {name}")).await {
        row(
            rows,
            "PostgreSQL backend",
            "not measured: no PostgreSQL".into(),
            "-",
            None,
        );
        return;
    }
    let url = match server_url().rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => format!("{}/{name}", server_url()),
    };
    let rounds = if super::quick() { 100 } else { 500 };
    let cycles = if super::quick() { 50 } else { 200 };
    {
        let pg = start(2, Some(&url));
        let sqlite = start(1, None);
        let (pg_cas, e1) = super::concurrent_cas_sets(&pg.sockets, 64, cas_per_conn / 4).await;
        let (lite_cas, e2) =
            super::concurrent_cas_sets(&sqlite.sockets, 64, cas_per_conn / 4).await;
        row(
            rows,
            "PostgreSQL: durable CAS, 64 conns over 2 instances",
            format!("{pg_cas:.0} /s (SQLite, one daemon: {lite_cas:.0} /s)"),
            ">= 5000 /s",
            Some(pg_cas >= 5000.0),
        );
        let (pg_cycles, e3) = super::locks::lock_cycles(&pg.sockets, 16, cycles).await;
        let (lite_cycles, e4) = super::locks::lock_cycles(&sqlite.sockets, 16, cycles).await;
        row(
            rows,
            "PostgreSQL: lock cycles, 16 conns over 2 instances",
            format!("{pg_cycles:.0} /s (SQLite: {lite_cycles:.0} /s)"),
            ">= 2000 /s",
            Some(pg_cycles >= 2000.0),
        );
        *errors += e1 + e2 + e3 + e4;
        let (pg_hand, _) =
            super::locks::hand_off(&pg.sockets[0], &pg.sockets[1], rounds, errors).await;
        let (lite_hand, _) =
            super::locks::hand_off(&sqlite.sockets[0], &sqlite.sockets[0], rounds, errors).await;
        row(
            rows,
            "PostgreSQL: lock hand-off across instances",
            format!(
                "p50 {:.2} ms (SQLite, one daemon: {:.2} ms)",
                pg_hand / 1e3,
                lite_hand / 1e3
            ),
            "< 5 ms",
            Some(pg_hand < 5000.0),
        );
        let pg_delivery = delivery(&pg.sockets[0], &pg.sockets[1], rounds, errors).await;
        let lite_delivery = delivery(&sqlite.sockets[0], &sqlite.sockets[0], rounds, errors).await;
        row(
            rows,
            "PostgreSQL: write to subscriber on another instance",
            format!(
                "p50 {:.2} ms (SQLite, one daemon: {:.2} ms)",
                pg_delivery / 1e3,
                lite_delivery / 1e3
            ),
            "< 5 ms",
            Some(pg_delivery < 5000.0),
        );
    }
    // The daemons are gone: their database can go.
    admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
}
