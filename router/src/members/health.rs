//! Whether a member may take new requests: active checks, passive ejection, and the
//! states they move a member through.
//!
//! Endpoints are announced before their gear starts and withdrawn only after it died,
//! and nothing is sent when a gear stops or idles (routing-spi §3), so the router finds
//! out for itself:
//!
//! - **Active checks**: every member has one small task that sends an HTTP `GET` of
//!   `health.path` (or, for non-HTTP and TLS members, opens a TCP connection) every
//!   `health.interval` ± `health.jitter`. `rise` passes in a row bring a member up,
//!   `fall` failures in a row take it down. A new member starts [`Health::Unknown`] and
//!   gets no traffic until its first check passes (`health.gate_new`). The first checks
//!   of the members loaded at start-up are spread over one interval, so 10k members
//!   cost 10k/interval small connections per second, never a burst.
//! - **Passive ejection**: `health.passive_failures` connect failures or resets in a
//!   row take a member down at once, between checks; the checks then bring it back
//!   after `rise` passes (a down member is probed even when active checks are off;
//!   until then its checker sleeps without waking).
//!
//! State lives in the member's [`Tracker`], held by its [`Member`](super::Member)
//! (outside the route table), so it survives table swaps. Transitions use compare-and-swap: a check that
//! finished after a passive ejection cannot undo the ejection with a stale result.
//!
//! This module is the state and its rules, with no I/O: a check is made by
//! [`super::probe`], scheduled by [`super::checker`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use super::probe::{Check, Outcome, Probe};
use super::warm::{Warming, Warmup};
use crate::metrics::HealthMetrics;

/// What the router believes about a member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum Health {
    /// New and not checked yet.
    #[default]
    Unknown = 0,
    Up = 1,
    Down = 2,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
        }
    }

    fn from_u8(v: u8) -> Health {
        match v {
            1 => Health::Up,
            2 => Health::Down,
            _ => Health::Unknown,
        }
    }
}

/// A member's health, readable on the request path with one relaxed load.
#[derive(Debug)]
pub struct HealthCell(AtomicU8);

impl HealthCell {
    pub fn new(h: Health) -> HealthCell {
        HealthCell(AtomicU8::new(h as u8))
    }

    pub fn get(&self) -> Health {
        Health::from_u8(self.0.load(Ordering::Relaxed))
    }

    /// Moves `from` → `to`; false if someone else changed it first.
    pub fn transition(&self, from: Health, to: Health) -> bool {
        self.0
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

/// `health.*`, resolved.
#[derive(Clone, Debug)]
pub struct HealthSettings {
    /// Active checks on every member; when off, only down members are probed.
    pub active: bool,
    /// How one check is made.
    pub check: Check,
    pub interval: Duration,
    pub jitter: Duration,
    pub rise: u32,
    pub fall: u32,
    /// New members wait for their first passing check.
    pub gate_new: bool,
    /// Connect failures or resets in a row that eject a member at once; 0 = never.
    pub passive_failures: u32,
    /// `upstream.slow_start`: a member that comes up takes its share over this
    /// long (see [`super::warm`]); zero: at once.
    pub slow_start: Duration,
}

impl Default for HealthSettings {
    /// The defaults of `health.*` (the configuration's defaults are read from here).
    fn default() -> HealthSettings {
        HealthSettings {
            active: true,
            check: Check::default(),
            interval: Duration::from_secs(5),
            jitter: Duration::from_millis(500),
            rise: 2,
            fall: 3,
            gate_new: true,
            passive_failures: 3,
            slow_start: Duration::ZERO,
        }
    }
}

/// One member's health: read by the request path, moved by its checks and by
/// passive failures. Dropped with its member, which ends its checker.
pub struct Tracker {
    addr: Arc<str>,
    probe: Probe,
    cell: HealthCell,
    /// Connect failures and resets in a row (passive detection).
    failures: AtomicU32,
    /// Wakes the checker when the member is ejected or freed: with active checks
    /// off, the checker sleeps on this instead of waking every interval.
    wake: Arc<Notify>,
    /// Shared by every member; a reload swaps it (see [`SharedSettings`]).
    settings: SharedSettings,
    metrics: HealthMetrics,
    /// The last transitions, newest last (the status page).
    history: crate::ring::Ring<Transition>,
    /// Slow start: its share while it warms up after coming up.
    warmup: Warmup,
    /// Its first `Unknown → Up` warms it up too (announced after start-up).
    new: bool,
}

/// How many transitions a member remembers.
const HISTORY: usize = 16;

/// One health transition and why it happened.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Transition {
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub from: &'static str,
    pub to: &'static str,
    pub reason: String,
}

/// The health settings every member reads, swapped whole by a reload: checkers take
/// the new interval at their next sleep, thresholds apply at the next result.
pub type SharedSettings = Arc<arc_swap::ArcSwap<HealthSettings>>;

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("addr", &self.addr)
            .field("health", &self.get())
            .finish()
    }
}

