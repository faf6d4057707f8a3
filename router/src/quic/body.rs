//! A request body as an HTTP/3 stream delivers it, as an [`http_body::Body`] the
//! request path reads like hyper's (see [`crate::request::upload`]).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, Bytes};
use hyper::body::{Body, Frame, SizeHint};

use crate::upstream::RequestBodyError;

/// The receiving half of an HTTP/3 request stream. Trailers are not forwarded
/// (as on h2: members get HTTP/1.1, where few read them).
pub struct H3Body {
    recv: h3::server::RequestStream<h3_quinn::RecvStream, Bytes>,
    ended: bool,
}

impl H3Body {
    pub fn new(recv: h3::server::RequestStream<h3_quinn::RecvStream, Bytes>) -> H3Body {
        H3Body { recv, ended: false }
    }
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
