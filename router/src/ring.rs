//! A bounded, timestamped history (the last N of something, oldest dropped), for
//! what the status page lists: admin actions, table changes, health transitions.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The last `cap` items pushed. A mutex: items come at operator or table-change
/// pace, never per request.
#[derive(Debug)]
pub struct Ring<T> {
    cap: usize,
    items: Mutex<VecDeque<T>>,
}

impl<T: Clone> Ring<T> {
    pub fn new(cap: usize) -> Ring<T> {
        Ring {
            cap,
            items: Mutex::new(VecDeque::with_capacity(cap.min(64))),
        }
    }

    pub fn push(&self, item: T) {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if items.len() == self.cap {
            items.pop_front();
        }
        items.push_back(item);
    }

    /// Oldest first.
    pub fn list(&self) -> Vec<T> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_the_last_cap() {
        let r = super::Ring::new(3);
        for i in 0..5 {
            r.push(i);
        }
        assert_eq!(r.list(), [2, 3, 4]);
    }
}
