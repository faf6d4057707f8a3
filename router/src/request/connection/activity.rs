//! What a client connection is doing, so that one with nothing to do is closed.
//!
//! Each request holds an [`ActiveRequest`] until its response body has been sent (or
//! the client left). A connection is quiet when it holds none; [`Activity::idle`]
//! resolves when it has been quiet too long: `limits.header_read_timeout` from its
//! start if it never began a request (silent sockets, h1/h2 detection, an h2
//! connection that opens no stream), `limits.idle_timeout` since its last request
//! otherwise (h1 or h2 keep-alive). That one rule bounds every quiet state of every
//! connection.
//!
//! A busy h2 connection can be stuck too: a client that never opens its flow-control
//! windows lets the router send response heads but no body bytes, and each of its
//! streams holds a member's slot while the socket itself never blocks (so
//! [`ClientIo`](super::client_io::ClientIo)'s write deadline never fires). Each h2
//! response therefore says when it waits on the client (its head or a body frame
//! was handed over and hyper has not come back for more); [`Activity::stalled`]
//! resolves when some response has been waiting and none has moved for
//! `limits.send_timeout`, and the connection is then closed.
//!
//! Both deadlines count from a [`Stamp`] (the shared face of the one "no progress
//! for this long" deadline, `relay::stall`): requests in their own tasks touch it,
//! the connection's driver waits on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use prometheus::IntGauge;
use relay::stall::Stamp;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

/// A connection's place among its listener's `limits.max_connections`, and its count
/// in `router_open_connections`. Its [`Activity`] holds it, so it lives as long as the
/// connection or a tunnel the connection became (a WebSocket holds its place: a
/// thousand tunnels are a thousand open connections and file descriptors).
#[derive(Debug)]
pub struct ConnectionSlot {
    _slot: OwnedSemaphorePermit,
    /// Its count among its client source's (`limits.max_connections_per_source`).
    _source: per_source::SourceSlot,
    open: IntGauge,
}

impl ConnectionSlot {
    pub fn new(
        slot: OwnedSemaphorePermit,
        source: per_source::SourceSlot,
        open: IntGauge,
    ) -> ConnectionSlot {
        open.inc();
        ConnectionSlot {
            _slot: slot,
            _source: source,
            open,
        }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// One client connection's requests in flight and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    in_flight: AtomicUsize,
    /// Some request has begun: the first-request deadline no longer applies.
    started: AtomicBool,
    /// When the connection began, or last had a request end.
    ended: Stamp,
    /// h2 responses waiting on the client to take more (see the module doc).
    awaiting: AtomicUsize,
    /// When a response last moved on (or began to wait).
    moved: Stamp,
    /// Some request on it was h2.
    h2: AtomicBool,
    /// The router is draining: HTTP/1 responses say `Connection: close`.
    closing: AtomicBool,
    _place: Option<ConnectionSlot>,
}

impl Activity {
    /// `place`: the connection's place on its listener (`None` in unit tests).
    pub fn new(place: Option<ConnectionSlot>) -> Arc<Activity> {
        Arc::new(Activity {
            _place: place,
            in_flight: AtomicUsize::new(0),
            started: AtomicBool::new(false),
            ended: Stamp::new(),
            awaiting: AtomicUsize::new(0),
            moved: Stamp::new(),
            h2: AtomicBool::new(false),
            closing: AtomicBool::new(false),
        })
    }

    /// A request starts; it is active until the guard drops. With `track`, its
    /// response reports when it waits on the client (h2, see the module doc).
    pub fn begin(self: &Arc<Self>, track: bool) -> ActiveRequest {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.started.store(true, Ordering::Relaxed);
        if track {
            self.h2.store(true, Ordering::Relaxed);
        }
        ActiveRequest {
            activity: self.clone(),
            track,
            waiting: false,
            ended_at: None,
        }
    }

    /// Whether the connection speaks h2 (known from its first request).
    pub fn is_h2(&self) -> bool {
        self.h2.load(Ordering::Relaxed)
    }

