//! Logging at a bounded rate: during an outage the same failure repeats many times a
//! second (every batch, every subscription's retry); the log says it once per interval,
//! with how many were held back, and Metrics counts them all.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One kind of report, admitted at most once per `every`.
pub struct Limited {
    every: Duration,
    /// When the last report was admitted, and how many were held back since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Limited {
    pub const fn new(every: Duration) -> Limited {
        Limited {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Calls `log` with the number of reports held back since the last one, unless one
    /// was logged less than the interval ago.
    pub fn report(&self, log: impl FnOnce(u64)) {
        if let Some(held_back) = self.admit() {
            log(held_back);
        }
    }

    /// Some(number held back since the last report) when this one is to be logged.
    pub fn admit(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state
            .0
            .is_some_and(|at| now.duration_since(at) < self.every)
        {
            state.1 += 1;
            return None;
        }
        let held_back = state.1;
        *state = (Some(now), 0);
        Some(held_back)
    }
}

/// How often a repeated failure is logged.
pub const EVERY: Duration = Duration::from_secs(10);

impl Default for Limited {
    /// Once per [`EVERY`].
    fn default() -> Limited {
        Limited::new(EVERY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_one_report_per_interval_and_counts_the_rest() {
        let limited = Limited::new(Duration::from_secs(3600));
        assert_eq!(limited.admit(), Some(0));
        assert_eq!(limited.admit(), None);
        assert_eq!(limited.admit(), None);
        let open = Limited::new(Duration::ZERO);
        assert_eq!(open.admit(), Some(0));
        assert_eq!(open.admit(), Some(0));
    }
}
