//! Task benchmarks: DAGs run by worker loops, and AcquireNextNode latency as finished
//! tasks pile up.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{call, connect, percentile, round_trip, Lines, OwnedWriteHalf};

async fn register_task(
    lines: &mut Lines,
    w: &mut OwnedWriteHalf,
    n: usize,
    chain: bool,
) -> serde_json::Value {
    let nodes: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let deps = if chain && i > 0 {
                vec![format!("n{}", i - 1)]
            } else {
                vec![]
            };
            serde_json::json!({"id": format!("n{i}"), "dependencies": deps})
        })
        .collect();
    let answer = call(
        lines,
        w,
        serde_json::json!({"id": 1, "method": "RegisterTask",
        "params": {"goal": "bench", "nodes": nodes}}),
    )
    .await;
    answer["result"]["task_id"].clone()
}

/// The part of an AcquireNextNode answer a worker needs (the rest, such as the context's
/// recent events, is skipped unparsed, as a typed client would).
#[derive(serde::Deserialize)]
struct NodeAnswer {
    result: Option<AcquiredNode>,
}

#[derive(serde::Deserialize)]
struct AcquiredNode {
    task_id: String,
    node_id: String,
    lease_id: String,
}

/// How a worker loops over nodes.
#[derive(Clone, Copy, PartialEq)]
pub enum Worker {
    /// CompleteNode, wait for its answer, then AcquireNextNode: the plain loop.
    Plain,
    /// Each CompleteNode goes out in one write together with the next AcquireNextNode
    /// (answered in order), so both usually share one commit.
    Pipelined,
}

/// Nodes per second when `workers` connections loop AcquireNextNode + CompleteNode.
pub async fn run_nodes(
    path: &Path,
    n: usize,
    workers: usize,
    chain: bool,
    style: Worker,
) -> (f64, u64) {
    let (mut lines, mut w) = connect(path).await;
    let task_id = register_task(&mut lines, &mut w, n, chain).await;
    let start = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|k| {
            let path = path.to_path_buf();
            let task_id = task_id.clone();
            tokio::spawn(async move {
                let (mut lines, mut w) = connect(&path).await;
                let acquire = format!(
                    "{}\n",
                    serde_json::json!({"id": 1, "method": "AcquireNextNode",
                        "params": {"task_id": task_id, "lease_owner": format!("w{k}"),
                                   "wait_ms": if chain { 1000 } else { 0 }}})
                );
                let (mut done, mut errors) = (0u64, 0u64);
                let answer = round_trip(&mut lines, &mut w, acquire.as_bytes()).await;
                let mut node: NodeAnswer = serde_json::from_str(&answer).unwrap();
                while let Some(n) = node.result {
                    let mut complete = serde_json::json!({"id": 2, "method": "CompleteNode",
                        "params": {"task_id": n.task_id, "node_id": n.node_id, "lease_id": n.lease_id}})
                    .to_string();
                    complete.push('\n');
                    if style == Worker::Pipelined {
                        complete.push_str(&acquire);
                    }
                    let completed = round_trip(&mut lines, &mut w, complete.as_bytes()).await;
                    if completed.contains("\"error\"") {
                        errors += 1;
                    }
                    done += 1;
                    let next = match style {
                        Worker::Pipelined => lines.next_line().await.unwrap().expect("an answer"),
                        Worker::Plain => round_trip(&mut lines, &mut w, acquire.as_bytes()).await,
                    };
                    node = serde_json::from_str(&next).unwrap();
                }
                (done, errors)
            })
        })
        .collect();
    let (mut done, mut errors) = (0, 0);
    for t in tasks {
        let (d, e) = t.await.unwrap();
        done += d;
        errors += e;
    }
    if done != n as u64 {
        eprintln!("ran {done} of {n} nodes");
        errors += 1;
    }
    (n as f64 / start.elapsed().as_secs_f64(), errors)
}

