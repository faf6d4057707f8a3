//! A future polled only when its own waker fires.
//!
//! A client connection's task is woken several times per request (the client's
//! socket, the member's). Its deadlines and drain signals, waited for beside the
//! connection in one `select!`, would be polled on each of those wake-ups, and
//! polling them is not free (a `Notify` takes its lock, a timer re-registers its
//! waker). [`OwnWaker`] gives the inner future a waker of its own and polls it only
//! after that waker fired, relaying the wake-up to the task. Hand-written because
//! `FuturesUnordered` does the same but boxes the future (a kilobyte per idle
//! connection); this keeps it in place and allocates one small flag.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// The inner future's waker: a flag, and the task to wake.
#[derive(Default)]
pub struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Flag {
    /// Whether the inner future's waker fired since the last call; `task`
    /// is woken when it next fires.
    pub fn woken(&self, task: &Waker) -> bool {
        self.task.register(task);
        self.woken.swap(false, Ordering::AcqRel)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// Polls `fut` at first and then only when its own waker fired (see the module doc).
pub struct OwnWaker<'a, F> {
    fut: Pin<&'a mut F>,
    flag: &'a Arc<Flag>,
    first: bool,
}

impl<'a, F: Future> OwnWaker<'a, F> {
    /// `flag` may be reused from one inner future to the next.
    pub fn new(fut: Pin<&'a mut F>, flag: &'a Arc<Flag>) -> Self {
        OwnWaker {
            fut,
            flag,
            first: true,
        }
    }
}

impl<F: Future> Future for OwnWaker<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let woken = this.flag.woken(cx.waker());
        if !std::mem::take(&mut this.first) && !woken {
            return Poll::Pending;
        }
        let waker = Waker::from(this.flag.clone());
        this.fut.as_mut().poll(&mut Context::from_waker(&waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `open` is set (and its waker called).
    struct Door {
        polls: Arc<AtomicUsize>,
        open: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Door {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.open.load(Ordering::Relaxed) {
                return Poll::Ready(());
            }
            if let Ok(mut w) = self.waker.lock() {
                *w = Some(cx.waker().clone());
            }
            Poll::Pending
        }
    }

    #[test]
    fn polled_at_first_and_then_only_when_its_own_waker_fires() {
        let polls = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut gate = Door {
            polls: polls.clone(),
            open: open.clone(),
            waker: inner_waker.clone(),
        };
        let flag = Arc::new(Flag::default());
        let mut own = OwnWaker::new(Pin::new(&mut gate), &flag);
        let task_wakes = Arc::new(Counter::default());
        let task = Waker::from(task_wakes.clone());
        let mut cx = Context::from_waker(&task);

        assert!(Pin::new(&mut own).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled at first");
        for _ in 0..5 {
            // The task woken for other reasons: the inner future is left alone.
            assert!(Pin::new(&mut own).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1);

        open.store(true, Ordering::Relaxed);
        let w = inner_waker.lock().ok().and_then(|mut w| w.take());
        w.expect("the inner future kept its waker").wake();
        assert_eq!(
            task_wakes.0.load(Ordering::Relaxed),
            1,
            "the task was woken"
        );
        assert!(Pin::new(&mut own).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}
