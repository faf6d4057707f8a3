//! A request body as the connection's driver receives it: DATA payloads
//! handed over as they come, read by the request path as an
//! [`http_body::Body`] (in the connection's task while the body is read
//! ahead, in the member connection's task once it streams on).
//!
//! What bounds it is flow control: the client may send no more than the
//! stream's and the connection's windows, and the windows open again only
//! for bytes the reader took ([`Inbox::take_consumed`]), so a member that
//! reads slowly slows the client, and nothing here grows past a window.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use hyper::body::{Body, Frame, SizeHint};

use crate::upstream::{RequestBodyError, StreamBody};

/// One request body between the driver and its reader.
pub(super) struct Inbox {
    state: Mutex<State>,
    /// The connection's driver: woken when the reader took bytes (their
    /// window is to be opened again) or went away.
    driver: Arc<AtomicWaker>,
}

#[derive(Default)]
struct State {
    chunks: VecDeque<Bytes>,
    /// The client ended the body.
    end: bool,
    /// The stream broke off: the reader gets this as its error.
    failed: Option<&'static str>,
    /// Bytes taken since the driver last asked.
    taken: u32,
    /// The reader is gone: what still comes is dropped (its window opened).
    dropped: bool,
    reader: Option<Waker>,
}

impl Inbox {
    pub(super) fn new(driver: Arc<AtomicWaker>) -> Arc<Inbox> {
        Arc::new(Inbox {
            state: Mutex::new(State::default()),
            driver,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while held leaves only a queue of bytes: still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Body bytes from the client; false when the reader is gone (the
    /// caller opens their window at once).
    pub(super) fn push(&self, data: Bytes, end: bool) -> bool {
        let mut s = self.lock();
        if s.dropped {
            return false;
        }
        if !data.is_empty() {
            s.chunks.push_back(data);
        }
        s.end |= end;
        if let Some(w) = s.reader.take() {
            w.wake();
        }
        true
    }

    /// The body broke off (a reset, a length that differs from the declared one).
    pub(super) fn fail(&self, why: &'static str) {
        let mut s = self.lock();
        if !s.end {
            s.failed = Some(why);
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
    }

    /// Bytes the reader took since the last call, and whether it is gone.
    pub(super) fn take_consumed(&self) -> (u32, bool) {
        let mut s = self.lock();
        (std::mem::take(&mut s.taken), s.dropped)
    }
}

/// The reader's side, as the request path takes a body.
struct Reader {
    inbox: Arc<Inbox>,
    declared: Option<u64>,
}

/// The request body to hand the request path; `declared`: its
/// `Content-Length`, for the size hint (the driver holds the body to it).
pub(super) fn body(inbox: Arc<Inbox>, declared: Option<u64>) -> StreamBody {
    Box::pin(Reader { inbox, declared })
}

impl Body for Reader {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let inbox = &self.inbox;
        let mut s = inbox.lock();
        if let Some(data) = s.chunks.pop_front() {
            let first = s.taken == 0;
            s.taken = s.taken.saturating_add(data.len() as u32);
            drop(s);
            if first {
                inbox.driver.wake();
            }
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(why) = s.failed {
            return Poll::Ready(Some(Err(RequestBodyError::Stream(why.into()))));
        }
        if s.end {
            return Poll::Ready(None);
        }
        if !s.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.reader = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let s = self.inbox.lock();
        s.end && s.chunks.is_empty() && s.failed.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.declared
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut s = self.inbox.lock();
        s.dropped = true;
        let left: usize = s.chunks.drain(..).map(|c| c.len()).sum();
        s.taken = s.taken.saturating_add(left as u32);
        drop(s);
        self.inbox.driver.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    #[tokio::test]
    async fn bytes_read_are_given_back_and_a_reader_gone_drops_the_rest() {
        let driver = Arc::new(AtomicWaker::new());
        let inbox = Inbox::new(driver);
        let mut body = body(inbox.clone(), Some(5));
        assert!(inbox.push(Bytes::from_static(b"abc"), false));
        assert!(inbox.push(Bytes::from_static(b"de"), false));
        let first = body.frame().await.expect("a frame").expect("data");
        assert_eq!(first.into_data().ok(), Some(Bytes::from_static(b"abc")));
        assert_eq!(inbox.take_consumed(), (3, false));
        assert_eq!(inbox.take_consumed(), (0, false), "given back once");
        drop(body);
        assert_eq!(inbox.take_consumed(), (2, true), "unread bytes given back");
        assert!(!inbox.push(Bytes::from_static(b"f"), true), "nobody reads");
    }

    #[tokio::test]
    async fn a_broken_stream_is_the_readers_error_and_an_ended_one_its_end() {
        let inbox = Inbox::new(Arc::new(AtomicWaker::new()));
        let mut body = body(inbox.clone(), None);
        inbox.fail("reset by the client");
        let err = body.frame().await.expect("a frame").expect_err("failed");
        assert!(err.to_string().contains("reset by the client"), "{err}");
        let inbox = Inbox::new(Arc::new(AtomicWaker::new()));
        let mut body = super::body(inbox.clone(), None);
        inbox.push(Bytes::from_static(b"x"), true);
        assert!(!body.is_end_stream(), "a byte is still there");
        assert!(body.frame().await.is_some());
        assert!(body.frame().await.is_none() && body.is_end_stream());
    }
}
