//! Agent benchmarks: how soon a waiting reader gets a message, and how many durable
//! messages 16 agents sending to one another get through.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use super::{clients, connect, field, percentile, round_trip};

/// Registers `name`; its session id.
async fn join(path: &Path, name: &str) -> String {
    let (mut lines, mut w) = connect(path).await;
    let line = format!(
        "{{\"id\":1,\"method\":\"RegisterAgent\",\"params\":{{\"name\":\"{name}\",\"ttl_secs\":3600,\"takeover\":true}}}}\n"
    );
    let answer = round_trip(&mut lines, &mut w, line.as_bytes()).await;
    field(&answer, "\"session_id\":")
        .expect("a session")
        .to_string()
}

/// Median microseconds from a SendMessage going out to a ReadInbox that waits on another
/// connection getting it.
pub async fn delivery(path: &Path, rounds: usize) -> f64 {
    let sender = join(path, "bench-sender").await;
    let reader = join(path, "bench-reader").await;
    let (mut send_lines, mut send_w) = connect(path).await;
    let (mut read_lines, mut read_w) = connect(path).await;
    let mut after = 0u64;
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let wait = format!(
            "{{\"id\":{i},\"method\":\"ReadInbox\",\"params\":{{\"session_id\":\"{reader}\",\"after\":{after},\"wait_ms\":60000}}}}\n"
        );
        read_w.write_all(wait.as_bytes()).await.unwrap();
        // Let the read reach the writer and wait before the message goes out.
        tokio::time::sleep(Duration::from_micros(300)).await;
        let send = format!(
            "{{\"id\":{i},\"method\":\"SendMessage\",\"params\":{{\"session_id\":\"{sender}\",\"to\":[\"bench-reader\"],\"body\":{i}}}}}\n"
        );
        let start = Instant::now();
        send_w.write_all(send.as_bytes()).await.unwrap();
        let got = read_lines.next_line().await.unwrap().expect("an answer");
        samples.push(start.elapsed());
        send_lines.next_line().await.unwrap().expect("an answer");
        after = field(&got, "\"next_after\":")
            .and_then(|s| s.parse().ok())
            .expect("next_after");
    }
    samples.sort();
    percentile(&samples, 0.5)
}

/// Durable messages per second when `agents` agents each send `per_agent` messages to the
/// next one, one at a time.
pub async fn exchange(path: &Path, agents: usize, per_agent: usize) -> (f64, u64) {
    let mut sessions = Vec::new();
    for a in 0..agents {
        sessions.push(join(path, &format!("bench-agent-{a}")).await);
    }
    clients(agents, per_agent, |a| {
        let path = path.to_path_buf();
        let session = sessions[a].clone();
        async move {
            let (mut lines, mut w) = connect(&path).await;
            let to = format!("bench-agent-{}", (a + 1) % agents);
            let mut errors = 0;
            for i in 0..per_agent {
                let send = format!(
                    "{{\"id\":{i},\"method\":\"SendMessage\",\"params\":{{\"session_id\":\"{session}\",\"to\":[\"{to}\"],\"body\":{{\"n\":{i}}}}}}}\n"
                );
                let answer = round_trip(&mut lines, &mut w, send.as_bytes()).await;
                if !answer.contains("\"result\"") {
                    errors += 1;
                    eprintln!("unexpected answer: {answer}");
                }
            }
            errors
        }
    })
    .await
}