/// What a checker remembers between checks: its streak and the state it last saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streak {
    passes: u32,
    fails: u32,
    seen: Health,
}

impl Tracker {
    pub fn new(
        addr: Arc<str>,
        probe: Probe,
        initial: Health,
        settings: SharedSettings,
        metrics: HealthMetrics,
    ) -> Tracker {
        metrics.set_up(&addr, initial == Health::Up);
        Tracker {
            warmup: Warmup::default(),
            new: false,
            addr,
            probe,
            cell: HealthCell::new(initial),
            failures: AtomicU32::new(0),
            wake: Arc::new(Notify::new()),
            settings,
            metrics,
            history: crate::ring::Ring::new(HISTORY),
        }
    }

    pub fn get(&self) -> Health {
        self.cell.get()
    }

    /// A member announced after start-up: it warms up when it first comes up
    /// (at once if it starts up).
    pub fn announced_later(mut self) -> Tracker {
        self.new = true;
        if self.cell.get() == Health::Up {
            self.warm_up();
        }
        self
    }

    fn warm_up(&self) {
        if !self.settings.load().slow_start.is_zero() {
            self.warmup.begin();
        }
    }

    /// Its slow-start share of a warm member's traffic; `None` (the usual
    /// case, one relaxed load): all of it.
    #[inline]
    pub fn share(&self) -> Option<f64> {
        self.warmup.share(|| self.settings.load().slow_start)
    }

    #[cfg(test)]
    pub(crate) fn warmup(&self) -> &Warmup {
        &self.warmup
    }

    /// Its warm-up as the admin API shows it.
    pub fn warming(&self) -> Option<Warming> {
        self.warmup.warming(self.settings.load().slow_start)
    }

    pub fn addr(&self) -> &Arc<str> {
        &self.addr
    }

    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    pub fn settings(&self) -> Arc<HealthSettings> {
        self.settings.load_full()
    }

    pub fn metrics(&self) -> &HealthMetrics {
        &self.metrics
    }

    /// The last transitions, oldest first.
    pub fn history(&self) -> Vec<Transition> {
        self.history.list()
    }

    fn remember(&self, from: Health, to: Health, reason: String) {
        self.history.push(Transition {
            at: crate::ring::unix_now(),
            from: from.as_str(),
            to: to.as_str(),
            reason,
        });
    }

    /// What the checker waits on when it has nothing to probe.
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// A connect failure or reset: enough in a row eject the member at once.
    pub fn record_failure(&self) {
        let threshold = self.settings.load().passive_failures;
        if threshold == 0 {
            return;
        }
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < threshold {
            return;
        }
        let was = self.cell.get();
        if was != Health::Down && self.cell.transition(was, Health::Down) {
            self.failures.store(0, Ordering::Relaxed);
            self.metrics.ejected("passive");
            self.wake.notify_one();
            self.metrics.set_up(&self.addr, false);
            self.remember(
                was,
                Health::Down,
                format!("{n} connection failures in a row"),
            );
            tracing::warn!(member = %self.addr, failures = n, "member is down (connection failures)");
        }
    }

