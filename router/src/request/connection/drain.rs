//! "Drain what is open now" while going on accepting: what the HA pair asks of
//! the router that has just lost its VIP to the peer (a failback, a planned
//! move; `keepalived/router-handover` sends SIGUSR1). The connections open at
//! that moment end gracefully, as on a stop (HTTP/1 answers `Connection: close`
//! from then on and a connection quiet for `DRAIN_QUIET` is closed; h2 and
//! HTTP/3 get GOAWAY), so their clients reconnect, and reach the new holder,
//! within the peer's forwarding window; the connections accepted afterwards are
//! not touched.
//!
//! Each listener hands its connections the receiver of the current *epoch*, a
//! `watch<bool>` that turns true when they are to drain: on a drain request the
//! epoch's sender says true and a new epoch begins for the connections to come;
//! on the listener's stop the current epoch says true too. A connection keeps
//! one receiver (16 bytes), as it kept the stop signal before.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::listener::stopped;

/// Where drain requests come from: one per router, shared by its listeners.
#[derive(Clone)]
pub struct Drainer {
    requests: Arc<watch::Sender<u64>>,
}

impl Default for Drainer {
    fn default() -> Self {
        Drainer {
            requests: Arc::new(watch::channel(0).0),
        }
    }
}

impl Drainer {
    /// Drains every connection open now, on every listener.
    pub fn drain_open(&self) {
        self.requests.send_modify(|n| *n += 1);
    }

    /// The per-listener epochs: they end with `stop`, or at each drain request.
    pub(crate) fn epochs(&self, stop: watch::Receiver<bool>) -> Epochs {
        self.epochs_waking(stop, || {})
    }

    /// [`Drainer::epochs`], calling `wake` each time an epoch has ended (after
    /// its receivers say true): for connections that look at their epoch only
    /// when woken (`lifecycle::next_signalled`).
    pub(crate) fn epochs_waking(
        &self,
        stop: watch::Receiver<bool>,
        wake: impl Fn() + Send + 'static,
    ) -> Epochs {
        let (tx, rx) = watch::channel(false);
        let current = Arc::new(Mutex::new(rx));
        let mut requests = self.requests.subscribe();
        let held = current.clone();
        tokio::spawn(async move {
            let mut stop = stop;
            let mut tx = tx;
            loop {
                tokio::select! {
                    changed = requests.changed() => {
                        if changed.is_err() {
                            // The router is gone: only the stop is left.
                            stopped(&mut stop).await;
                            let _ = tx.send(true);
                            wake();
                            return;
                        }
                        let (next_tx, next_rx) = watch::channel(false);
                        *lock(&held) = next_rx;
                        let _ = std::mem::replace(&mut tx, next_tx).send(true);
                        wake();
                    }
                    () = stopped(&mut stop) => {
                        let _ = tx.send(true);
                        wake();
                        return;
                    }
                }
            }
        });
        Epochs { current }
    }
}

/// A listener's current epoch, for the connections it accepts.
#[derive(Clone)]
pub(crate) struct Epochs {
    current: Arc<Mutex<watch::Receiver<bool>>>,
}

impl Epochs {
    /// What a connection accepted now watches: true when it is to drain.
    pub(crate) fn for_connection(&self) -> watch::Receiver<bool> {
        lock(&self.current).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_drain_request_ends_the_open_epoch_only_and_the_stop_ends_the_current() {
        let drainer = Drainer::default();
        let (stop_tx, stop) = watch::channel(false);
        let epochs = drainer.epochs(stop);
        let mut before = epochs.for_connection();
        drainer.drain_open();
        stopped(&mut before).await;
        // The epoch turns over in the listener's task: wait for the new one.
        let mut after = loop {
            let rx = epochs.for_connection();
            if !*rx.borrow() {
                break rx;
            }
            tokio::task::yield_now().await;
        };
        assert!(
            !*after.borrow_and_update(),
            "a later connection is not drained"
        );
        stop_tx.send(true).expect("stop");
        stopped(&mut after).await;
    }
}
