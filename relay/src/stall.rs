//! "No progress for this long": the one deadline every byte path uses.
//!
//! Two faces of one rule, for the two ways progress is seen:
//! - [`Stall`]: one poller sees both the progress and the waiting (a relay's idle
//!   timeout, a client's writes under `limits.send_timeout`, a request body under
//!   `limits.body_timeout`). Progress only forgets when the wait began (no clock
//!   read, no timer touched); the first wait after it reads the clock once. The
//!   timer is allocated on the first wait and re-armed only when it fires before the
//!   deadline has moved on, so a busy stream costs a branch per poll.
//! - [`Stamp`]: progress is seen by other tasks than the one that waits (a client
//!   connection's requests, each in its own task, and the connection's driver that
//!   closes it when they have all been quiet too long). The stamp is an atomic
//!   count of milliseconds; the waiter sleeps to the deadline it implies and looks
//!   again when it wakes.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// A deadline `limit` after the start of the current wait; progress ends the wait.
#[derive(Debug)]
pub struct Stall {
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    /// When the current wait began (`None`: progress since the last wait).
    since: Option<Instant>,
}

impl Stall {
    pub fn new(limit: Duration) -> Stall {
        Stall {
            limit,
            timer: None,
            since: None,
        }
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The operation made progress: a later wait starts anew.
    pub fn progressed(&mut self) {
        self.since = None;
    }

    /// The operation waits: resolves once it has waited `limit` with no progress
    /// (the waker is registered either way).
    pub fn poll_waiting(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = *self.since.get_or_insert_with(Instant::now) + self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        // The timer may be armed for an earlier wait's deadline: when it fires
        // before this one, it is moved on and polled again.
        while timer.as_mut().poll(cx).is_ready() {
            if timer.deadline() >= deadline {
                return Poll::Ready(());
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    }
}

/// When something last moved, written by any task and read by the one that waits.
#[derive(Debug)]
pub struct Stamp {
    origin: Instant,
    /// Milliseconds after `origin`.
    ms: AtomicU64,
}

impl Default for Stamp {
    fn default() -> Stamp {
        Stamp::new()
    }
}

impl Stamp {
    /// Stamped now.
    pub fn new() -> Stamp {
        Stamp {
            origin: Instant::now(),
            ms: AtomicU64::new(0),
        }
    }

    /// Something moved now.
    pub fn touch(&self) {
        self.touch_at(Instant::now());
    }

    /// Something moved at `now` (a clock read the caller made anyway).
    pub fn touch_at(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.origin).as_millis())
            .unwrap_or(u64::MAX);
        self.ms.store(ms, Ordering::Release);
    }

    /// When something last moved (to the millisecond).
    pub fn at(&self) -> Instant {
        self.origin + Duration::from_millis(self.ms.load(Ordering::Acquire))
    }

    /// Resolves once nothing has moved for `limit` while `waiting()` holds; while it
    /// does not, the wait starts again a whole `limit` later.
    pub async fn quiet_for(&self, limit: Duration, waiting: impl Fn() -> bool) {
        loop {
            let deadline = if waiting() {
                let deadline = self.at() + limit;
                if Instant::now() >= deadline {
                    return;
                }
                deadline
            } else {
                Instant::now() + limit
            };
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn waits(t: &mut Stall) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(t.poll_waiting(cx)))
            .await
            .is_pending()
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_fires_only_after_the_limit_without_progress() {
        let mut t = Stall::new(Duration::from_secs(5));
        let start = Instant::now();
        // Waiting, with progress every 4 s: never fires, though the timer armed
        // for the first wait has passed.
        for _ in 0..5 {
            assert!(waits(&mut t).await);
            tokio::time::sleep(Duration::from_secs(4)).await;
            t.progressed();
        }
        // Waiting and no progress: fires at the limit after the wait began.
        let began = Instant::now();
        std::future::poll_fn(|cx| t.poll_waiting(cx)).await;
        assert_eq!(Instant::now() - began, Duration::from_secs(5));
        assert!(start.elapsed() >= Duration::from_secs(25));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_without_progress_keeps_its_first_deadline() {
        let mut t = Stall::new(Duration::from_secs(5));
        let began = Instant::now();
        assert!(waits(&mut t).await);
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Still waiting, no progress: the deadline does not move.
        std::future::poll_fn(|cx| t.poll_waiting(cx)).await;
        assert_eq!(Instant::now() - began, Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stamp_counts_from_the_last_touch_while_waiting() {
        let stamp = std::sync::Arc::new(Stamp::new());
        let limit = Duration::from_secs(10);
        let waiting = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let waiter = tokio::spawn({
            let (stamp, waiting) = (stamp.clone(), waiting.clone());
            async move {
                stamp
                    .quiet_for(limit, || waiting.load(Ordering::Relaxed))
                    .await;
                Instant::now()
            }
        });
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            stamp.touch();
        }
        // Not waiting: no deadline at all, however long.
        waiting.store(false, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiter.is_finished(), "touched, then not waiting");
        stamp.touch();
        waiting.store(true, Ordering::Relaxed);
        let last = Instant::now();
        let fired = waiter.await.expect("join");
        assert_eq!(fired - last, limit);
    }
}
