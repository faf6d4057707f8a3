//! The checker of one member: one small task that sleeps, checks, and applies the
//! outcome to the member's [`Tracker`], until the member is gone from every table.
//!
//! With `health.checks` off it sleeps on the tracker's wake-up instead, and only
//! probes a member that a passive ejection took down (until `rise` passes bring it
//! back). The check itself is a parameter, so the state machine and its timing are
//! unit-tested with a paused clock and scripted outcomes.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Instant;

use super::health::{self, Health, Streak, Tracker};
use super::probe::{self, Outcome, Probe};

/// Runs the checker of `member` with real checks ([`probe::check`]).
pub async fn run(member: Weak<Tracker>, first: std::time::Duration) {
    let Some(settings) = member.upgrade().map(|t| t.settings()) else {
        return;
    };
    run_with(member, first, move |addr, probe| {
        let settings = settings.clone();
        async move { probe::check(&addr, &probe, &settings.check).await }
    })
    .await
}

/// The loop, with `check` making each check.
pub async fn run_with<C, F>(member: Weak<Tracker>, first: std::time::Duration, mut check: C)
where
    C: FnMut(Arc<str>, Probe) -> F,
    F: Future<Output = Outcome>,
{
    let Some(wake) = member.upgrade().map(|t| t.wake()) else {
        return;
    };
    tokio::time::sleep(first).await;
    let mut streak = Streak::default();
    loop {
        let Some(t) = member.upgrade() else { return };
        let now = t.begin(&mut streak);
        let settings = t.settings();
        if !settings.active && now != Health::Down {
            // Nothing to probe until a passive ejection (or the member is freed).
            let notified = wake.notified();
            drop(t);
            notified.await;
            continue;
        }
        let (addr, probe_of) = (t.addr().clone(), t.probe().clone());
        let member_addr = addr.clone();
        let metrics = t.metrics().clone();
        drop(t); // a check must not keep a removed member alive
        let start = Instant::now();
        let outcome = check(addr, probe_of).await;
        match &outcome {
            Outcome::Inconclusive(why) => {
                metrics.skipped();
                tracing::debug!(member = %member_addr, reason = why, "health check not made");
            }
            o => metrics.observe(start.elapsed(), *o == Outcome::Pass),
        }
        let Some(t) = member.upgrade() else { return };
        t.apply(&mut streak, &outcome);
        drop(t);
        tokio::time::sleep(health::next_delay(&settings)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::members::health::HealthSettings;
    use crate::metrics::HealthMetrics;

    /// A tracker and a script of outcomes; every check made is timestamped.
    struct Script {
        tracker: Arc<Tracker>,
        outcomes: Arc<Mutex<VecDeque<Outcome>>>,
        checks: Arc<Mutex<Vec<tokio::time::Instant>>>,
    }

    fn script(initial: Health, settings: HealthSettings, outcomes: Vec<Outcome>) -> Script {
        Script {
            tracker: Arc::new(Tracker::new(
                Arc::from("10.0.0.1:80"),
                Probe::default(),
                initial,
                Arc::new(arc_swap::ArcSwap::from_pointee(settings)),
                HealthMetrics::detached(),
            )),
            outcomes: Arc::new(Mutex::new(outcomes.into())),
            checks: Arc::new(Mutex::new(Vec::new())),
        }
    }

    impl Script {
        fn spawn(&self, first: Duration) -> tokio::task::JoinHandle<()> {
            let (outcomes, checks) = (self.outcomes.clone(), self.checks.clone());
            tokio::spawn(run_with(
                Arc::downgrade(&self.tracker),
                first,
                move |_, _| {
                    checks
                        .lock()
                        .expect("lock")
                        .push(tokio::time::Instant::now());
                    let next = outcomes
                        .lock()
                        .expect("lock")
                        .pop_front()
                        .unwrap_or(Outcome::Pass);
                    async move { next }
                },
            ))
        }

        fn checks(&self) -> usize {
            self.checks.lock().expect("lock").len()
        }
    }

    fn steady() -> HealthSettings {
        HealthSettings {
            jitter: Duration::ZERO,
            ..HealthSettings::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn checks_run_every_interval_and_move_the_member_through_its_states() {
        let fail = Outcome::Fail("status");
        let s = script(
            Health::Unknown,
            steady(),
            vec![
                Outcome::Pass,
                fail.clone(),
                fail.clone(),
                fail,
                Outcome::Pass,
            ],
        );
        let task = s.spawn(Duration::from_millis(50));
        tokio::time::sleep(Duration::from_millis(49)).await;
        assert_eq!(s.checks(), 0, "the first check waits its delay");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(s.tracker.get(), Health::Up, "up on the first pass");
        // Three failures 5 s apart (fall 3), then one pass (rise 2: still down).
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert_eq!(s.checks(), 4);
        assert_eq!(s.tracker.get(), Health::Down);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(s.tracker.get(), Health::Down, "one pass of rise 2");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(s.tracker.get(), Health::Up, "the second pass");
        let times = s.checks.lock().expect("lock").clone();
        for pair in times.windows(2) {
            assert_eq!(pair[1] - pair[0], Duration::from_secs(5), "no jitter set");
        }
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn with_checks_off_the_checker_sleeps_until_an_ejection_then_brings_it_back() {
        let s = script(
            Health::Up,
            HealthSettings {
                active: false,
                ..steady()
            },
            vec![Outcome::Fail("connect"), Outcome::Pass, Outcome::Pass],
        );
        let task = s.spawn(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(s.checks(), 0, "an up member is not probed with checks off");
        for _ in 0..3 {
            s.tracker.record_failure();
        }
        assert_eq!(s.tracker.get(), Health::Down);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(s.checks(), 1, "woken at once by the ejection");
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(s.checks(), 3);
        assert_eq!(s.tracker.get(), Health::Up, "rise 2 after the failed probe");
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(s.checks(), 3, "asleep again once up");
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn the_checker_ends_when_its_member_is_freed() {
        let s = script(
            Health::Up,
            HealthSettings {
                active: false,
                ..steady()
            },
            vec![],
        );
        let task = s.spawn(Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(s.tracker);
        tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .expect("ended when the member was freed")
            .expect("join");
    }
}
