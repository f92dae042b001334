//! A connection's queue of server-pushed lines (subscription events), bounded by count and
//! by bytes, and the bound of every connection's queue together: the lines are wire text,
//! rendered before they are queued.

use std::sync::atomic::Ordering;

/// Most bytes of server-pushed lines a connection may have queued and not yet written to
/// its client: a subscriber that stops reading is ended (`SubscriptionEnded`, overflow)
/// before it can hold more, however large the events are.
pub const NOTIFY_MAX_BYTES: usize = 8 << 20;

/// Bytes of notifications queued on every connection together, and their bound
/// (`BATON_MAX_SUBSCRIBER_BYTES`).
#[derive(Debug)]
pub struct QueuedEverywhere {
    bytes: std::sync::atomic::AtomicUsize,
    max_bytes: usize,
}

impl QueuedEverywhere {
    pub fn new(max_bytes: usize) -> QueuedEverywhere {
        QueuedEverywhere {
            bytes: Default::default(),
            max_bytes,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }
}

/// Why a notification was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum NotifyError {
    /// The client is not reading fast enough (count or byte bound reached).
    Full,
    /// The connection is gone.
    Closed,
}

/// The sending side of a connection's notification queue, bounded by count (the channel)
/// and by bytes (`NOTIFY_MAX_BYTES`).
#[derive(Clone)]
pub struct Notifier {
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
    queued_bytes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// What every connection has queued, together.
    all: std::sync::Arc<QueuedEverywhere>,
    /// Told each time the receiver takes a line: a paced sender may go on.
    taken: std::sync::Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("queued_bytes", &self.queued_bytes())
            .finish()
    }
}

impl Notifier {
    /// A queue of `capacity` lines, counted in `all` too; the receiver must call
    /// [`Notifier::written`] for each line it takes.
    pub fn channel(
        capacity: usize,
        all: std::sync::Arc<QueuedEverywhere>,
    ) -> (Notifier, tokio::sync::mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = tokio::sync::mpsc::channel(capacity);
        let notifier = Notifier {
            tx,
            all,
            queued_bytes: Default::default(),
            taken: Default::default(),
        };
        (notifier, rx)
    }

    /// Queues a line unless the queue is full by count or by bytes. One line larger than
    /// the byte bound still goes through when nothing else is queued.
    /// Past the bound of every connection together, a connection that has lines queued
    /// (it is behind) is full too: the subscribers furthest behind are ended first, one
    /// that keeps up is not.
    pub fn try_send(&self, line: Vec<u8>) -> std::result::Result<(), NotifyError> {
        let len = line.len();
        let queued = self.queued_bytes.fetch_add(len, Ordering::AcqRel);
        let everywhere = self.all.bytes.fetch_add(len, Ordering::AcqRel);
        let over_all = everywhere + len > self.all.max_bytes;
        if queued > 0 && (queued + len > NOTIFY_MAX_BYTES || over_all) {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            self.all.bytes.fetch_sub(len, Ordering::AcqRel);
            return Err(NotifyError::Full);
        }
        self.tx.try_send(line).map_err(|err| {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            self.all.bytes.fetch_sub(len, Ordering::AcqRel);
            match err {
                tokio::sync::mpsc::error::TrySendError::Full(_) => NotifyError::Full,
                tokio::sync::mpsc::error::TrySendError::Closed(_) => NotifyError::Closed,
            }
        })
    }

    /// Queues a (small) line, waiting for room by count; the byte bound does not apply.
    pub async fn send(&self, line: Vec<u8>) -> std::result::Result<(), NotifyError> {
        let len = line.len();
        self.queued_bytes.fetch_add(len, Ordering::AcqRel);
        self.all.bytes.fetch_add(len, Ordering::AcqRel);
        self.tx.send(line).await.map_err(|_| {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            self.all.bytes.fetch_sub(len, Ordering::AcqRel);
            NotifyError::Closed
        })
    }

    /// Queues a line at the reader's pace: waits while the queue is full by count or by
    /// bytes (a subscription replaying the past, which must not overflow a reader that
    /// reads).
    pub async fn send_paced(&self, line: Vec<u8>) -> std::result::Result<(), NotifyError> {
        let len = line.len();
        loop {
            let taken = self.taken.notified();
            let queued = self.queued_bytes.load(Ordering::Acquire);
            if queued == 0 || queued + len <= NOTIFY_MAX_BYTES {
                return self.send(line).await;
            }
            taken.await;
        }
    }

    /// The receiver took a line of `len` bytes off the queue.
    pub fn written(&self, len: usize) {
        self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
        self.all.bytes.fetch_sub(len, Ordering::AcqRel);
        self.taken.notify_waiters();
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Acquire)
    }
}
