//! Log lines that a client can cause are rate-limited.
//!
//! The HTTP libraries log at WARN what peers do to them (h2: "remotely-reset streams
//! reached limit" once per rapid-reset connection), and so does the router's own
//! h2 server for a connection it ends for a flood (target `h2_server`). Every such line is an attacker's
//! lever on our disk and our log pipeline, so events from those targets
//! ([`peer_driven`]) share one token bucket: `BURST` lines at once, then `RATE` a
//! second; the rest are dropped and counted ([`LineLimit::suppressed`]). Our own lines
//! about clients are at DEBUG already, and lines about the router itself are never
//! limited.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use token_bucket::{Rate, TokenBucket};

/// Lines a second from peer-driven targets, after the burst.
pub const RATE: f64 = 10.0;
/// Lines let through at once.
pub const BURST: f64 = 50.0;

/// Whether an event's target is a library that logs what peers do.
pub fn peer_driven(target: &str) -> bool {
    target.starts_with("h2") || target.starts_with("hyper") || target.starts_with("rustls")
}

/// The lines peers can cause: one token bucket, and what it dropped.
#[derive(Debug)]
pub struct LineLimit {
    bucket: Mutex<TokenBucket>,
    rate: Rate,
    suppressed: AtomicU64,
}

impl LineLimit {
    pub fn new(per_second: f64, burst: f64) -> LineLimit {
        let rate = Rate { per_second, burst };
        LineLimit {
            bucket: Mutex::new(TokenBucket::full(&rate, Instant::now())),
            rate,
            suppressed: AtomicU64::new(0),
        }
    }

    /// Takes a token at `now` if there is one.
    pub fn allow_at(&self, now: Instant) -> bool {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let allowed = b.take(&self.rate, now).is_ok();
        if !allowed {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
        allowed
    }

    pub fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    /// Lines dropped so far.
    pub fn suppressed(&self) -> u64 {
        self.suppressed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let b = LineLimit::new(10.0, 5.0);
        let t = Instant::now();
        assert_eq!((0..100).filter(|_| b.allow_at(t)).count(), 5, "the burst");
        assert_eq!(b.suppressed(), 95);
        let later = t + Duration::from_secs(1);
        assert_eq!(
            (0..100).filter(|_| b.allow_at(later)).count(),
            5,
            "capped at the burst"
        );
        let tick = later + Duration::from_millis(100);
        assert!(b.allow_at(tick), "one token per 100 ms");
        assert!(!b.allow_at(tick));
    }

    #[test]
    fn only_libraries_that_log_what_peers_do_are_limited() {
        assert!(peer_driven("h2::proto::streams::recv"));
        assert!(peer_driven("h2_server"));
        assert!(peer_driven("hyper::proto::h1::conn"));
        assert!(!peer_driven("router::startup"));
        assert!(!peer_driven("spi_consumer::consumer"));
        assert!(!peer_driven("access"));
    }
}
