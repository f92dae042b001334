//! One client connection: reads request lines, serves each, and writes the answers back in
//! request order.
//!
//! Ordering: a write is queued to the writer the moment it is parsed, so pipelined writes
//! share commits. A read runs the moment it is parsed, unless this connection still has
//! writes in flight; then it is queued behind them on the writer, so a connection always
//! reads its own writes and never sees a write it sent later.
//!
//! Writing never stops reading: answers go into the connection's outbox, which is written
//! whenever the socket takes bytes, while requests go on being read and answered. Only when
//! the client has more than `BATON_MAX_UNREAD_BYTES` of answers unread does the connection
//! stop reading it (back-pressure), so a client that sends everything before it reads
//! anything never deadlocks with the daemon.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;

use crate::engine::Reply;
use crate::error::{Error, Result};
use crate::log_limit::Limited;
use crate::methods::app::SharedApp;
use crate::methods::{self, ConnectionInfo, Ctx, Plan};
use crate::protocol::notify::Notifier;
use crate::protocol::{parse_request, render};

use super::codec::{Frame, LineCodec};
use super::limits::{Held, Unproven, UNAUTHENTICATED_LINE_BYTES};

/// Connections closed for not authenticating in time, reported at a bounded rate.
static AUTH_TIMEOUTS: Limited = Limited::new(crate::log_limit::EVERY);

/// Subscription events move into the outbox only while it holds less than this.
const NOTES_INTO_OUTBOX: usize = 64 * 1024;

/// Answers a connection may owe at once (being worked on) before it stops reading.
const MAX_IN_FLIGHT: usize = 4096;

/// Answer bytes not yet taken by the client, in request order, and who to tell once a line
/// has gone out.
#[derive(Default)]
struct Outbox {
    bytes: BytesMut,
    /// Bytes ever queued, and ever written.
    queued: u64,
    written: u64,
    /// Senders to fire once `written` reaches their mark.
    waiting: std::collections::VecDeque<(u64, oneshot::Sender<()>)>,
}

impl Outbox {
    fn push(&mut self, line: &[u8], then: Option<oneshot::Sender<()>>) {
        self.bytes.extend_from_slice(line);
        self.queued += line.len() as u64;
        if let Some(then) = then {
            self.waiting.push_back((self.queued, then));
        }
    }

    /// `n` bytes went out.
    fn wrote(&mut self, n: usize) {
        self.bytes.advance(n);
        self.written += n as u64;
        while self
            .waiting
            .front()
            .is_some_and(|(at, _)| *at <= self.written)
        {
            if let Some((_, then)) = self.waiting.pop_front() {
                let _ = then.send(());
            }
        }
    }

    fn unread(&self) -> usize {
        self.bytes.len()
    }
}

