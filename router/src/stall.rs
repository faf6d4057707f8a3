//! A deadline for "no progress for this long", armed only while an I/O operation is
//! pending: the client's writes ([`crate::request::client_io`]) and request bodies
//! ([`crate::upstream::ClientBody`]) use it. Progress disarms it, so the usual path
//! costs one branch; one timer is allocated on the first stall and reused.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

#[derive(Debug)]
pub struct StallTimer {
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl StallTimer {
    pub fn new(limit: Duration) -> StallTimer {
        StallTimer {
            limit,
            timer: None,
            armed: false,
        }
    }

    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The operation made progress.
    pub fn progressed(&mut self) {
        self.armed = false;
    }

    /// The operation is pending: arms the deadline if it is not armed yet, and
    /// resolves once it has passed (the waker is registered either way).
    pub fn pending(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = Instant::now() + self.limit;
        let timer = match (&mut self.timer, self.armed) {
            (Some(t), true) => t,
            (Some(t), false) => {
                t.as_mut().reset(deadline);
                t
            }
            (None, _) => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.armed = true;
        timer.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn fires_only_after_the_limit_without_progress() {
        let mut t = StallTimer::new(Duration::from_secs(5));
        let start = Instant::now();
        // Pending, with progress every 4 s: never fires.
        for _ in 0..5 {
            assert!(
                std::future::poll_fn(|cx| Poll::Ready(t.pending(cx)))
                    .await
                    .is_pending()
            );
            tokio::time::sleep(Duration::from_secs(4)).await;
            t.progressed();
        }
        // Pending and no progress: fires at the limit.
        let armed = Instant::now();
        std::future::poll_fn(|cx| t.pending(cx)).await;
        assert_eq!(Instant::now() - armed, Duration::from_secs(5));
        assert!(start.elapsed() >= Duration::from_secs(25));
    }
}
