//! Slow start (`upstream.slow_start`, off by default): a member that comes up
//! (back from down, or announced after the router started and passing its
//! first check) takes a share of a warm member's traffic that grows linearly
//! from [`FLOOR`] to all of it over the window, as haproxy's `slowstart` does.
//! A gear that just started has cold caches, a JIT not yet warm and a pool of
//! database connections still opening; sent its full share at once it answers
//! slowly or falls over again.
//!
//! How a share is taken ([`Warmup::share`], applied by `table::balance`): each
//! pick draws one number in [0, 1) when it meets a warming member, and the
//! member is a candidate only if the draw is below its share; a member not a
//! candidate leaves the pick to the others (round robin goes on to the next,
//! p2c takes the other of its two or the least loaded of the rest). So a member
//! at share `s` gets `s` of what it would get warm. When no other member can
//! take the request, a warming member takes it whatever its share: slow start
//! moves traffic, it never refuses it. Sticky sessions' new clients are placed
//! by the same pick; a client already pinned stays where it is.
//!
//! The members loaded at start-up start warm (every member is new then, and
//! there is nothing to move their traffic to). A reload that turns slow start
//! off ends every warm-up at once; one that turns it on applies from the next
//! transition.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The share a member has the moment it comes up: a little traffic at once,
/// so it is seen to work (haproxy starts from one weight unit).
pub const FLOOR: f64 = 0.05;

/// When a member's warm-up began, if it is warming.
#[derive(Debug, Default)]
pub struct Warmup {
    /// Microseconds since [`epoch`] plus one when the warm-up began; 0: warm.
    began: AtomicU64,
}

/// A member's warm-up as the admin API shows it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Warming {
    /// The share of a warm member's traffic it takes now, in percent.
    pub share_percent: f64,
    /// Until it takes all of it.
    pub remaining_seconds: f64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Microseconds since [`epoch`], plus 2^40 (12 days) so that a moment
/// before the epoch is a number too (tests).
fn micros_now() -> u64 {
    u64::try_from(epoch().elapsed().as_micros())
        .unwrap_or(u64::MAX >> 1)
        .saturating_add(1 << 40)
}

impl Warmup {
    /// The warm-up starts now (the member just came up).
    pub fn begin(&self) {
        self.began.store(micros_now() + 1, Ordering::Relaxed);
    }

    /// The warm-up began `ago` (tests).
    #[cfg(test)]
    pub(crate) fn began_ago(&self, ago: Duration) {
        let ago = u64::try_from(ago.as_micros()).unwrap_or(u64::MAX);
        self.began
            .store(micros_now().saturating_sub(ago) + 1, Ordering::Relaxed);
    }

    /// The share of a warm member's traffic the member takes under a window
    /// of `window` (zero: slow start off): `None` when warm, the usual case,
    /// in one relaxed load.
    #[inline]
    pub fn share(&self, window: impl FnOnce() -> Duration) -> Option<f64> {
        let began = self.began.load(Ordering::Relaxed);
        if began == 0 {
            return None;
        }
        self.share_at(began, window(), micros_now())
    }

    #[cold]
    fn share_at(&self, began: u64, window: Duration, now: u64) -> Option<f64> {
        let window = window.as_micros() as f64;
        let elapsed = now.saturating_sub(began - 1) as f64;
        if window <= 0.0 || elapsed >= window {
            // Warm now: the next pick pays one load again.
            let _ = self
                .began
                .compare_exchange(began, 0, Ordering::Relaxed, Ordering::Relaxed);
            return None;
        }
        Some((elapsed / window).max(FLOOR))
    }

    /// The warm-up as the admin API shows it (`None`: warm).
    pub fn warming(&self, window: Duration) -> Option<Warming> {
        let share = self.share(|| window)?;
        let began = self.began.load(Ordering::Relaxed).saturating_sub(1);
        let elapsed = Duration::from_micros(micros_now().saturating_sub(began));
        Some(Warming {
            share_percent: (share * 1000.0).round() / 10.0,
            remaining_seconds: window.saturating_sub(elapsed).as_secs_f64(),
        })
    }
}

/// One pick's draw: made the first time the pick meets a warming member, the
/// same for every member it meets after (so one pick admits a member or not
/// once, however many times the balancer asks).
#[derive(Default)]
pub struct Draw(std::cell::Cell<Option<f64>>);

impl Draw {
    /// Whether a member at `share` (`None`: warm) is a candidate for this pick.
    #[inline]
    pub fn admits(&self, share: Option<f64>) -> bool {
        match share {
            None => true,
            Some(s) => {
                let d = self.0.get().unwrap_or_else(|| {
                    let d = fastrand::f64();
                    self.0.set(Some(d));
                    d
                });
                d < s
            }
        }
    }
}

impl Draw {
    /// Whether the pick met a warming member (drew at all).
    pub fn met(&self) -> bool {
        self.0.get().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warm_member_has_no_share_and_a_new_warmup_starts_at_the_floor() {
        let w = Warmup::default();
        assert_eq!(w.share(|| Duration::from_secs(30)), None);
        w.begin();
        let s = w.share(|| Duration::from_secs(30)).expect("warming");
        assert!((FLOOR..0.06).contains(&s), "{s}");
        let shown = w.warming(Duration::from_secs(30)).expect("warming");
        assert!(shown.remaining_seconds > 29.0 && shown.remaining_seconds <= 30.0);
    }

    #[test]
    fn the_share_grows_linearly_and_ends_warm() {
        let w = Warmup::default();
        let window = Duration::from_secs(10);
        let began = 1_000_001;
        w.began.store(began, Ordering::Relaxed);
        let at = |secs: f64| began - 1 + (secs * 1e6) as u64;
        assert_eq!(w.share_at(began, window, at(0.1)), Some(FLOOR));
        assert_eq!(w.share_at(began, window, at(5.0)), Some(0.5));
        assert_eq!(w.share_at(began, window, at(9.0)), Some(0.9));
        assert_eq!(w.share_at(began, window, at(10.0)), None);
        assert_eq!(w.began.load(Ordering::Relaxed), 0, "warm: one load again");
    }

    #[test]
    fn slow_start_off_ends_a_warmup() {
        let w = Warmup::default();
        w.begin();
        assert_eq!(w.share(|| Duration::ZERO), None);
        assert_eq!(w.share(|| Duration::from_secs(30)), None, "ended for good");
    }

    #[test]
    fn one_draw_per_pick() {
        let d = Draw::default();
        assert!(d.admits(None));
        let first = d.admits(Some(0.5));
        for _ in 0..10 {
            assert_eq!(d.admits(Some(0.5)), first, "the same draw");
        }
        assert!(!Draw::default().admits(Some(0.0)));
        assert!(Draw::default().admits(Some(1.0)));
    }
}
