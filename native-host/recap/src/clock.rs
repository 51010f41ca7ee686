//! The clock native replay sessions are timed by (`shared` has none: the browser brings its own).

use std::time::Instant;

/// Milliseconds since the clock was made, from the monotonic `Instant`.
pub struct MonotonicClock(Instant);

impl MonotonicClock {
    pub fn new() -> Self {
        MonotonicClock(Instant::now())
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl shared::replay::Clock for MonotonicClock {
    fn now_ms(&self) -> f64 {
        self.0.elapsed().as_secs_f64() * 1e3
    }
}