/// A response line: written already, or still being worked on.
enum Line {
    Ready(Vec<u8>),
    /// Ready now; the sender fires once the line is written.
    ReadyThen(Vec<u8>, oneshot::Sender<()>),
    Coming(BoxFuture<'static, Vec<u8>>),
    /// Still being worked on, in steps: nothing more is read until it is answered.
    ComingBarrier(BoxFuture<'static, Vec<u8>>),
}

/// An answer line, and who to tell once it is written.
type Pending = BoxFuture<'static, (Vec<u8>, Option<oneshot::Sender<()>>)>;

/// Subscription events a connection may have queued before its subscription is ended
/// for falling behind.
const NOTIFY_CAPACITY: usize = 1024;

/// Numbers connections for the daemon's life (locks and sessions remember which one
/// holds them); see [`number_connections_from_random`].
static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// Starts numbering connections at a random multiple of 2^32: daemons sharing one database
/// store their connections' numbers side by side, and must never take another's
/// connection for one of their own.
/// Returns the base.
pub fn number_connections_from_random() -> u64 {
    let base = ((uuid::Uuid::new_v4().as_u64_pair().0 >> 34) << 32).max(1);
    NEXT_CONNECTION_ID.store(base, Ordering::Relaxed);
    base
}

/// Where a connection comes from.
pub struct Peer {
    /// The socket's descriptor, to look for a hang-up (it stays open while the stream does).
    pub fd: std::os::fd::RawFd,
    /// `unix`, or the network peer's address (for the log).
    pub name: String,
    /// Acts as admin without authenticating (a Unix socket, trusted by its file mode).
    pub admin: bool,
    /// A network connection until it authenticates: short lines only, a deadline, and a
    /// slot of its listener's unauthenticated connections.
    pub unproven: Option<Unproven>,
    /// The socket's place among the descriptors batond counts (none in-process).
    pub held: Option<Held>,
}

/// Serves one client until it leaves, over any byte stream (a Unix socket, TCP, TLS).
/// `shutdown` stops reading new requests (answers owed are still written); `hard_stop`
/// ends the connection at once, even in the middle of a write to a client that does not
/// read (the end of the shutdown grace).
pub async fn serve<R, W>(
    reader: R,
    writer: W,
    peer: Peer,
    app: SharedApp,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    app.metrics.connection_opened();
    let (notify_tx, mut notify_rx) = Notifier::channel(NOTIFY_CAPACITY, app.subscribers.clone());
    let connection = Arc::new(ConnectionInfo::new(
        NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed),
        notify_tx,
    ));
    if peer.admin {
        connection.auth.trust_as_admin();
    }
    connection.auth.set_peer(peer.name);
    let _held = peer.held;
    let mut unproven = peer.unproven;
    let mut auth_deadline = unproven
        .as_ref()
        .map(|u| Box::pin(tokio::time::sleep_until(u.deadline)));
    let codec = match unproven {
        Some(_) => LineCodec::eager(UNAUTHENTICATED_LINE_BYTES.min(app.config.max_line_bytes)),
        None => LineCodec::new(app.config.max_line_bytes),
    };
    let mut told_closed = false;
    let mut frames = FramedRead::with_capacity(reader, codec, 16 * 1024);
    let mut out = writer;
    let mut outbox = Outbox::default();
    // Written but not flushed (a TLS stream keeps records until flushed).
    let mut unflushed = false;
    let max_unread = app.config.max_unread_bytes;
    let mut pending: FuturesOrdered<Pending> = FuturesOrdered::new();
    let writes_in_flight = Arc::new(AtomicUsize::new(0));
    let mut reading = true;
    let fd = peer.fd;
    // After a half-close: how often to look whether the client has gone entirely.
    let mut hangup_check: Option<tokio::time::Interval> = None;
    // Set while a request that runs in steps is being worked on: until it is answered,
    // nothing more is read, so what the client sends next applies after it.
    let mut barrier: Option<oneshot::Receiver<()>> = None;
    // Fires when the token the connection acts with is revoked or expires.
    let mut token_life: Option<CancellationToken> = None;

    loop {
        if !reading && pending.is_empty() && outbox.unread() == 0 && !unflushed {
            break;
        }
        tokio::select! {
            biased;
            // Only once shutdown began (reading stopped): while serving, this would register
            // with the token on every turn of the loop.
            _ = hard_stop.cancelled(), if !reading => break,
            Some((line, written)) = pending.next(), if !pending.is_empty() => {
                outbox.push(&line, written);
            }
            // Events wait in their own bounded (and counted) queue until the outbox is
            // nearly empty: a subscriber that does not read is ended for falling behind.
            Some(line) = notify_rx.recv(), if outbox.unread() < NOTES_INTO_OUTBOX => {
                connection.notify.written(line.len());
                outbox.push(&line, None);
            }
            _ = lifted(&mut barrier), if barrier.is_some() => {
                barrier = None;
            }
            frame = frames.next(), if reading && barrier.is_none() && pending.len() < MAX_IN_FLIGHT && outbox.unread() < max_unread => {
                let answer = match frame {
                    Some(Ok(Frame::Line(line))) => {
                        handle_line(&app, &connection, &line, &writes_in_flight)
                    }
                    Some(Ok(Frame::TooLong)) if unproven.is_some() => {
                        // Before Authenticate: answer, then hang up.
                        reading = false;
                        let limit = frames.decoder().max_line_bytes();
                        let err = Error::UnauthenticatedLineTooLarge { limit };
                        app.metrics.record(None, std::time::Duration::ZERO, true);
                        Some(Line::Ready(render(None, &Err(err))))
                    }
                    Some(Ok(Frame::TooLong)) => {
                        let err = Error::RequestTooLarge { limit: app.config.max_line_bytes };
                        app.metrics.record(None, std::time::Duration::ZERO, true);
                        Some(Line::Ready(render(None, &Err(err))))
                    }
                    Some(Err(_)) | None => {
                        reading = false;
                        if (pending.is_empty() && outbox.unread() == 0) || peer_hung_up(fd) {
                            // The client is gone: its release_on_disconnect leases end and
                            // its waits leave their queues now, not when their deadlines pass.
                            told_closed = tell_closed(&app, &connection);
                        } else {
                            // Only its writing side closed (`nc -N`, shutdown(SHUT_WR)): it
                            // still reads the answers it is owed, waits included.
                            hangup_check = Some(tokio::time::interval(HANGUP_CHECK));
                        }
                        None
                    }
                };
                if connection.auth.must_close() {
                    // Too many failed Authenticate calls: answer them, then hang up.
                    reading = false;
                }
                if unproven.is_some() && connection.auth.is_authenticated() {
                    // Authenticated: its listener's slot frees, the deadline and the short
                    // lines end.
                    unproven = None;
                    auth_deadline = None;
                    frames.decoder_mut().set_limit(app.config.max_line_bytes);
                }
                token_life = connection.auth.token_life().filter(|life| !life.is_cancelled());
                match answer {
                    Some(Line::Ready(line)) if pending.is_empty() => outbox.push(&line, None),
                    Some(Line::ReadyThen(line, written)) if pending.is_empty() => {
                        outbox.push(&line, Some(written))
                    }
                    Some(Line::Ready(line)) => {
                        pending.push_back(futures::future::ready((line, None)).boxed());
                    }
                    Some(Line::ReadyThen(line, written)) => {
                        pending.push_back(futures::future::ready((line, Some(written))).boxed());
                    }
                    Some(Line::Coming(future)) => {
                        pending.push_back(future.map(|line| (line, None)).boxed());
                    }
                    Some(Line::ComingBarrier(future)) => {
                        let (answered, lifts) = oneshot::channel();
                        barrier = Some(lifts);
                        pending.push_back(
                            future
                                .map(move |line| {
                                    let _ = answered.send(());
                                    (line, None)
                                })
                                .boxed(),
                        );
                    }
                    None => {}
                }
            }
            _ = shutdown.cancelled(), if reading => {
                reading = false;
            }
            _ = ended(&token_life), if token_life.is_some() => {
                token_life = None;
                token_ended(&app, &connection);
            }
            _ = deadline(&mut auth_deadline), if unproven.is_some() => {
                // Not authenticated in time: say so, then hang up, owed answers or not
                // (counted and logged below).
                let timeout = unproven.as_ref().map_or(0, |u| u.timeout.as_millis());
                let err = Error::Unauthenticated(format!(
                    "no successful Authenticate within {timeout} ms of connecting; batond closes this connection. Authenticate right after connecting (clients do so with BATON_TOKEN), or raise BATON_AUTH_TIMEOUT_MS"
                ));
                outbox.push(&render(None, &Err(err)), None);
                let said = tokio::time::timeout(SAY_GOODBYE, async {
                    out.write_all(&outbox.bytes).await?;
                    out.flush().await
                });
                let _ = said.await;
                break;
            }
            _ = tick(&mut hangup_check), if !told_closed && hangup_check.is_some() => {
                if peer_hung_up(fd) {
                    told_closed = tell_closed(&app, &connection);
                    hangup_check = None;
                }
            }
            // Last: what is ready is answered first, so the answers of a burst go out in
            // one write.
            sent = send_some(&mut out, &outbox.bytes), if outbox.unread() > 0 || unflushed => match sent {
                Ok(Some(n)) => {
                    outbox.wrote(n);
                    unflushed = true;
                }
                Ok(None) => unflushed = false,
                // The client is gone.
                Err(()) => break,
            },
        }
    }
    if unproven.is_some() && auth_deadline.as_ref().is_some_and(|d| d.is_elapsed()) {
        // Not authenticated in time (perhaps while it would not read its answers).
        app.metrics.auth_timed_out();
        let timeout = unproven.as_ref().map_or(0, |u| u.timeout.as_millis());
        AUTH_TIMEOUTS.report(|unlogged| {
            tracing::warn!(
                peer = connection.auth.peer(),
                "closed a connection that did not authenticate within {timeout} ms ({unlogged} more since the last report; Metrics counts them as connections.auth_timeouts); if it is a client you know, have it authenticate right after connecting, or raise BATON_AUTH_TIMEOUT_MS"
            )
        });
    }
    tokio::select! {
        _ = out.shutdown() => {}
        _ = hard_stop.cancelled() => {}
        _ = tokio::time::sleep(SAY_GOODBYE), if unproven.is_some() => {}
    }
    connection.end_subscriptions(false);
    // What is left unread is no longer held for anyone.
    notify_rx.close();
    while let Ok(line) = notify_rx.try_recv() {
        connection.notify.written(line.len());
    }
    if !told_closed {
        tell_closed(&app, &connection);
    }
    app.metrics.connection_closed();
}

/// Writes what the socket takes of `bytes` (Some(how many)), or, with nothing left to
/// write, flushes (None); Err once the client is gone.
async fn send_some<W: AsyncWrite + Unpin>(
    out: &mut W,
    bytes: &[u8],
) -> std::result::Result<Option<usize>, ()> {
    if bytes.is_empty() {
        return out.flush().await.map(|()| None).map_err(|_| ());
    }
    match out.write(bytes).await {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(()),
    }
}

/// How long a connection being closed for not authenticating in time may take to take its
/// last line.
const SAY_GOODBYE: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits for the deadline, if there is one.
async fn deadline(sleep: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>) {
    match sleep {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

/// How often a half-closed connection with answers still owed is checked for a hang-up.
const HANGUP_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

async fn tick(interval: &mut Option<tokio::time::Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Whether the client closed its end entirely, not just its writing side (a Unix stream
/// socket reports POLLHUP only once both directions are shut).
fn peer_hung_up(fd: std::os::fd::RawFd) -> bool {
    let mut poll = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one pollfd on a descriptor this connection owns, no waiting.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Resolves once the request that holds the barrier is answered (or dropped).
async fn lifted(barrier: &mut Option<oneshot::Receiver<()>>) {
    match barrier {
        Some(answered) => {
            let _ = answered.await;
        }
        None => std::future::pending().await,
    }
}

async fn ended(life: &Option<CancellationToken>) {
    match life {
        Some(life) => life.cancelled().await,
        None => std::future::pending().await,
    }
}

/// The connection's token was revoked or expired: its subscriptions end with a last
/// `Event {subscription_id, ended: "unauthorized"}` line, and its waits are answered 401.
/// Its next request is 401 too (`ConnectionAuth::principal`).
fn token_ended(app: &SharedApp, connection: &ConnectionInfo) {
    // Each subscription's own task writes its last line, after its last event.
    connection.end_subscriptions(true);
    if let Err(err) = crate::methods::locks::connection_unauthorized(app, connection.id) {
        tracing::warn!(%err, connection = connection.id, "could not end the waits of a connection whose token ended; they end at their deadline");
    }
}

/// Tells the writer a connection that used locks has closed. Returns true once told.
fn tell_closed(app: &SharedApp, connection: &ConnectionInfo) -> bool {
    if !connection.uses_locks() {
        return true;
    }
    let id = connection.id;
    if let Err(err) = crate::methods::locks::connection_closed(app, id) {
        tracing::warn!(%err, connection = id, "could not release the locks of a closed connection; they expire with their leases");
    }
    true
}

/// Serves one request line; `None` for a blank line (which gets no answer).
fn handle_line(
    app: &SharedApp,
    connection: &ConnectionInfo,
    line: &[u8],
    writes_in_flight: &Arc<AtomicUsize>,
) -> Option<Line> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let started = Instant::now();
    let request = match parse_request(line) {
        Ok(request) => request,
        Err((id, err)) => {
            app.metrics.record(None, started.elapsed(), true);
            return Some(Line::Ready(render(id, &Err(err))));
        }
    };
    let method = methods::canonical_name(&request.method);
    let cx = Ctx {
        app,
        raw_params: request.params,
        connection,
    };
    let (name, plan) = match methods::plan(&method, &cx) {
        Ok(planned) => planned,
        Err(err) => {
            let name = methods::METHOD_NAMES.iter().copied().find(|n| *n == method);
            app.metrics.record(name, started.elapsed(), true);
            return Some(Line::Ready(render(request.id, &Err(err))));
        }
    };
    let finish = {
        let app = app.clone();
        move |id: Option<&RawValue>, answer: Result<Reply>| {
            app.metrics
                .record(Some(name), started.elapsed(), answer.is_err());
            render(id, &answer)
        }
    };
    // A write that runs in steps: this connection reads nothing more until it is answered.
    let (plan, barrier) = match plan {
        Plan::Barrier(plan) => (*plan, true),
        plan => (plan, false),
    };
    let queued = match plan {
        Plan::Barrier(_) => Err(Error::Internal("a barrier inside a barrier".into())),
        Plan::Ready(answer) => return Some(Line::Ready(finish(request.id, answer))),
        Plan::Subscribe(opening) => {
            let (answer, stream, end) = match methods::journal::open(app, connection, opening) {
                Ok(opened) => opened,
                Err(err) => return Some(Line::Ready(finish(request.id, Err(err)))),
            };
            let (written, gate) = oneshot::channel();
            tokio::spawn(super::subscriptions::stream_events(
                app.clone(),
                stream,
                connection.notify.clone(),
                end,
                gate,
            ));
            return Some(Line::ReadyThen(finish(request.id, Ok(answer)), written));
        }
        Plan::Read {
            apply,
            heavy,
            single_statement,
        } if writes_in_flight.load(Ordering::Acquire) == 0 => {
            let answer = if heavy {
                tokio::task::block_in_place(|| methods::read_now(app, apply, single_statement))
            } else {
                methods::read_now(app, apply, single_statement)
            };
            return Some(Line::Ready(finish(request.id, answer)));
        }
        Plan::Read { apply, .. } => app.writer.read(apply).map(|rx| (rx, None)),
        Plan::Write {
            idempotency,
            apply,
            foreseen,
        } => {
            let submitted = app.writer.write(idempotency, apply, foreseen);
            if submitted.is_ok() {
                writes_in_flight.fetch_add(1, Ordering::AcqRel);
            }
            submitted.map(|rx| (rx, Some(writes_in_flight.clone())))
        }
    };
    let (rx, counter): (oneshot::Receiver<Result<Reply>>, Option<Arc<AtomicUsize>>) = match queued {
        Ok(queued) => queued,
        Err(err) => return Some(Line::Ready(finish(request.id, Err(err)))),
    };
    let id = request.id.map(ToOwned::to_owned);
    let coming = if barrier {
        Line::ComingBarrier
    } else {
        Line::Coming
    };
    Some(coming(
        async move {
            let answer = rx.await.unwrap_or_else(|_| {
                Err(Error::Unavailable(
                    "the writer stopped before answering; retry once batond is back".into(),
                ))
            });
            if let Some(counter) = counter {
                counter.fetch_sub(1, Ordering::AcqRel);
            }
            finish(id.as_deref(), answer)
        }
        .boxed(),
    ))
}
