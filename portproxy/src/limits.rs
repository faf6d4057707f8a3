//! The global connection cap.
//!
//! A permit is taken right after `accept` and held for the connection's life. When
//! none is left the new connection is closed at once (a FIN) and counted: with tens of
//! thousands of listeners, waiting for a permit *before* accepting (so excess clients
//! wait in the kernel backlog) would park one waiter per listener, so we refuse
//! instead, as sozu does for TCP.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections that may be open at once.
#[derive(Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    max: usize,
}

impl Admission {
    pub fn new(max: usize) -> Admission {
        Admission {
            permits: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            max,
        }
    }

    /// A slot, or `None` when `max` connections are open.
    pub fn try_admit(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.permits.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_holds_and_slots_come_back() {
        let a = Admission::new(2);
        let one = a.try_admit().expect("first");
        let _two = a.try_admit().expect("second");
        assert!(a.try_admit().is_none());
        assert_eq!(a.open(), 2);
        drop(one);
        assert!(a.try_admit().is_some());
    }
}
