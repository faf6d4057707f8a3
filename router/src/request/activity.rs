//! What a client connection is doing, so that one with nothing to do is closed.
//!
//! Each request holds an [`ActiveRequest`] until its response body has been sent (or
//! the client left). A connection is quiet when it holds none; [`Activity::idle`]
//! resolves when it has been quiet too long: `limits.header_read_timeout` from its
//! start if it never began a request (silent sockets, h1/h2 detection, an h2
//! connection that opens no stream), `limits.idle_timeout` since its last request
//! otherwise (h1 or h2 keep-alive). That one rule bounds every quiet state of every
//! connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// One client connection's requests in flight and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    /// Some request has begun: the first-request deadline no longer applies.
    started: AtomicBool,
    /// Milliseconds since `origin` when the connection last had a request end.
    last_ms: AtomicU64,
    origin: Instant,
    changed: Notify,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            last_ms: AtomicU64::new(0),
            origin: Instant::now(),
            changed: Notify::new(),
        })
    }

    /// A request starts; it is active until the guard drops.
    pub fn begin(self: &Arc<Self>) -> ActiveRequest {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.started.store(true, Ordering::Relaxed);
        ActiveRequest(self.clone())
    }

    /// Since when the connection has had no request in flight (`None`: it has one).
    pub fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0)
            .then(|| self.origin + Duration::from_millis(self.last_ms.load(Ordering::Acquire)))
    }

    /// Resolves once the connection has had no request in flight for `limit`, or,
    /// before its first request, for `first` from its start.
    pub async fn idle(&self, first: Duration, limit: Duration) {
        loop {
            let limit = if self.started.load(Ordering::Relaxed) {
                limit
            } else {
                first
            };
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match self.idle_since() {
                Some(since) => {
                    let deadline = since + limit;
                    if Instant::now() >= deadline {
                        return;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until(deadline) => {}
                        _ = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// A request in flight on its connection (see [`Activity`]).
#[derive(Debug)]
pub struct ActiveRequest(Arc<Activity>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let a = &self.0;
        let ms = u64::try_from(a.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        a.last_ms.store(ms, Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
        a.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_request_and_never_while_one_is_in_flight() {
        let a = Activity::new();
        let (first, idle) = (Duration::from_secs(2), Duration::from_secs(10));
        // A connection that never sends anything is cut `first` after its start.
        let started = Instant::now();
        a.idle(first, idle).await;
        assert_eq!(started.elapsed(), first);

        let req = a.begin();
        let waiter = tokio::spawn({
            let a = a.clone();
            async move {
                a.idle(first, idle).await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiter.is_finished(), "a request in flight is not idle");
        let ended = Instant::now();
        drop(req);
        assert_eq!(waiter.await.expect("join") - ended, idle);
    }
}