    /// The router drains: every HTTP/1 response from now on closes the connection
    /// after it, so that a client never sends a request on a connection the router
    /// closes at the same moment (only one left quiet is closed by the router).
    pub fn close_after_responses(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    pub fn closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// Resolves once some response has waited on the client and no response has
    /// moved on for `limit` (see the module doc).
    pub async fn stalled(&self, limit: Duration) {
        self.quiet(None, Some(limit)).await;
    }

    /// Since when the connection has had no request in flight (`None`: it has one).
    pub fn idle_since(&self) -> Option<Instant> {
        (self.in_flight.load(Ordering::Acquire) == 0).then(|| self.ended.at())
    }

    /// Resolves once the connection has had no request in flight for `limit`, or,
    /// before its first request, for `first` from its start.
    pub async fn idle(&self, first: Duration, limit: Duration) {
        self.quiet(Some((first, limit)), None).await;
    }

    /// Resolves on the first of the two deadlines asked for: idle (`idle`:
    /// `(first, limit)`, see [`Activity::idle`]) or stalled (`stall`: the limit, see
    /// [`Activity::stalled`]), and says which.
    ///
    /// One timer for both (every idle connection keeps this future: one sleep
    /// instead of two is 112 bytes less each), re-armed lazily: requests and
    /// responses never wake it (no notification, no new timer per request); when it
    /// fires it reads the state again and, if the connection was busy or its
    /// responses moved meanwhile, sleeps until the deadline the state gives now.
    ///
    /// A plain function returning an `async` block: its captures are the only
    /// copy of the arguments (an idle connection keeps this future).
    #[allow(clippy::manual_async_fn)] // see above: not an `async fn` on purpose
    pub fn quiet(
        &self,
        idle: Option<(Duration, Duration)>,
        stall: Option<Duration>,
    ) -> impl std::future::Future<Output = Quiet> + '_ {
        async move {
            loop {
                let now = Instant::now();
                let mut next: Option<Instant> = None;
                if let Some((first, limit)) = idle {
                    let limit = if self.started.load(Ordering::Relaxed) {
                        limit
                    } else {
                        first
                    };
                    next = Some(match self.idle_since() {
                        Some(since) if now >= since + limit => return Quiet::Idle,
                        Some(since) => since + limit,
                        // Busy: look again once `limit` has passed.
                        None => now + limit,
                    });
                }
                if let Some(limit) = stall {
                    let at = if self.awaiting.load(Ordering::Acquire) > 0 {
                        let at = self.moved.at() + limit;
                        if now >= at {
                            return Quiet::Stalled;
                        }
                        at
                    } else {
                        // Nothing waits on the client: look again a whole `limit` later.
                        now + limit
                    };
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            }
        }
    }
}

/// Which deadline [`Activity::quiet`] resolved on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quiet {
    /// No request in flight for the idle limit.
    Idle,
    /// A response waited on the client and nothing moved for the send limit.
    Stalled,
}

/// A request in flight on its connection (see [`Activity`]).
#[derive(Debug)]
pub struct ActiveRequest {
    activity: Arc<Activity>,
    /// Reports waits on the client (h2 only: on HTTP/1 a client that does not take
    /// its response blocks the socket, which has its own deadline).
    track: bool,
    waiting: bool,
    /// When the request ended, if its completion read the clock already.
    ended_at: Option<Instant>,
}

impl ActiveRequest {
    /// The request ends at `now` (read by its completion): its drop stamps the
    /// connection's last activity with it, not with a clock read of its own.
    pub fn ends_at(&mut self, now: Instant) {
        self.ended_at = Some(now);
    }

    /// The response handed something to the client side (its head, a body frame)
    /// and waits for hyper to come back for more.
    pub fn wait_on_client(&mut self) {
        if self.track && !self.waiting {
            self.waiting = true;
            let a = &self.activity;
            if a.awaiting.fetch_add(1, Ordering::AcqRel) == 0 {
                // The first to wait: the deadline counts from now.
                a.moved.touch();
            }
        }
    }

    /// Whether its connection is draining (see [`Activity::close_after_responses`]).
    pub fn closing(&self) -> bool {
        self.activity.closing()
    }

    /// hyper came back for more: what the response handed over is on its way.
    pub fn client_took(&mut self) {
        if self.waiting {
            self.waiting = false;
            let a = &self.activity;
            a.moved.touch();
            a.awaiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let a = &self.activity;
        if self.waiting {
            a.awaiting.fetch_sub(1, Ordering::AcqRel);
        }
        match self.ended_at {
            Some(at) => a.ended.touch_at(at),
            None => a.ended.touch(),
        }
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_request_and_never_while_one_is_in_flight() {
        let a = Activity::new(None);
        let (first, idle) = (Duration::from_secs(2), Duration::from_secs(10));
        // A connection that never sends anything is cut `first` after its start.
        let started = Instant::now();
        a.idle(first, idle).await;
        assert_eq!(started.elapsed(), first);

        let req = a.begin(false);
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

    #[tokio::test(start_paused = true)]
    async fn stalled_only_while_a_response_waits_on_the_client_and_nothing_moves() {
        let a = Activity::new(None);
        let limit = Duration::from_secs(5);
        let mut long_poll = a.begin(true);
        let mut stuck = a.begin(true);
        let waiter = tokio::spawn({
            let a = a.clone();
            async move {
                a.stalled(limit).await;
                Instant::now()
            }
        });
        // Nothing waits on the client (the responses wait on their members).
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiter.is_finished(), "waiting on members is no stall");
        // One response waits; the other keeps moving for a while.
        stuck.wait_on_client();
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            long_poll.wait_on_client();
            long_poll.client_took();
        }
        assert!(!waiter.is_finished(), "the connection moves on");
        let last_moved = Instant::now();
        let stalled_at = waiter.await.expect("join");
        assert!(
            stalled_at - last_moved >= limit,
            "{:?}",
            stalled_at - last_moved
        );
        assert!(
            stalled_at - last_moved <= limit * 2,
            "{:?}",
            stalled_at - last_moved
        );
        // Untracked requests (HTTP/1) never count.
        let mut h1 = a.begin(false);
        h1.wait_on_client();
        drop((stuck, long_poll));
        assert_eq!(a.awaiting.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn one_wait_for_both_says_which_deadline_came_first() {
        let (first, idle, send) = (
            Duration::from_secs(2),
            Duration::from_secs(10),
            Duration::from_secs(5),
        );
        // Nothing in flight: idle, `first` after the start (the stall never comes).
        let a = Activity::new(None);
        let started = Instant::now();
        let q = a.quiet(Some((first, idle)), Some(send)).await;
        assert_eq!((q, started.elapsed()), (Quiet::Idle, first));
        // A response waits on the client: stalled `send` later, never idle.
        let b = Activity::new(None);
        let mut waiting = b.begin(true);
        waiting.wait_on_client();
        let since = Instant::now();
        let q = b.quiet(Some((first, idle)), Some(send)).await;
        assert_eq!((q, since.elapsed()), (Quiet::Stalled, send));
        // Without the idle deadline (draining, told to close) only the stall ends it.
        drop(waiting);
        let q = tokio::time::timeout(Duration::from_secs(3600), b.quiet(None, Some(send))).await;
        assert!(
            q.is_err(),
            "nothing waits on the client: no stall, and idle not asked"
        );
    }
}
