//! A request body as an HTTP/3 stream delivers it: DATA frames' payloads as
//! they come, as an [`http_body::Body`] the request path reads like hyper's
//! (see [`crate::request::phases::upload`]). A `Content-Length` is held to (RFC 9114
//! §4.1.2): the member gets HTTP/1.1, where a body longer than declared would
//! be read as the next request. Trailers are checked, not forwarded (as on
//! h2: members get HTTP/1.1, where few read them).

use bytes::Bytes;
use h3_codec::{Code, Error, frame};
use hyper::body::Frame;

use super::incoming::{Fault, Incoming};
use crate::request::phases::upload::Received;
use crate::upstream::RequestBodyError;

const LENGTH: Error = Error::stream(
    Code::MESSAGE_ERROR,
    "body length differs from Content-Length",
);

/// The body of a request whose head has been read from `incoming`.
pub(super) fn received(
    mut incoming: Incoming,
    declared: Option<u64>,
    quic: quinn::Connection,
    max_field_section: usize,
) -> Received {
    if incoming.ended_now() && declared.unwrap_or(0) == 0 {
        return Received::Read(Bytes::new());
    }
    let body = Reader {
        incoming,
        quic,
        left_in_frame: 0,
        declared,
        seen: 0,
        trailers: false,
        max_field_section,
    };
    let stream = futures_util::stream::unfold(body, |mut body| async move {
        let item = body.next().await?;
        Some((item.map(Frame::data), body))
    });
    Received::Stream(Box::pin(http_body_util::StreamBody::new(stream)))
}

struct Reader {
    incoming: Incoming,
    /// To close the connection when the client breaks its rules.
    quic: quinn::Connection,
    /// Payload bytes of the current DATA frame not read yet.
    left_in_frame: u64,
    declared: Option<u64>,
    seen: u64,
    /// Trailers came: only the stream's end (or unknown frames) may follow.
    trailers: bool,
    max_field_section: usize,
}

impl Reader {
    async fn next(&mut self) -> Option<Result<Bytes, RequestBodyError>> {
        match self.data().await {
            Ok(next) => next.map(Ok),
            Err(fault) => Some(Err(self.failed(fault))),
        }
    }

    /// The next piece of the body; `None` at its end.
    async fn data(&mut self) -> Result<Option<Bytes>, Fault> {
        loop {
            if self.left_in_frame > 0 {
                let bytes = self.incoming.some(self.left_in_frame).await?;
                self.left_in_frame -= bytes.len() as u64;
                self.seen += bytes.len() as u64;
                if self.declared.is_some_and(|d| self.seen > d) {
                    return Err(LENGTH.into());
                }
                return Ok(Some(bytes));
            }
            let Some(head) = self.incoming.frame().await? else {
                if self.declared.is_some_and(|d| d != self.seen) {
                    return Err(LENGTH.into());
                }
                return Ok(None);
            };
            match head.ty {
                frame::DATA if !self.trailers => self.left_in_frame = head.len,
                frame::HEADERS if !self.trailers => {
                    if head.len > self.max_field_section as u64 {
                        return Err(h3_codec::head::TOO_LARGE.into());
                    }
                    let section = self.incoming.take(head.len as usize).await?;
                    h3_codec::head::trailers(&section, self.max_field_section)?;
                    self.trailers = true;
                }
                frame::DATA | frame::HEADERS => {
                    return Err(Error::connection(
                        Code::FRAME_UNEXPECTED,
                        "a frame after trailers",
                    )
                    .into());
                }
                ty if frame::is_control_only(ty) => {
                    return Err(Error::connection(
                        Code::FRAME_UNEXPECTED,
                        "a control frame on a request",
                    )
                    .into());
                }
                _ => self.incoming.skip(head.len).await?,
            }
        }
    }

    /// Ends the stream (or the connection) as the fault asks; the error the
    /// request path sees.
    fn failed(&mut self, fault: Fault) -> RequestBodyError {
        match fault {
            Fault::Protocol(e) => {
                if e.connection {
                    self.quic
                        .close(super::incoming::varint(e.code), e.what.as_bytes());
                } else {
                    self.incoming.stop(e.code);
                }
                RequestBodyError::Stream(e.to_string())
            }
            Fault::Gone(e) => RequestBodyError::Stream(e.to_string()),
        }
    }
}
