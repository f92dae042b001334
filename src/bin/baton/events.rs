//! `baton events --follow`.

use std::io::Write;

use serde::Deserialize;
use serde_json::Value;

use baton::client::Connection;
use baton::protocol::journal::{Event, EventFilter, SubscribeParams};

use crate::failure::{Failure, Outcome};
use crate::out::{event_row, Out};

/// A line a subscription pushes.
#[derive(Deserialize)]
struct Notification {
    method: String,
    params: Value,
}

/// The params of an `Event` notification; the event is kept as sent, for --json.
#[derive(Deserialize)]
struct EventParams {
    event: Value,
}

/// The params of a `SubscriptionEnded` notification.
#[derive(Deserialize)]
struct Ended {
    reason: String,
    resume_from_seq: u64,
    message: String,
}

/// Reads a notification (or its params) as `T`.
fn read<'a, T: Deserialize<'a>>(what: &str, value: &'a Value) -> Result<T, Failure> {
    T::deserialize(value).map_err(|e| {
        Failure::new(
            1,
            format!("batond sent {what} this client cannot read ({e}): {value}"),
        )
    })
}

/// Streams events as they are journaled, resubscribing where it stopped if the daemon
/// cuts the subscription off for falling behind.
pub async fn follow_events(
    out: &Out,
    conn: &mut Connection,
    since: Option<u64>,
    filter: EventFilter,
) -> Outcome {
    let mut subscribe = SubscribeParams {
        since_seq: since,
        filter: Some(filter),
    };
    conn.send(&subscribe).await?;
    let stdout = std::io::stdout();
    loop {
        let line = conn.notification().await?;
        let note: Notification = read("a notification", &line)?;
        match note.method.as_str() {
            "Event" => {
                let EventParams { event } = read("an Event", &note.params)?;
                let line = if out.json {
                    event.to_string()
                } else {
                    event_row(&read::<Event>("an event", &event)?).join("  ")
                };
                let mut lock = stdout.lock();
                if writeln!(lock, "{line}").and_then(|_| lock.flush()).is_err() {
                    return Ok(0); // the reader went away (e.g. `| head`)
                }
            }
            "SubscriptionEnded" => {
                let ended: Ended = read("a SubscriptionEnded", &note.params)?;
                if ended.reason == "overflow" {
                    subscribe.since_seq = Some(ended.resume_from_seq);
                    conn.send(&subscribe).await?;
                } else {
                    return Err(Failure::new(1, ended.message));
                }
            }
            _ => {}
        }
    }
}
