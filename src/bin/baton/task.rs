//! `baton task ...`.

use serde_json::{json, Value};

use baton::client::Connection;

use crate::cli::{arg_or_stdin, params, parse_json, TaskCommand};
use crate::failure::{Failure, Outcome};
use crate::out::{compact, text, Out};

pub async fn task(command: TaskCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        TaskCommand::Register { file } => {
            let source = if file == "-" {
                arg_or_stdin("-")?
            } else {
                std::fs::read_to_string(&file)
                    .map_err(|e| Failure::new(2, format!("cannot read {file}: {e}")))?
            };
            let spec = parse_json(&file, &source)?;
            let r = conn.call("RegisterTask", &spec).await?;
            if out.json {
                out.raw(&r);
            } else {
                println!("{}", text(&r["task_id"]));
                let ids: Vec<String> = r["node_ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(text)
                    .collect();
                eprintln!("registered with {} nodes: {}", ids.len(), ids.join(", "));
            }
            Ok(0)
        }
        TaskCommand::Status { task_id } => {
            let r = conn
                .call("TaskStatus", &json!({"task_id": task_id}))
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let t = &r["task"];
            println!(
                "{}  {}  {}  created {}",
                text(&t["task_id"]),
                out.status(t["status"].as_str().unwrap_or("")),
                text(&t["goal"]),
                text(&t["created_at"])
            );
            let rows: Vec<Vec<String>> = r["nodes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| {
                    vec![
                        text(&n["node_id"]),
                        text(&n["name"]),
                        out.status(n["state"].as_str().unwrap_or("")),
                        format!("{}/{}", n["attempts"], n["max_attempts"]),
                        text(&n["lease_owner"]),
                    ]
                })
                .collect();
            out.table(&["NODE", "NAME", "STATE", "ATTEMPTS", "WORKER"], &rows);
            Ok(0)
        }
        TaskCommand::List { status, limit } => {
            let r = conn
                .call(
                    "ListTasks",
                    &params(vec![
                        ("status", status.map(Value::from)),
                        ("limit", limit.map(Value::from)),
                    ]),
                )
                .await?;
            if out.json {
                out.raw(&r);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = r["tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    vec![
                        text(&t["task_id"]),
                        out.status(t["status"].as_str().unwrap_or("")),
                        compact(&t["goal"], 40),
                        text(&t["created_at"]),
                    ]
                })
                .collect();
            out.table(&["TASK", "STATUS", "GOAL", "CREATED_AT"], &rows);
            Ok(0)
        }
        TaskCommand::Cancel { task_id } => {
            let r = conn
                .call("CancelTask", &json!({"task_id": task_id}))
                .await?;
            if out.json {
                out.raw(&r);
            } else {
                println!(
                    "{task_id}  {}",
                    out.status(r["status"].as_str().unwrap_or("cancelled"))
                );
            }
            Ok(0)
        }
    }
}
