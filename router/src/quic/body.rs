//! A request body as an HTTP/3 stream delivers it, as an [`http_body::Body`] the
//! request path reads like hyper's (see [`crate::request::upload`]).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, Bytes};
use hyper::body::{Body, Frame, SizeHint};

use crate::request::upload::Received;
use crate::upstream::RequestBodyError;

type Recv = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// The receiving half of an HTTP/3 request stream. Trailers are not forwarded
/// (as on h2: members get HTTP/1.1, where few read them).
pub struct H3Body {
    recv: Recv,
    /// What the first look at the stream found (see [`received`]), given first.
    first: Option<Result<Bytes, RequestBodyError>>,
    ended: bool,
}

/// A request's body as its stream stands when its head is resolved. HTTP/3 says a
/// request has no body only by ending its stream; a GET's end usually arrives
/// with its head, and then the request is served as the own HTTP/1 path serves
/// one read whole (no read-ahead future, no timer: see `request::upload`).
/// Otherwise the stream is read as it comes, starting with what this look found.
pub async fn received(mut recv: Recv) -> Received {
    let first = std::future::poll_fn(|cx| Poll::Ready(recv.poll_recv_data(cx))).await;
    let first = match first {
        Poll::Ready(Ok(None)) => return Received::Read(Bytes::new()),
        Poll::Ready(Ok(Some(mut data))) => Some(Ok(data.copy_to_bytes(data.remaining()))),
        Poll::Ready(Err(e)) => Some(Err(RequestBodyError::Stream(e.to_string()))),
        Poll::Pending => None,
    };
    Received::Stream(Box::pin(H3Body {
        recv,
        first,
        ended: false,
    }))
}

impl Body for H3Body {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        match this.first.take() {
            Some(Ok(bytes)) => return Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Some(Err(e)) => {
                this.ended = true;
                return Poll::Ready(Some(Err(e)));
            }
            None => {}
        }
        match ready!(this.recv.poll_recv_data(cx)) {
            Ok(Some(mut data)) => {
                let bytes = data.copy_to_bytes(data.remaining());
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            Ok(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Err(e) => {
                this.ended = true;
                Poll::Ready(Some(Err(RequestBodyError::Stream(e.to_string()))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