    /// A response arrived: the failure streak is over.
    pub fn record_success(&self) {
        // Load first: no write (and no cache-line bounce) on the usual path.
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Before a check: a state changed behind the checker's back (a passive
    /// ejection) starts the streak afresh. Returns the state now.
    pub fn begin(&self, streak: &mut Streak) -> Health {
        let now = self.cell.get();
        if now != streak.seen {
            *streak = Streak {
                seen: now,
                ..Streak::default()
            };
        }
        now
    }

    /// After a check: applies its outcome. A new member comes up on its first pass,
    /// a down one after `rise` passes in a row; `fall` failures in a row take it
    /// down. Returns the transition made, if any. Compare-and-swap: a check that
    /// finished after a passive ejection cannot undo it with a stale view.
    pub fn apply(&self, streak: &mut Streak, outcome: &Outcome) -> Option<(Health, Health)> {
        if let Outcome::Inconclusive(_) = outcome {
            return None;
        }
        let seen = streak.seen;
        let now = self.cell.get();
        if now != seen {
            // Moved while the check ran (a passive ejection): its result is stale.
            *streak = Streak {
                seen: now,
                ..Streak::default()
            };
            return None;
        }
        let mut moved = None;
        match outcome {
            Outcome::Pass => {
                (streak.passes, streak.fails) = (streak.passes + 1, 0);
                let up = match seen {
                    Health::Unknown => true,
                    Health::Down => streak.passes >= self.settings.load().rise,
                    Health::Up => false,
                };
                if up && self.cell.transition(seen, Health::Up) {
                    if seen == Health::Down || self.new {
                        self.warm_up();
                    }
                    if seen == Health::Down {
                        self.metrics.recoveries.inc();
                        tracing::info!(member = %self.addr, "member is up again");
                    }
                    self.metrics.set_up(&self.addr, true);
                    let reason = match seen {
                        Health::Down => format!("{} checks passed in a row", streak.passes),
                        _ => "first check passed".to_string(),
                    };
                    self.remember(seen, Health::Up, reason);
                    moved = Some((seen, Health::Up));
                }
            }
            Outcome::Inconclusive(_) => {}
            Outcome::Fail(why) => {
                (streak.passes, streak.fails) = (0, streak.fails + 1);
                if seen != Health::Down
                    && streak.fails >= self.settings.load().fall
                    && self.cell.transition(seen, Health::Down)
                {
                    if seen == Health::Up {
                        self.metrics.ejected("check");
                        tracing::warn!(member = %self.addr, reason = why, "member is down (health check)");
                    }
                    self.metrics.set_up(&self.addr, false);
                    self.remember(
                        seen,
                        Health::Down,
                        format!("{} checks failed in a row: {why}", streak.fails),
                    );
                    moved = Some((seen, Health::Down));
                }
            }
        }
        streak.seen = self.cell.get();
        moved
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.metrics.forget(&self.addr);
        self.wake.notify_one();
    }
}

/// The interval ± jitter, so that checks started together drift apart.
pub fn next_delay(s: &HealthSettings) -> Duration {
    let jitter = s.jitter.min(s.interval / 2);
    if jitter.is_zero() {
        return s.interval;
    }
    let span = jitter.as_micros() as u64 * 2;
    (s.interval - jitter) + Duration::from_micros(fastrand::u64(..span.max(1)))
}

/// When the first check of a member runs: spread over one interval for members
/// loaded at start-up, almost at once for members announced later (they get no
/// traffic until it passes).
pub fn first_delay(s: &HealthSettings, at_startup: bool) -> Duration {
    let span = if at_startup {
        s.interval
    } else {
        s.interval.min(Duration::from_millis(100))
    };
    Duration::from_micros(fastrand::u64(..(span.as_micros() as u64).max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(initial: Health, settings: HealthSettings) -> Tracker {
        Tracker::new(
            Arc::from("10.0.0.1:80"),
            Probe::default(),
            initial,
            Arc::new(arc_swap::ArcSwap::from_pointee(settings)),
            HealthMetrics::detached(),
        )
    }

    #[test]
    fn transitions_are_compare_and_swap() {
        let h = HealthCell::new(Health::Up);
        assert!(h.transition(Health::Up, Health::Down));
        // A stale view (still "up") cannot move it.
        assert!(!h.transition(Health::Up, Health::Down));
        assert!(!h.transition(Health::Unknown, Health::Up));
        assert_eq!(h.get(), Health::Down);
    }

    #[test]
    fn a_new_member_comes_up_on_its_first_pass_and_goes_down_after_fall() {
        let t = tracker(Health::Unknown, HealthSettings::default());
        let mut streak = Streak::default();
        assert_eq!(t.begin(&mut streak), Health::Unknown);
        assert_eq!(
            t.apply(&mut streak, &Outcome::Pass),
            Some((Health::Unknown, Health::Up))
        );
        for _ in 0..2 {
            t.begin(&mut streak);
            assert_eq!(t.apply(&mut streak, &Outcome::Fail("status")), None);
        }
        t.begin(&mut streak);
        assert_eq!(
            t.apply(&mut streak, &Outcome::Fail("status")),
            Some((Health::Up, Health::Down)),
            "the third failure in a row (fall 3)"
        );
        t.begin(&mut streak);
        assert_eq!(t.apply(&mut streak, &Outcome::Pass), None, "rise is 2");
        t.begin(&mut streak);
        assert_eq!(t.apply(&mut streak, &Outcome::Fail("reset")), None);
        t.begin(&mut streak);
        assert_eq!(
            t.apply(&mut streak, &Outcome::Pass),
            None,
            "the streak restarted"
        );
        t.begin(&mut streak);
        assert_eq!(
            t.apply(&mut streak, &Outcome::Pass),
            Some((Health::Down, Health::Up))
        );
    }

    #[test]
    fn a_passive_ejection_restarts_the_streak_and_a_stale_pass_cannot_undo_it() {
        let t = tracker(Health::Up, HealthSettings::default());
        let mut streak = Streak::default();
        assert_eq!(t.begin(&mut streak), Health::Up);
        // The check is in flight when three requests fail to connect.
        for _ in 0..3 {
            t.record_failure();
        }
        assert_eq!(t.get(), Health::Down);
        // The check's pass was made against the old state: it cannot move it.
        assert_eq!(t.apply(&mut streak, &Outcome::Pass), None);
        assert_eq!(t.get(), Health::Down);
        t.begin(&mut streak);
        t.apply(&mut streak, &Outcome::Pass);
        t.begin(&mut streak);
        assert_eq!(
            t.apply(&mut streak, &Outcome::Pass),
            Some((Health::Down, Health::Up)),
            "rise passes counted from the ejection"
        );
    }

    #[test]
    fn an_inconclusive_check_moves_nothing() {
        let t = tracker(Health::Up, HealthSettings::default());
        let mut streak = Streak::default();
        t.begin(&mut streak);
        t.apply(&mut streak, &Outcome::Fail("status"));
        for _ in 0..10 {
            t.begin(&mut streak);
            assert_eq!(
                t.apply(&mut streak, &Outcome::Inconclusive("local_resources")),
                None
            );
        }
        assert_eq!(t.get(), Health::Up);
        t.begin(&mut streak);
        assert_eq!(
            t.apply(&mut streak, &Outcome::Fail("status")),
            None,
            "the streak is 2 of 3: inconclusive checks neither add nor reset"
        );
    }

    #[test]
    fn passive_failures_need_a_streak_and_zero_turns_them_off() {
        let t = tracker(Health::Up, HealthSettings::default());
        t.record_failure();
        t.record_failure();
        t.record_success();
        t.record_failure();
        t.record_failure();
        assert_eq!(t.get(), Health::Up, "a success breaks the streak");
        t.record_failure();
        assert_eq!(t.get(), Health::Down);
        let off = tracker(
            Health::Up,
            HealthSettings {
                passive_failures: 0,
                ..HealthSettings::default()
            },
        );
        for _ in 0..10 {
            off.record_failure();
        }
        assert_eq!(off.get(), Health::Up);
    }

    #[test]
    fn delays_stay_in_bounds() {
        let s = HealthSettings::default();
        for _ in 0..1000 {
            let d = next_delay(&s);
            assert!(
                d >= s.interval - s.jitter && d <= s.interval + s.jitter,
                "{d:?}"
            );
            assert!(first_delay(&s, true) < s.interval);
            assert!(first_delay(&s, false) < Duration::from_millis(100));
        }
    }
}
