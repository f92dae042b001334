//! Request counters and latency histograms per method, and connection counts. Lock-free:
//! recording is a few relaxed atomic adds on the request path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Buckets per doubling of latency; 4 gives about 19% resolution.
const STEPS_PER_DOUBLING: f64 = 4.0;
const BUCKETS: usize = 100; // up to about 2^25 us, 33 s

struct MethodStats {
    count: AtomicU64,
    errors: AtomicU64,
    max_us: AtomicU64,
    sum_us: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl MethodStats {
    fn new() -> MethodStats {
        MethodStats {
            count: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn percentile(&self, counts: &[u64], total: u64, q: f64) -> u64 {
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                // The bucket's upper bound, capped by the largest value seen.
                let upper = 2f64.powf((i + 1) as f64 / STEPS_PER_DOUBLING) as u64;
                return upper.min(self.max_us.load(Ordering::Relaxed));
            }
        }
        self.max_us.load(Ordering::Relaxed)
    }
}

pub use crate::protocol::system::MethodFigures;
use crate::protocol::system::Text;

/// One method's latency histogram in seconds, Prometheus-style.
pub struct Histogram {
    /// (upper bound, requests at most that long), ascending.
    pub cumulative: Vec<(f64, u64)>,
    pub count: u64,
    pub sum: f64,
}

/// Daemon-wide request and connection counters.
pub struct Metrics {
    methods: BTreeMap<&'static str, MethodStats>,
    /// Requests that never reached a method (bad JSON, unknown method, oversized line).
    rejected: MethodStats,
    connections_open: AtomicU64,
    connections_total: AtomicU64,
    /// Failed accepts (out of file descriptors, mostly).
    accept_errors: AtomicU64,
    /// Failed Authenticate calls.
    auth_failures: AtomicU64,
    /// Network connections closed at once: their listener held its most unauthenticated
    /// connections already.
    refused_unauthenticated: AtomicU64,
    /// Network and HTTP connections closed at once: batond was near its open-file limit,
    /// whose last descriptors are kept for the Unix socket and the database.
    refused_descriptors: AtomicU64,
    /// Network connections closed for not authenticating in time.
    auth_timeouts: AtomicU64,
}

/// The name under which requests that named no known method are counted.
pub const REJECTED: &str = "(rejected)";

impl Metrics {
    pub fn new(method_names: &[&'static str]) -> Metrics {
        Metrics {
            methods: method_names
                .iter()
                .map(|n| (*n, MethodStats::new()))
                .collect(),
            rejected: MethodStats::new(),
            connections_open: AtomicU64::new(0),
            connections_total: AtomicU64::new(0),
            accept_errors: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            refused_unauthenticated: AtomicU64::new(0),
            refused_descriptors: AtomicU64::new(0),
            auth_timeouts: AtomicU64::new(0),
        }
    }

    /// Records one answered request.
    pub fn record(&self, method: Option<&'static str>, elapsed: Duration, is_error: bool) {
        let stats = method
            .and_then(|m| self.methods.get(m))
            .unwrap_or(&self.rejected);
        let us = elapsed.as_micros() as u64;
        stats.count.fetch_add(1, Ordering::Relaxed);
        if is_error {
            stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        stats.max_us.fetch_max(us, Ordering::Relaxed);
        stats.sum_us.fetch_add(us, Ordering::Relaxed);
        let bucket = if us <= 1 {
            0
        } else {
            ((us as f64).log2() * STEPS_PER_DOUBLING) as usize
        };
        stats.buckets[bucket.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_opened(&self) {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        self.connections_total.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.connections_open.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn accept_failed(&self) {
        self.accept_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn accept_errors(&self) -> u64 {
        self.accept_errors.load(Ordering::Relaxed)
    }

    /// Counts one failed Authenticate; returns the count so far.
    pub fn auth_failed(&self) -> u64 {
        self.auth_failures.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn auth_failures(&self) -> u64 {
        self.auth_failures.load(Ordering::Relaxed)
    }

    /// Counts a connection refused for the cap on unauthenticated ones; returns the count.
    pub fn refuse_unauthenticated(&self) -> u64 {
        self.refused_unauthenticated.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Counts a connection refused near the open-file limit; returns the count.
    pub fn refuse_for_descriptors(&self) -> u64 {
        self.refused_descriptors.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn auth_timed_out(&self) {
        self.auth_timeouts.fetch_add(1, Ordering::Relaxed);
    }

    /// (refused: too many unauthenticated, refused: near the open-file limit, closed for
    /// not authenticating in time).
    pub fn refusals(&self) -> (u64, u64, u64) {
        (
            self.refused_unauthenticated.load(Ordering::Relaxed),
            self.refused_descriptors.load(Ordering::Relaxed),
            self.auth_timeouts.load(Ordering::Relaxed),
        )
    }

    pub fn connections_open(&self) -> u64 {
        self.connections_open.load(Ordering::Relaxed)
    }

    pub fn connections_total(&self) -> u64 {
        self.connections_total.load(Ordering::Relaxed)
    }

    /// Latency histograms of every method that has served a request, at the bounds `le`
    /// (seconds, ascending): cumulative counts of requests at most that long (a request
    /// counts under a bound once its whole bucket lies within it), the count and the sum.
    pub fn histograms(&self, le: &[f64]) -> Vec<(&'static str, Histogram)> {
        self.served()
            .map(|(name, stats, counts, count)| {
                let cumulative = le
                    .iter()
                    .map(|bound| {
                        let within = counts
                            .iter()
                            .enumerate()
                            .take_while(|(i, _)| {
                                let upper_us = 2f64.powf((*i + 1) as f64 / STEPS_PER_DOUBLING);
                                upper_us / 1e6 <= *bound
                            })
                            .map(|(_, n)| n)
                            .sum();
                        (*bound, within)
                    })
                    .collect();
                let sum = stats.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
                let histogram = Histogram {
                    cumulative,
                    count,
                    sum,
                };
                (name, histogram)
            })
            .collect()
    }

    /// Every method that has served a request, with its bucket counts and their total.
    fn served(&self) -> impl Iterator<Item = (&'static str, &MethodStats, Vec<u64>, u64)> + '_ {
        self.methods
            .iter()
            .map(|(name, stats)| (*name, stats))
            .chain(std::iter::once((REJECTED, &self.rejected)))
            .filter_map(|(name, stats)| {
                let counts: Vec<u64> = stats
                    .buckets
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect();
                let total: u64 = counts.iter().sum();
                (total > 0).then_some((name, stats, counts, total))
            })
    }

    /// Figures of every method that has served at least one request.
    pub fn methods(&self) -> BTreeMap<Text, MethodFigures> {
        self.served()
            .map(|(name, stats, counts, total)| {
                let figures = MethodFigures {
                    count: stats.count.load(Ordering::Relaxed),
                    errors: stats.errors.load(Ordering::Relaxed),
                    p50_us: stats.percentile(&counts, total, 0.50),
                    p99_us: stats.percentile(&counts, total, 0.99),
                    max_us: stats.max_us.load(Ordering::Relaxed),
                };
                (name.into(), figures)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_land_near_the_recorded_values() {
        let metrics = Metrics::new(&["Get"]);
        for _ in 0..90 {
            metrics.record(Some("Get"), Duration::from_micros(20), false);
        }
        for _ in 0..10 {
            metrics.record(Some("Get"), Duration::from_micros(2000), true);
        }
        let figures = &metrics.methods()["Get"];
        assert_eq!(figures.count, 100);
        assert_eq!(figures.errors, 10);
        assert!((20..=25).contains(&figures.p50_us), "{}", figures.p50_us);
        assert!(
            (2000..=2400).contains(&figures.p99_us),
            "{}",
            figures.p99_us
        );
        assert_eq!(figures.max_us, 2000);
    }
}
