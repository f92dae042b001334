//! `baton events --follow`.

use std::io::Write;

use serde_json::Value;

use baton::client::Connection;

use crate::cli::params;
use crate::failure::{Failure, Outcome};
use crate::out::{event_row, Out};

/// cuts the subscription off for falling behind.
/// Streams events as they are journaled, resubscribing where it stopped if the daemon
pub async fn follow_events(
    out: &Out,
    conn: &mut Connection,
    since: Option<u64>,
    filter: Value,
) -> Outcome {
    let subscribe = |since: Option<u64>| {
        params(vec![
            ("since_seq", since.map(Value::from)),
            ("filter", Some(filter.clone())),
        ])
    };
    conn.call("Subscribe", &subscribe(since)).await?;
    let stdout = std::io::stdout();
    loop {
        let note = conn.notification().await?;
        match note["method"].as_str() {
            Some("Event") => {
                let event = &note["params"]["event"];
                let mut lock = stdout.lock();
                let line = if out.json {
                    event.to_string()
                } else {
                    event_row(event).join("  ")
                };
                if writeln!(lock, "{line}").and_then(|_| lock.flush()).is_err() {
                    return Ok(0); // the reader went away (e.g. `| head`)
                }
            }
            Some("SubscriptionEnded") => {
                let p = &note["params"];
                if p["reason"] == "overflow" {
                    let resume = p["resume_from_seq"].as_u64();
                    conn.call("Subscribe", &subscribe(resume)).await?;
                } else {
                    return Err(Failure::new(
                        1,
                        p["message"]
                            .as_str()
                            .unwrap_or("the subscription ended")
                            .to_string(),
                    ));
                }
            }
            _ => {}
        }
    }
}
