//! The daemon's only source of time. Everything that stamps a record or judges an expiry
//! asks a [`Clock`], so tests can drive time by hand instead of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat, Utc};

/// A source of wall-clock time (for timestamps on the wire) and monotonic time (for
/// deciding how long something lasted or whether it expired).
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch, for `updated_at`, `at`, `expires_at`.
    fn wall_ms(&self) -> i64;
    /// Monotonic time since an arbitrary fixed point; never goes backwards.
    fn monotonic(&self) -> Duration;
}

/// The real clock.
pub struct SystemClock {
    started: Instant,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock {
            started: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn wall_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    fn monotonic(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A clock that moves only when told to; both readings advance together.
pub struct ManualClock {
    wall_ms: AtomicI64,
    monotonic_ms: AtomicI64,
}

impl ManualClock {
    pub fn new(wall_ms: i64) -> ManualClock {
        ManualClock {
            wall_ms: AtomicI64::new(wall_ms),
            monotonic_ms: AtomicI64::new(0),
        }
    }

    pub fn advance(&self, by: Duration) {
        let ms = by.as_millis() as i64;
        self.wall_ms.fetch_add(ms, Ordering::SeqCst);
        self.monotonic_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn wall_ms(&self) -> i64 {
        self.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_millis(self.monotonic_ms.load(Ordering::SeqCst) as u64)
    }
}

/// Formats epoch milliseconds as RFC 3339 UTC with milliseconds, the wire's time format.
pub fn format_ms(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_milliseconds_in_utc() {
        assert_eq!(format_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.wall_ms(), 1_000);
        clock.advance(Duration::from_secs(2));
        assert_eq!(clock.wall_ms(), 3_000);
        assert_eq!(clock.monotonic(), Duration::from_secs(2));
    }
}