/// Median AcquireNextNode round trip in microseconds over a fresh task of `n` nodes.
pub async fn acquire_node_latency(path: &Path, n: usize) -> f64 {
    let (mut lines, mut w) = connect(path).await;
    register_task(&mut lines, &mut w, n, false).await;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let node = call(
            &mut lines,
            &mut w,
            serde_json::json!({"id": 1, "method": "AcquireNextNode",
            "params": {"lease_owner": "probe"}}),
        )
        .await;
        samples.push(start.elapsed());
        let node = &node["result"];
        call(&mut lines, &mut w, serde_json::json!({"id": 2, "method": "CompleteNode",
            "params": {"task_id": node["task_id"], "node_id": node["node_id"], "lease_id": node["lease_id"]}})).await;
    }
    samples.sort();
    percentile(&samples, 0.5)
}

/// Registers and finishes `n` one-node tasks from 8 connections.
pub async fn finish_tasks(path: &Path, n: usize) {
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let path = path.to_path_buf();
            tokio::spawn(async move {
                let (mut lines, mut w) = connect(&path).await;
                for _ in 0..n / 8 {
                    let task_id = register_task(&mut lines, &mut w, 1, false).await;
                    let node = call(&mut lines, &mut w, serde_json::json!({"id": 1, "method": "AcquireNextNode",
                        "params": {"task_id": task_id, "lease_owner": "filler"}})).await;
                    let node = &node["result"];
                    call(&mut lines, &mut w, serde_json::json!({"id": 2, "method": "CompleteNode",
                        "params": {"task_id": node["task_id"], "node_id": node["node_id"], "lease_id": node["lease_id"]}})).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// Queues `n` nodes across priorities and labels (tasks of up to 10,000 nodes, labelled
/// none, gpu, linux or gpu+linux, priorities -2 to 2), none of them taken.
pub async fn queue_nodes(path: &Path, n: usize) {
    let (mut lines, mut w) = connect(path).await;
    let label_sets = [
        serde_json::json!([]),
        serde_json::json!(["gpu"]),
        serde_json::json!(["linux"]),
        serde_json::json!(["gpu", "linux"]),
    ];
    let mut queued = 0;
    while queued < n {
        let size = (n - queued).min(10_000);
        let nodes: Vec<serde_json::Value> = (0..size)
            .map(|i| {
                serde_json::json!({"id": format!("q{i}"), "priority": (i % 5) as i64 - 2,
                    "labels": label_sets[i % 4]})
            })
            .collect();
        let answer = call(
            &mut lines,
            &mut w,
            serde_json::json!({"id": 1, "method": "RegisterTask",
                "params": {"goal": "queue", "nodes": nodes}}),
        )
        .await;
        assert!(answer.get("result").is_some(), "{answer}");
        queued += size;
    }
}

/// AcquireNextNode round trips for a worker with labels, sorted, over `probes` picks
/// (each node completed after it is timed). The answer is parsed after the
/// clock stops: it grows with the task's recent events, and parsing them is the client's
/// cost, not the pick's.
pub async fn labelled_pick_latency(path: &Path, probes: usize) -> Vec<Duration> {
    let (mut lines, mut w) = connect(path).await;
    let mut samples = Vec::with_capacity(probes);
    let acquire = format!(
        "{}\n",
        serde_json::json!({"id": 1, "method": "AcquireNextNode",
            "params": {"lease_owner": "probe", "labels": ["gpu", "linux"]}})
    );
    for _ in 0..probes {
        let start = Instant::now();
        let answer = round_trip(&mut lines, &mut w, acquire.as_bytes()).await;
        samples.push(start.elapsed());
        let node: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let node = &node["result"];
        call(&mut lines, &mut w, serde_json::json!({"id": 2, "method": "CompleteNode",
            "params": {"task_id": node["task_id"], "node_id": node["node_id"], "lease_id": node["lease_id"]}})).await;
    }
    samples.sort();
    samples
}
