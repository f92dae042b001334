//! What the network side may take of the process before anyone authenticated: a cap on
//! each listener's unauthenticated connections ([`Unauthenticated`]), the descriptors kept
//! back for the Unix socket and the database ([`Descriptors`]), and a log that reports a
//! flood at a bounded rate (`log_limit::Limited`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::log_limit::Limited;

/// Before Authenticate succeeds, a network connection's lines are at most this long.
pub const UNAUTHENTICATED_LINE_BYTES: usize = 64 * 1024;

/// The descriptors of the process: the network and HTTP listeners stop taking connections
/// (they accept and close them at once) while fewer than `reserve` would be left under
/// the open-file limit, so a flood can never take what the Unix socket, the database and
/// its pools need. Counts every client socket batond holds (Unix ones too), plus what was
/// open when it started serving.
pub struct Descriptors {
    /// RLIMIT_NOFILE (the soft limit, which batond raised to the hard one).
    limit: u64,
    /// Descriptors open when serving began (database, WAL, pools, listeners, stdio).
    base: u64,
    /// Kept back from network and HTTP clients.
    reserve: u64,
    /// Client sockets open now.
    held: AtomicU64,
    log: Limited,
}

/// One client socket counted by [`Descriptors`]; uncounted when dropped.
pub struct Held(Arc<Descriptors>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Descriptors {
    /// Reads the open-file limit and counts what is open now.
    pub fn measure() -> Arc<Descriptors> {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into a local struct.
        let limit = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            limit.rlim_cur
        } else {
            u64::MAX
        };
        let base = ["/proc/self/fd", "/dev/fd"]
            .iter()
            .find_map(|dir| std::fs::read_dir(dir).ok())
            .map_or(0, |entries| entries.count() as u64);
        Arc::new(Descriptors {
            limit,
            base,
            // A tenth of the limit, at least 64 (the database's files and pool, the Unix
            // socket's clients), at most 1024.
            reserve: (limit / 10).clamp(64, 1024),
            held: AtomicU64::new(0),
            log: Limited::default(),
        })
    }

    /// Counts a Unix-socket client: always served (up to the limit itself).
    pub fn hold(self: &Arc<Self>) -> Held {
        self.held.fetch_add(1, Ordering::Relaxed);
        Held(self.clone())
    }

    /// Counts a network or HTTP client, or refuses it (None) when that would eat into the
    /// reserve; a refusal is counted in Metrics and logged at a bounded rate.
    pub fn hold_network(
        self: &Arc<Self>,
        metrics: &crate::metrics::Metrics,
        listener: &str,
    ) -> Option<Held> {
        let held = self.held.fetch_add(1, Ordering::Relaxed) + 1;
        if self.base + held + self.reserve <= self.limit {
            return Some(Held(self.clone()));
        }
        self.held.fetch_sub(1, Ordering::Relaxed);
        let refused = metrics.refuse_for_descriptors();
        self.log.report(|unlogged| {
            tracing::warn!(
                "refused a connection on {listener}: batond holds {} descriptors of its open-file limit of {} and keeps the last {} for the Unix socket and the database ({unlogged} more refused since the last report, {refused} in all; Metrics counts them as connections.refused_descriptors); raise the limit (LimitNOFILE=, ulimit -n) if these clients are yours",
                self.base + held - 1,
                self.limit,
                self.reserve,
            )
        });
        None
    }
}

/// One listener's connections that have not authenticated yet, at most `max`.
pub struct Unauthenticated {
    count: AtomicUsize,
    max: usize,
    log: Limited,
}

/// One unauthenticated connection counted by [`Unauthenticated`]; uncounted when dropped
/// (it authenticated, or closed).
pub struct Slot(Arc<Unauthenticated>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Unauthenticated {
    pub fn new(max: usize) -> Arc<Unauthenticated> {
        Arc::new(Unauthenticated {
            count: AtomicUsize::new(0),
            max,
            log: Limited::default(),
        })
    }

    /// A slot for a new connection, or None (counted and logged at a bounded rate) when
    /// the listener holds its most already.
    pub fn take(
        self: &Arc<Self>,
        metrics: &crate::metrics::Metrics,
        listener: &str,
        peer: &str,
    ) -> Option<Slot> {
        if self.count.fetch_add(1, Ordering::Relaxed) < self.max {
            return Some(Slot(self.clone()));
        }
        self.count.fetch_sub(1, Ordering::Relaxed);
        let refused = metrics.refuse_unauthenticated();
        self.log.report(|unlogged| {
            tracing::warn!(
                peer,
                "refused a connection on {listener}: {} connections there have not authenticated yet, the most BATON_MAX_UNAUTHENTICATED allows ({unlogged} more refused since the last report, {refused} in all; Metrics counts them as connections.refused_unauthenticated); if these clients are yours, have them authenticate right after connecting or raise the limit",
                self.max
            )
        });
        None
    }
}

/// What a network connection carries until it authenticates: its listener's slot and the
/// moment it must have authenticated by.
pub struct Unproven {
    pub deadline: Instant,
    pub timeout: Duration,
    pub _slot: Slot,
}
