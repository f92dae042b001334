//! The time the rules judge by. Everything that stamps a record, judges an expiry or waits
//! for a lease's or a request's deadline asks a [`Clock`] (what only measures or paces the
//! daemon's own work, such as latencies and batch timing, reads `Instant`), so tests can
//! drive time by hand instead of
//! sleeping: batond started with `BATON_TEST_CLOCK_MS` runs on a [`ManualClock`] that only
//! the `AdvanceClock` method moves.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use chrono::{DateTime, SecondsFormat, Utc};

/// A source of wall-clock time (for timestamps on the wire) and monotonic time (for
/// deciding how long something lasted or whether it expired).
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch, for `updated_at`, `at`, `expires_at`.
    fn wall_ms(&self) -> i64;
    /// Monotonic time since an arbitrary fixed point; never goes backwards.
    fn monotonic(&self) -> Duration;
    /// Resolves once [`Clock::monotonic`] has reached `at`.
    fn sleep_until(&self, at: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>>;
    /// The clock tests move by hand, when this is one.
    fn as_manual(&self) -> Option<&ManualClock> {
        None
    }
}

/// The real clock.
pub struct SystemClock {
    started: Instant,
    /// Added to every wall reading: a test's way to run a daemon whose clock is off.
    skew_ms: i64,
}

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock::skewed(0)
    }

    /// A real clock whose wall readings are `skew_ms` off (`BATON_TEST_CLOCK_SKEW_MS`), as
    /// on a host whose time is wrong; monotonic time is unaffected.
    pub fn skewed(skew_ms: i64) -> SystemClock {
        SystemClock {
            started: Instant::now(),
            skew_ms,
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
            .saturating_add(self.skew_ms)
    }

    fn monotonic(&self) -> Duration {
        self.started.elapsed()
    }

    fn sleep_until(&self, at: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(at.saturating_sub(self.monotonic())))
    }
}

/// A clock that moves only when told to; both readings advance together, and sleepers
/// whose deadline has come wake.
pub struct ManualClock {
    wall_ms: AtomicI64,
    /// The monotonic reading; sleepers watch it.
    monotonic: watch::Sender<Duration>,
}

impl ManualClock {
    pub fn new(wall_ms: i64) -> ManualClock {
        ManualClock {
            wall_ms: AtomicI64::new(wall_ms),
            monotonic: watch::channel(Duration::ZERO).0,
        }
    }

    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.wall_ms.fetch_add(ms, Ordering::SeqCst);
        self.monotonic.send_modify(|now| *now += by);
    }
}

impl Clock for ManualClock {
    fn wall_ms(&self) -> i64 {
        self.wall_ms.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        *self.monotonic.borrow()
    }

    fn sleep_until(&self, at: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut now = self.monotonic.subscribe();
        Box::pin(async move {
            // An error means the clock is gone: nothing will ever move it, so wake.
            let _ = now.wait_for(|now| *now >= at).await;
        })
    }

    fn as_manual(&self) -> Option<&ManualClock> {
        Some(self)
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

    #[tokio::test]
    async fn a_manual_sleeper_wakes_when_the_clock_reaches_its_deadline() {
        let clock = ManualClock::new(0);
        let mut sleeper = tokio_test_spawn(clock.sleep_until(Duration::from_millis(1_000)));
        clock.advance(Duration::from_millis(999));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke before its deadline");
        clock.advance(Duration::from_millis(1));
        (&mut sleeper).await.unwrap();
    }

    fn tokio_test_spawn(
        sleep: Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(sleep)
    }
}
