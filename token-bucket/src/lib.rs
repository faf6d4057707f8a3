//! The one token bucket of the router: `burst` tokens at most, refilled at
//! `per_second`. An app's `rate_limit` keeps one per client key
//! (`policy::clients`); the log limit keeps one for the lines peers can cause
//! (`log_limit`). Plain data (16 bytes), so a map of a hundred thousand stays
//! small; the caller holds the lock.

use std::time::Instant;

/// How fast a bucket refills and how much it holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: f64,
}

/// Tokens left at an instant.
#[derive(Debug, Clone, Copy)]
pub struct TokenBucket {
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A bucket holding its whole burst at `now`.
    pub fn full(rate: &Rate, now: Instant) -> TokenBucket {
        TokenBucket {
            tokens: rate.burst,
            at: now,
        }
    }

    /// The tokens it holds at `now` (refilled since, up to the burst).
    pub fn level(&self, rate: &Rate, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * rate.per_second).min(rate.burst)
    }

    /// Takes one token at `now`; without one, the seconds until there is one.
    pub fn take(&mut self, rate: &Rate, now: Instant) -> Result<(), f64> {
        self.tokens = self.level(rate, now);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err((1.0 - self.tokens) / rate.per_second)
        }
    }
}

impl TokenBucket {
    /// `n` tokens spent elsewhere (the pair's other router served them):
    /// taken now, down to one burst of debt at most, so that a client that
    /// was served there waits here in proportion, and a burst of counts never
    /// locks it out for longer than a burst takes to refill.
    pub fn spend(&mut self, rate: &Rate, n: f64, now: Instant) {
        self.tokens = (self.level(rate, now) - n).max(-rate.burst);
        self.at = now;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_burst_then_the_rate_and_never_above_the_burst() {
        let rate = Rate {
            per_second: 2.0,
            burst: 3.0,
        };
        let t0 = Instant::now();
        let mut b = TokenBucket::full(&rate, t0);
        assert_eq!((0..10).filter(|_| b.take(&rate, t0).is_ok()).count(), 3);
        assert_eq!(b.take(&rate, t0), Err(0.5));
        let t1 = t0 + Duration::from_millis(500);
        assert!(b.take(&rate, t1).is_ok(), "one token per half second");
        assert!(b.take(&rate, t1).is_err());
        assert_eq!(b.level(&rate, t1 + Duration::from_secs(60)), 3.0);
    }
}
