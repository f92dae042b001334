//! `baton task ...`.

use baton::client::Connection;
use baton::protocol::operator::RetryNodeParams;
use baton::protocol::tasks::{
    CancelTaskParams, ListTasksParams, RegisterTaskParams, TaskStatusParams,
};
use baton::protocol::Request;

use crate::cli::{arg_or_stdin, parse_json, TaskCommand};
use crate::failure::{Failure, Outcome};
use crate::out::{cut, or_dash, text, Out};

pub async fn task(command: TaskCommand, out: &Out, conn: &mut Connection) -> Outcome {
    match command {
        TaskCommand::Register { file } => {
            let source = if file == "-" {
                arg_or_stdin("-")?
            } else {
                std::fs::read_to_string(&file)
                    .map_err(|e| Failure::new(2, format!("cannot read {file}: {e}")))?
            };
            // The file goes to batond as it is written: batond says what is wrong with it.
            let spec = parse_json(&file, &source)?;
            let result = conn.call_raw(RegisterTaskParams::METHOD, &spec).await?;
            let answer = out.result::<RegisterTaskParams>(&result)?;
            if let Some(r) = answer {
                println!("{}", text(&r.task_id));
                let ids: Vec<String> = r.node_ids.iter().map(|id| text(id)).collect();
                eprintln!("registered with {} nodes: {}", ids.len(), ids.join(", "));
            }
            Ok(0)
        }
        TaskCommand::Status { task_id } => {
            let status = TaskStatusParams {
                task_id,
                limit: None,
                after: None,
            };
            let answer = out.pages(conn, &status, &["nodes"], None).await?;
            let Some(r) = answer else { return Ok(0) };
            let t = &r.task;
            println!(
                "{}  {}  {}  created {}",
                text(&t.task_id),
                out.status(t.status.as_str()),
                text(&t.goal),
                text(&t.created_at)
            );
            let rows: Vec<Vec<String>> = r
                .nodes
                .iter()
                .map(|n| {
                    vec![
                        text(&n.node_id),
                        or_dash(n.name.as_deref()),
                        out.status(n.state.as_str()),
                        format!("{}/{}", n.attempts, n.max_attempts),
                        or_dash(n.lease_owner.as_deref()),
                    ]
                })
                .collect();
            out.table(&["NODE", "NAME", "STATE", "ATTEMPTS", "WORKER"], &rows);
            Ok(0)
        }
        TaskCommand::List { status, limit } => {
            let list = ListTasksParams {
                status,
                limit: None,
                after: None,
            };
            let answer = out.pages(conn, &list, &["tasks"], limit).await?;
            let Some(r) = answer else { return Ok(0) };
            let rows: Vec<Vec<String>> = r
                .tasks
                .iter()
                .map(|t| {
                    vec![
                        text(&t.task_id),
                        out.status(t.status.as_str()),
                        cut(&t.goal, 40),
                        text(&t.created_at),
                    ]
                })
                .collect();
            out.table(&["TASK", "STATUS", "GOAL", "CREATED_AT"], &rows);
            Ok(0)
        }
        TaskCommand::Cancel { task_id } => {
            let cancel = CancelTaskParams {
                task_id: task_id.clone(),
                idempotency_key: None,
            };
            let answer = out.answer(conn, &cancel).await?;
            if let Some(r) = answer {
                println!("{task_id}  {}", out.status(r.status.as_str()));
            }
            Ok(0)
        }
        TaskCommand::Retry {
            task_id,
            node_id,
            reason,
        } => {
            let retry = RetryNodeParams {
                task_id,
                node_id,
                reason,
                idempotency_key: None,
            };
            let answer = out.answer(conn, &retry).await?;
            if let Some(r) = answer {
                println!(
                    "{}  {}  {}  task {}",
                    text(&r.task_id),
                    text(&r.node_id),
                    out.status(r.node_state.as_str()),
                    out.status(r.task_status.as_str())
                );
                if r.still_failed.is_empty() {
                    eprintln!("{} cancelled nodes resumed", r.nodes_resumed);
                } else {
                    let failed: Vec<String> = r.still_failed.iter().map(|n| text(n)).collect();
                    eprintln!(
                        "the task stays failed until these are retried too: {}",
                        failed.join(", ")
                    );
                }
            }
            Ok(0)
        }
    }
}
