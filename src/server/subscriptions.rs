//! Subscriptions: the task that streams one subscription's events to its connection
//! (Subscribe's plan names what to stream; the connection starts this once its answer is
//! on its way), at the reader's pace while it replays the past and then live, and its
//! last line when it ends.

use crate::methods::journal::{self, Stream};
use crate::methods::SubscriptionEnd;
use crate::protocol::notify::{Notifier, NotifyError};

/// After a stalled subscriber's backlog is dropped, returns what glibc's heap holds free to
/// the system. Under batond's jemalloc this reaches only memory C code (SQLite) took from
/// glibc: the backlog itself was jemalloc's, which gives freed pages back on its own
/// schedule (its decay), not at this call. Programs on the system allocator (the library's
/// other users) get the trim itself.
fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// One subscription: pages through the journal after `since`, then follows the writer's
/// head. Reads committed rows only, in seq order, so there is no gap and no duplicate.
pub async fn stream_events(
    app: std::sync::Arc<crate::methods::app::App>,
    stream: Stream,
    notify: Notifier,
    end: SubscriptionEnd,
    gate: tokio::sync::oneshot::Receiver<()>,
) {
    if gate.await.is_err() {
        return;
    }
    let id = stream.id.clone();
    pump(app, stream, &notify, &end).await;
    if end.is_ended() && end.unauthorized() {
        // Written here, after the last event this task queued: nothing of the
        // subscription follows it.
        let line = crate::protocol::notification(
            "Event",
            &serde_json::json!({"subscription_id": id, "ended": "unauthorized"}),
        );
        let _ = notify.try_send(line);
    }
}

/// Delivers a subscription's events until it ends (or its connection does).
async fn pump(
    app: std::sync::Arc<crate::methods::app::App>,
    stream: Stream,
    notify: &Notifier,
    end: &SubscriptionEnd,
) {
    let Stream {
        id,
        since,
        filter,
        visible,
    } = stream;
    let mut head = app.writer.head();
    let mut last = since;
    // Replaying the past goes at the reader's pace; once a read reached the head, events
    // are live, and a reader that falls behind them is ended (`overflow`).
    let mut live = false;
    loop {
        if end.is_ended() {
            return;
        }
        head.borrow_and_update();
        let page = app.store.read(|storage| {
            let page = journal::events_after(
                storage,
                last,
                &filter,
                journal::SUBSCRIPTION_PAGE,
                journal::SUBSCRIPTION_PAGE_BYTES,
            )?;
            Ok((page, storage.oldest_seq()?))
        });
        let (events, next) = match page {
            Ok((_, oldest)) if last + 1 < oldest => {
                // Compacted past what this subscriber has seen: it cannot go on gap-free.
                let last_line = crate::protocol::notification(
                    "SubscriptionEnded",
                    &serde_json::json!({
                        "subscription_id": id,
                        "reason": "compacted",
                        "resume_from_seq": last,
                        "oldest_seq": oldest,
                        "message": format!("events after seq {last} were compacted away before they were delivered; re-read the state you need, then Subscribe with since_seq {}", oldest - 1),
                    }),
                );
                tokio::select! {
                    _ = notify.send(last_line) => {}
                    _ = end.ended() => {}
                }
                return;
            }
            Ok((page, _)) => page,
            Err(err) => {
                static READ_FAILED: crate::log_limit::Limited =
                    crate::log_limit::Limited::new(crate::log_limit::EVERY);
                if let Some(held_back) = READ_FAILED.admit() {
                    tracing::warn!(%err, subscription = %id, held_back, "a subscription's read failed; it retries every 50 ms");
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Cut short by count or by bytes: more may be waiting already.
        let page_bytes: usize = events.iter().map(|e| e.data.get().len()).sum();
        let full_page = events.len() as u64 >= journal::SUBSCRIPTION_PAGE
            || page_bytes >= journal::SUBSCRIPTION_PAGE_BYTES;
        for event in events {
            let seq = event.seq;
            if visible
                .as_ref()
                .is_some_and(|principal| !principal.scopes.sees_event(&event))
            {
                last = seq;
                continue;
            }
            let line = crate::protocol::notification(
                "Event",
                &serde_json::json!({"subscription_id": id, "event": event}),
            );
            if end.is_ended() {
                return;
            }
            let sent = if live {
                notify.try_send(line)
            } else {
                tokio::select! {
                    sent = notify.send_paced(line) => sent,
                    _ = end.ended() => return,
                }
            };
            match sent {
                Ok(()) => last = seq,
                Err(NotifyError::Full) => {
                    let last_line = crate::protocol::notification(
                        "SubscriptionEnded",
                        &serde_json::json!({
                            "subscription_id": id,
                            "reason": "overflow",
                            "resume_from_seq": last,
                            "message": format!("this connection fell too far behind reading events; Subscribe again with since_seq {last}"),
                        }),
                    );
                    tokio::select! {
                        _ = notify.send(last_line) => {}
                        _ = end.ended() => {}
                    }
                    give_memory_back();
                    return;
                }
                Err(NotifyError::Closed) => return,
            }
        }
        last = last.max(next);
        if full_page {
            continue;
        }
        live = true;
        tokio::select! {
            changed = head.changed() => if changed.is_err() { return },
            _ = end.ended() => return,
        }
    }
}
