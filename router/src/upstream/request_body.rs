//! The body of a request on its way to a member: what was read from the client before
//! the request took a member's slot, then the rest of the client's body as it comes,
//! with a stall deadline.
//!
//! The deadline is why this type exists: a client that sends a body slowly (or stops)
//! holds a member's request slot and its connection while the member waits for the
//! rest. When the client's side has made no progress for `stall` while the member is
//! ready for more, the body fails with [`RequestBodyError::Stalled`]; the request then
//! ends as the client's fault (408), never the member's. The deadline is armed only
//! while the client's body is pending and the member side is asking for more, so a
//! member that reads slowly never makes its client look slow.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use relay::stall::Stall;

/// Why a request body could not be sent on.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    /// The client's body broke off or was malformed (a bad chunk size).
    #[error("client request body: {0}")]
    Client(#[from] hyper::Error),
    /// The client sent nothing for `limits.body_timeout` while the member waited.
    #[error("client request body stalled for {0:?}")]
    Stalled(Duration),
    /// An HTTP/3 request stream broke off (reset by the client, connection lost).
    #[error("client request body: {0}")]
    Stream(String),
    /// The body went past its app's `max_request_body_bytes`: cut there.
    #[error("client request body over {0} bytes")]
    TooLarge(u64),
}

/// A request body another kind of client connection delivers (an HTTP/3
/// stream's, see `crate::quic::body`), boxed so that this layer does not depend
/// on it.
pub type StreamBody = Pin<Box<dyn Body<Data = Bytes, Error = RequestBodyError> + Send>>;

/// The part of a client's body not read yet: hyper's (HTTP/1, h2) or another
/// stream's (HTTP/3).
pub enum Rest {
    Hyper(Incoming),
    Stream(StreamBody),
}

impl Body for Rest {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        match self.get_mut() {
            Rest::Hyper(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|f| f.map_err(RequestBodyError::Client))),
            Rest::Stream(b) => b.as_mut().poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Rest::Hyper(b) => b.is_end_stream(),
            Rest::Stream(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Rest::Hyper(b) => b.size_hint(),
            Rest::Stream(b) => b.size_hint(),
        }
    }
}

/// The body of a request sent to a member: nothing (a retry is only ever made of a
/// request without a body), or the client's body (see the module doc).
pub enum RequestBody {
    Empty,
    Client(Box<ClientBody>),
}

/// A client's body: frames read ahead, then the rest with a stall deadline.
pub struct ClientBody {
    read: VecDeque<Frame<Bytes>>,
    /// `None` once the client's body has ended (all of it may be in `read`).
    rest: Option<Rest>,
    /// Armed while the client's body is pending (`limits.body_timeout`).
    stall: Stall,
    /// Bytes of `rest` the body may still carry (its app's
    /// `max_request_body_bytes` less what was read ahead; `u64::MAX`: no limit).
    left: u64,
    /// The limit, for the error.
    limit: u64,
}

impl ClientBody {
    /// `read`: frames already read from `rest`'s start; `rest`: what is left
    /// (`None`: nothing is).
    pub fn new(read: VecDeque<Frame<Bytes>>, rest: Option<Rest>, stall: Duration) -> Self {
        ClientBody {
            read,
            rest,
            stall: Stall::new(stall),
            left: u64::MAX,
            limit: 0,
        }
    }

    /// The same, cut at `limit` bytes in all (0: no limit): past it the body
    /// fails with [`RequestBodyError::TooLarge`], and the member's connection
    /// with it (the member never gets a whole body that was too large).
    pub fn limited(mut self, limit: u64) -> Self {
        if limit > 0 {
            let read: u64 = self
                .read
                .iter()
                .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                .sum();
            self.left = limit.saturating_sub(read);
            self.limit = limit;
        }
        self
    }

    /// Pending on the client: arm the deadline (or fail once it has passed).
    fn stalled(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        match self.stall.poll_waiting(cx) {
            Poll::Ready(()) => {
                self.rest = None;
                Poll::Ready(Some(Err(RequestBodyError::Stalled(self.stall.limit()))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let body = match self.get_mut() {
            RequestBody::Empty => return Poll::Ready(None),
            RequestBody::Client(b) => &mut **b,
        };
        if let Some(frame) = body.read.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        let Some(rest) = body.rest.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(rest).poll_frame(cx) {
            Poll::Pending => body.stalled(cx),
            Poll::Ready(r) => {
                body.stall.progressed();
                if r.is_none() {
                    body.rest = None;
                }
                if let Some(Ok(frame)) = &r
                    && let Some(data) = frame.data_ref()
                {
                    let len = data.len() as u64;
                    if len > body.left {
                        body.rest = None;
                        return Poll::Ready(Some(Err(RequestBodyError::TooLarge(body.limit))));
                    }
                    body.left -= len;
                }
                Poll::Ready(r)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Client(b) => {
                b.read.is_empty() && b.rest.as_ref().is_none_or(Rest::is_end_stream)
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Client(b) => {
                let read: u64 = b
                    .read
                    .iter()
                    .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
                    .sum();
                let rest = b
                    .rest
                    .as_ref()
                    .map_or_else(|| SizeHint::with_exact(0), Rest::size_hint);
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(read));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(read));
                }
                hint
            }
        }
    }
}
