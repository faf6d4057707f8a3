//! A client connection's lifecycle besides its own progress: the one watch every
//! client connection (TCP and TLS in `accept`, QUIC in `quic::connection`) is driven
//! with. It says what happens next ([`Event`]): the listener drains, the
//! connection went quiet past its deadline, a client stopped taking what it is
//! sent, the grace period ended or the connection was evicted. Each kind of
//! connection acts on the events its own way (HTTP/1 answers `Connection: close`,
//! h2 and HTTP/3 send GOAWAY); the deadlines and signals are the same.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::activity::{Activity, Quiet};
use super::listener::stopped;

/// While draining, a connection with no request for this long is closed.
pub(crate) const DRAIN_QUIET: Duration = Duration::from_secs(1);

/// What ends or changes a client connection besides its own progress.
pub(crate) enum Event {
    /// The listener drains.
    Drain,
    /// Quiet for `DRAIN_QUIET` while draining.
    Quiet,
    /// Quiet past its deadline (see `Activity::idle`).
    Idle,
    /// A client took nothing for `limits.send_timeout` (an h2 or HTTP/3 client
    /// that never opens its windows).
    Stalled,
    /// The grace period ended, or the connection was evicted.
    End,
}

/// A connection's own wake-up: its listener's registry (`accept::Connections`)
/// signals it to evict it ([`Signal::evict`]), and to have it look at its drain
/// epoch and the kill switch when either turns ([`Signal::wake`]). One `Notify`
/// for the three: a connection waiting for its next request keeps one waiter
/// (64 bytes), not a `watch` wait for each signal (160 bytes each).
#[derive(Default)]
pub(crate) struct Signal {
    notify: Notify,
    evicted: AtomicBool,
}

impl Signal {
    /// Its slot is wanted: the connection ends ([`Event::End`]).
    pub(crate) fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Its drain epoch or the kill switch may have turned: it looks at them.
    /// A wake with neither turned costs a look, nothing else.
    pub(crate) fn wake(&self) {
        self.notify.notify_one();
    }

    fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// Resolves once the connection is evicted (other wakes are looked past).
    pub(crate) async fn evicted_wait(&self) {
        while !self.evicted() {
            self.notify.notified().await;
        }
    }
}

/// What a connection's events are waited on with (lent to each wait).
pub(crate) struct Watch {
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) kill: watch::Receiver<bool>,
    pub(crate) evict: Arc<Signal>,
    pub(crate) activity: Arc<Activity>,
    /// `limits.header_read_timeout`, `limits.idle_timeout`, `limits.send_timeout`.
    pub(crate) first: Duration,
    pub(crate) idle: Duration,
    pub(crate) send_timeout: Duration,
}

impl Watch {
    /// The watch of a connection served with `limits`: `stop` (drain) and
    /// `kill` (the grace is over), `evict` (its slot is wanted), and its
    /// `activity`'s deadlines.
    pub(crate) fn of(
        limits: &super::limits::Limits,
        (stop, kill): (watch::Receiver<bool>, watch::Receiver<bool>),
        evict: Arc<Signal>,
        activity: Arc<Activity>,
    ) -> Watch {
        Watch {
            stop,
            kill,
            evict,
            activity,
            first: limits.header_read_timeout,
            idle: limits.idle_timeout,
            send_timeout: limits.send_timeout,
        }
    }
}

impl Watch {
    /// The quiet deadlines `(first, limit)` a connection that is `closing` and
    /// `shut` waits for (none once told to close while draining), and the event
    /// their passing is.
    fn quiet_wait(&self, closing: bool, shut: bool) -> (Option<(Duration, Duration)>, Event) {
        let (first, idle, quiet) = if closing {
            (DRAIN_QUIET, DRAIN_QUIET, Event::Quiet)
        } else {
            (self.first, self.idle, Event::Idle)
        };
        ((!(closing && shut)).then_some((first, idle)), quiet)
    }
}

