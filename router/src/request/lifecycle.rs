//! A client connection's lifecycle besides its own progress: the one watch every
//! client connection (TCP and TLS in `accept`, QUIC in `quic::connection`) is driven
//! with. It says what happens next ([`Event`]): the listener drains, the
//! connection went quiet past its deadline, a client stopped taking what it is
//! sent, the grace period ended or the connection was evicted. Each kind of
//! connection acts on the events its own way (HTTP/1 answers `Connection: close`,
//! h2 and HTTP/3 send GOAWAY); the deadlines and signals are the same.

use std::sync::Arc;
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

/// What a connection's events are waited on with (lent to each wait).
pub(crate) struct Watch {
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) kill: watch::Receiver<bool>,
    pub(crate) evict: Arc<Notify>,
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
        evict: Arc<Notify>,
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

/// The next [`Event`] of a connection that is `closing` (draining) and, if so,
/// already `shut` (told to close).
///
/// Its future is kept by every idle connection: one quiet wait (idle, or quiet
/// while draining) rather than one of each, and the watch lent, not moved in and
/// out (which kept it twice), and one timer for the idle and the stall deadlines
/// ([`Activity::quiet`]) make it 1 216 → about 700 bytes.
pub(crate) async fn next_event(w: &mut Watch, closing: bool, shut: bool) -> Event {
    let (first, idle, quiet) = if closing {
        (DRAIN_QUIET, DRAIN_QUIET, Event::Quiet)
    } else {
        (w.first, w.idle, Event::Idle)
    };
    let idle = (!(closing && shut)).then_some((first, idle));
    tokio::select! {
        _ = stopped(&mut w.stop), if !closing => Event::Drain,
        q = w.activity.quiet(idle, Some(w.send_timeout)) => match q {
            Quiet::Idle => quiet,
            Quiet::Stalled => Event::Stalled,
        },
        _ = stopped(&mut w.kill) => Event::End,
        _ = w.evict.notified() => Event::End,
    }
}
