//! One request stream: its head read within the deadline and decoded, the
//! request through [`Proxy::response`] (routed, balanced, forwarded), the
//! response written back as HEADERS and DATA frames.
//!
//! [`Proxy::response`]: crate::request::Proxy::response

use std::future::Future as _;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt as _;
use h3_codec::{Code, Error, frame, qpack};
use http::{HeaderMap, Request, Response, header};
use http_body_util::BodyExt as _;

use super::incoming::{Fault, INCOMPLETE, Incoming, varint};
use crate::request::Proxy;
use crate::request::connection::client_conn::ClientConn;
use crate::request::phases::body::ProxyBody;

/// What each request stream of a connection needs.
pub(super) struct Stream {
    pub(super) proxy: Arc<Proxy>,
    pub(super) conn: Arc<ClientConn>,
    pub(super) quic: quinn::Connection,
    /// `limits.max_header_bytes`: the field section bound (decoded size).
    pub(super) max_field_section: usize,
    /// `limits.header_read_timeout`: from the stream's opening to its head.
    pub(super) head_timeout: Duration,
}

impl Stream {
    /// Serves the request on `send`/`recv` to its end.
    pub(super) async fn serve(self, mut send: quinn::SendStream, recv: quinn::RecvStream) {
        let mut incoming = Incoming::new(recv);
        let head = match self.head(&mut incoming).await {
            Ok(head) => head,
            Err(fault) => return self.refuse(fault, &mut send, &mut incoming).await,
        };
        // Read by the one rule the HTTP/1.1 and h2 paths read it by: a
        // value it refuses (a sign, more than one differing) makes the
        // request malformed (RFC 9114 §4.1.2).
        let values = head.headers().get_all(header::CONTENT_LENGTH);
        let declared = match h1_codec::length::content_length(values.iter().map(|v| v.as_bytes())) {
            Ok(declared) => declared,
            Err(_) => {
                let what = "a content-length not one decimal number";
                let e = Error::stream(Code::MESSAGE_ERROR, what);
                return self
                    .refuse(Fault::Protocol(e), &mut send, &mut incoming)
                    .await;
            }
        };
        let body = super::body::received(
            incoming,
            declared,
            self.quic.clone(),
            self.max_field_section,
        );
        let req = head.map(|()| body);
        let Ok(response) = self.proxy.response(self.conn, req).await;
        respond(&mut send, response).await;
    }

    /// The request head, waiting at most `head_timeout` for it (no timer when
    /// it is there at once, as it nearly always is).
    async fn head(&self, incoming: &mut Incoming) -> Result<Request<()>, Fault> {
        let mut read = std::pin::pin!(read_head(incoming, self.max_field_section));
        let first = std::future::poll_fn(|cx| Poll::Ready(read.as_mut().poll(cx))).await;
        match first {
            Poll::Ready(head) => head,
            Poll::Pending => tokio::time::timeout(self.head_timeout, read)
                .await
                .unwrap_or(Err(Fault::Protocol(Error::stream(
                    Code::REQUEST_INCOMPLETE,
                    "no request head in time",
                )))),
        }
    }

    /// Answers a request whose head could not be read: 431 for one too large,
    /// a reset for a malformed one, the connection closed for a broken rule.
    async fn refuse(&self, fault: Fault, send: &mut quinn::SendStream, incoming: &mut Incoming) {
        let Fault::Protocol(e) = fault else { return };
        tracing::debug!(client = %self.conn.ip, error = %e, "HTTP/3 request head refused");
        if e.connection {
            self.quic.close(varint(e.code), e.what.as_bytes());
        } else if e == h3_codec::head::TOO_LARGE {
            incoming.stop(Code::NO_ERROR);
            let head = qpack::headers_frame(Some(431), &HeaderMap::new());
            let _ = send.write_all_chunks(&mut [head]).await;
            let _ = send.finish();
        } else {
            incoming.stop(e.code);
            let _ = send.reset(varint(e.code));
        }
    }
}

/// Reads frames up to the request's HEADERS and decodes it.
async fn read_head(incoming: &mut Incoming, max: usize) -> Result<Request<()>, Fault> {
    loop {
        let Some(head) = incoming.frame().await? else {
            return Err(INCOMPLETE.into());
        };
        match head.ty {
            frame::HEADERS => {
                // The encoded section is never larger than the decoded size it
                // counts (32 bytes more per field), bar its two-byte prefix.
                if head.len > max as u64 + 2 {
                    return Err(h3_codec::head::TOO_LARGE.into());
                }
                let section = incoming.take(head.len as usize).await?;
                return Ok(h3_codec::head::request(&section, max)?);
            }
            frame::DATA => {
                return Err(
                    Error::connection(Code::FRAME_UNEXPECTED, "DATA before HEADERS").into(),
                );
            }
            ty if frame::is_control_only(ty) => {
                return Err(Error::connection(
                    Code::FRAME_UNEXPECTED,
                    "a control frame on a request",
                )
                .into());
            }
            _ => incoming.skip(head.len).await?,
        }
    }
}

/// Frames written to quinn at once at most (bytes): a body's frames are
/// gathered while the member has them ready, then written in one call.
const BATCH_BYTES: usize = 64 << 10;

/// Sends the response: its head, its body frame by frame (gathered while the
/// body has them ready, so a small response is one write), trailers if any.
async fn respond(send: &mut quinn::SendStream, response: Response<ProxyBody>) {
    let (mut parts, mut body) = response.into_parts();
    for name in &h3_codec::head::CONNECTION_SPECIFIC {
        parts.headers.remove(name);
    }
    let mut batch = vec![qpack::headers_frame(
        Some(parts.status.as_u16()),
        &parts.headers,
    )];
    let mut batched = batch[0].len();
    loop {
        let next = match body.frame().now_or_never() {
            Some(next) => next,
            None => {
                if flush(send, &mut batch, &mut batched).await.is_err() {
                    return;
                }
                body.frame().await
            }
        };
        let frame = match next {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(_)) => {
                // The member's body broke off: the client must not take a cut
                // response for a whole one.
                let _ = flush(send, &mut batch, &mut batched).await;
                let _ = send.reset(varint(Code::INTERNAL_ERROR));
                return;
            }
        };
        match frame.into_data() {
            Ok(data) if data.is_empty() => {}
            Ok(data) => {
                let mut head = BytesMut::with_capacity(9);
                frame::frame_head(frame::DATA, data.len() as u64, &mut head);
                batched += head.len() + data.len();
                batch.extend([head.freeze(), data]);
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    let section = qpack::headers_frame(None, &trailers);
                    batched += section.len();
                    batch.push(section);
                }
            }
        }
        if batched >= BATCH_BYTES && flush(send, &mut batch, &mut batched).await.is_err() {
            return;
        }
    }
    if flush(send, &mut batch, &mut batched).await.is_ok() {
        let _ = send.finish();
    }
}

async fn flush(
    send: &mut quinn::SendStream,
    batch: &mut Vec<Bytes>,
    batched: &mut usize,
) -> Result<(), quinn::WriteError> {
    if batch.is_empty() {
        return Ok(());
    }
    let written = send.write_all_chunks(batch).await;
    batch.clear();
    *batched = 0;
    written
}