/// The next [`Event`] of a connection that is `closing` (draining) and, if so,
/// already `shut` (told to close).
///
/// Its future is kept by every idle connection: one quiet wait (idle, or quiet
/// while draining) rather than one of each, and the watch lent, not moved in and
/// out (which kept it twice), and one timer for the idle and the stall deadlines
/// ([`Activity::quiet`]) make it 1 216 → about 700 bytes.
pub(crate) async fn next_event(w: &mut Watch, closing: bool, shut: bool) -> Event {
    let (idle, quiet) = w.quiet_wait(closing, shut);
    tokio::select! {
        _ = stopped(&mut w.stop), if !closing => Event::Drain,
        q = w.activity.quiet(idle, Some(w.send_timeout)) => match q {
            Quiet::Idle => quiet,
            Quiet::Stalled => Event::Stalled,
        },
        _ = stopped(&mut w.kill) => Event::End,
        _ = w.evict.notify.notified() => Event::End,
    }
}

/// [`next_event`] of a connection whose listener wakes it through its
/// [`Signal`] when its drain epoch ends or the kill switch turns (TCP and TLS
/// connections; see `accept::Connections`): it waits on that one signal and
/// looks at the watches when woken, instead of waiting on each.
#[allow(clippy::manual_async_fn)] // a plain fn: the arguments kept once, not twice
pub(crate) fn next_signalled(
    w: &mut Watch,
    closing: bool,
    shut: bool,
) -> impl Future<Output = Event> + '_ {
    async move {
        let (idle, quiet) = w.quiet_wait(closing, shut);
        let mut waiting = std::pin::pin!(w.activity.quiet(idle, Some(w.send_timeout)));
        loop {
            // A wake between these looks and the wait below is kept by the
            // `Notify` (a permit), not lost.
            if *w.kill.borrow() || w.evict.evicted() {
                return Event::End;
            }
            if !closing && *w.stop.borrow() {
                return Event::Drain;
            }
            tokio::select! {
                q = waiting.as_mut() => return match q {
                    Quiet::Idle => quiet,
                    Quiet::Stalled => Event::Stalled,
                },
                () = w.evict.notify.notified() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt as _;

    use super::*;

    /// A watch with deadlines far away: only the signals can end a wait.
    fn watch_of(
        stop: watch::Receiver<bool>,
        kill: watch::Receiver<bool>,
        signal: &Arc<Signal>,
    ) -> Watch {
        let hour = Duration::from_secs(3600);
        Watch {
            stop,
            kill,
            evict: signal.clone(),
            activity: Activity::new(None),
            first: hour,
            idle: hour,
            send_timeout: hour,
        }
    }

    fn event(e: Option<Event>) -> &'static str {
        match e {
            None => "pending",
            Some(Event::Drain) => "drain",
            Some(Event::Quiet) => "quiet",
            Some(Event::Idle) => "idle",
            Some(Event::Stalled) => "stalled",
            Some(Event::End) => "end",
        }
    }

    #[tokio::test]
    async fn a_signalled_connection_sees_its_drain_its_eviction_and_the_kill_switch() {
        let (stop_tx, stop) = watch::channel(false);
        let (kill_tx, kill) = watch::channel(false);
        let signal = Arc::new(Signal::default());
        let mut w = watch_of(stop, kill, &signal);

        // A wake with nothing turned is looked past.
        let mut next = Box::pin(next_signalled(&mut w, false, false));
        assert_eq!(event(next.as_mut().now_or_never()), "pending");
        signal.wake();
        assert_eq!(event(next.as_mut().now_or_never()), "pending");
        // The drain epoch ends: the registry wakes it, and it sees the drain.
        stop_tx.send(true).expect("stop");
        assert_eq!(
            event(next.as_mut().now_or_never()),
            "pending",
            "not without a wake"
        );
        signal.wake();
        assert_eq!(event(next.as_mut().now_or_never()), "drain");
        drop(next);

        // Draining already: the drain is not seen again; eviction ends it.
        let mut next = Box::pin(next_signalled(&mut w, true, false));
        signal.wake();
        assert_eq!(event(next.as_mut().now_or_never()), "pending");
        signal.evict();
        assert_eq!(event(next.as_mut().now_or_never()), "end");
        drop(next);

        // The kill switch, raised before the wait began, is seen at once.
        let (_stop_tx, stop) = watch::channel(false);
        let signal = Arc::new(Signal::default());
        let mut w = watch_of(stop, w.kill.clone(), &signal);
        kill_tx.send(true).expect("kill");
        assert_eq!(
            event(next_signalled(&mut w, false, false).now_or_never()),
            "end"
        );
    }
}
