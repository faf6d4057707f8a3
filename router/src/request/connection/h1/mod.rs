//! The client side of HTTP/1.1 on the router's own framing, with hyper behind it.
//!
//! The common request (HTTP/1.1 in origin form, a complete head within the limits,
//! no body or a `Content-Length` one that has arrived with its head and fits
//! `limits.body_buffer_bytes`, keep-alive, no upgrade, no `Expect`, no
//! `Transfer-Encoding`) is parsed in place with `httparse` ([`head`]), served by
//! [`Proxy::answer`](crate::request::Proxy::answer) like any other, and its response written
//! here ([`response`], exactly as hyper writes it). At the first request that is
//! anything else the connection is handed to hyper with every byte read so far put
//! back in front ([`End::Handoff`]), and hyper serves it from there: its error
//! answers (400, 431, 414), `100-continue`, chunked and slow request bodies,
//! upgrades, HTTP/1.0 (h2 with prior knowledge goes to the own h2 server,
//! [`super::h2`]). So every
//! shape the tests pin down reaches the same code as before, and the request
//! framing checks ([`h1_codec::framing`], on every read of the connection) still
//! cut smuggling shapes before either parser sees them.
//!
//! Why: on the keep-alive path hyper's server costs about 1.6 µs per request
//! (`bench-h1-floor` with and without `--hyper`: 8.9 against 7.3 µs), and it keeps
//! its read and write buffers with every idle connection; this path holds no
//! buffer while a connection waits for its next request.
//!
//! While a request is in flight the client's side is still read (on its own waker):
//! pipelined bytes are buffered up to a head's size, and an end of stream cancels
//! the request, as hyper cancels it, so a client that left holds no member slot.
//!
//! Deadlines: between requests the connection's [`Activity`](super::activity)
//! deadlines apply, as on hyper's connections; a head that has begun must be
//! complete within `limits.header_read_timeout` (hyper's `header_read_timeout`),
//! else the connection is closed without an answer, as hyper closes it.

/// Public for the fuzz targets (`fuzz/`), which compare it with the framing reader.
pub mod head;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use bytes::BytesMut;
use futures_util::FutureExt as _;
use http::{Method, Request};
use http_body_util::BodyExt as _;
use hyper::body::Body as _;
use tokio::io::AsyncWriteExt as _;
use tokio::time::Sleep;

use self::head::Parsed;
use super::client_conn::ClientConn;
use super::client_io::ClientIo;
use super::own_waker::{Flag, OwnWaker};
use crate::request::Answer;
use crate::request::Proxy;
use crate::request::phases::body::ProxyBody;
use crate::request::phases::upload::Received;
use h1_codec::encode::response::{self, BodyLength, DateCache, Encoder, ToWrite};

/// How the router's own path left a connection.
pub enum End {
    /// Done: closed by either side, or at a deadline.
    Closed,
    /// hyper serves it from here, these bytes first.
    Handoff(Vec<u8>),
}

pub use self::head::HeadLimits;

/// A response larger than this is written in pieces, not gathered first.
const GATHER: usize = 64 * 1024;

/// What the path needs from `limits`.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub head: HeadLimits,
    /// `limits.header_read_timeout`: a begun head must be complete within it.
    pub header_read_timeout: std::time::Duration,
}

impl Settings {
    /// The path's settings from the listener's `limits`.
    pub fn of(limits: &crate::request::connection::limits::Limits) -> Settings {
        Settings {
            head: HeadLimits {
                max_bytes: limits.max_header_bytes,
                max_headers: limits.max_headers,
                max_body: limits.body_buffer_bytes,
            },
            header_read_timeout: limits.header_read_timeout,
        }
    }
}

/// Serves `io` until it closes or needs hyper (see the module doc); each request
/// is served by the proxy `proxy()` returns at its start. `shut` set (drain, idle
/// deadline): the connection closes once no request is in progress.
///
/// A plain function returning an `async` block, not an `async fn`: its captures
/// are the only copy of the arguments (an `async fn` keeps them twice, in every
/// connection's task).
#[allow(clippy::manual_async_fn)] // see above: not an `async fn` on purpose
pub fn run<'a>(
    io: &'a mut ClientIo,
    proxy: impl Fn() -> std::sync::Arc<Proxy> + 'a,
    conn: &'a std::sync::Arc<ClientConn>,
    shut: &'a AtomicBool,
    settings: &'a Settings,
) -> impl Future<Output = End> + 'a {
    async move {
        let mut buf = BytesMut::new();
        let mut date = DateCache::default();
        let flag = std::sync::Arc::new(Flag::default());
        loop {
            // 1. A head (and its body, if it came along).
            let (body, parts, fields) = match next_head(io, &mut buf, shut, settings).await {
                Ok(head) => head,
                Err(end) => return end,
            };
            let method = parts.method.clone();
            // The request's state ends in this block, never held beside its response.
            let writing = {
                let req = Box::new(Request::from_parts(*parts, Received::Read(body)));
                // Boxed: a waiting connection keeps only this loop's few words.
                let mut served = Box::pin(proxy().answer(conn.clone(), req, Some(fields)));
                // Meanwhile the client's side is read ([`client_side`]) on its own waker:
                // polled only when it has news, not on every wake-up of the request (a
                // poll of an idle socket costs a waker registration).
                let response = {
                    let client = client_side(io, &mut buf, settings.head.max_bytes);
                    let client = std::pin::pin!(client);
                    let mut client = std::pin::pin!(OwnWaker::new(client, &flag));
                    std::future::poll_fn(|cx| {
                        if let Poll::Ready(answer) = served.as_mut().poll(cx) {
                            return Poll::Ready(Some(answer));
                        }
                        client.as_mut().poll(cx).map(|()| None)
                    })
                    .await
                };
                drop(served);
                let Some(answer) = response else {
                    tracing::debug!("client closed its connection mid-request; request cancelled");
                    return End::Closed;
                };
                // 2. The response.
                write(io, answer, &method, &mut date)
            };
            match writing.await {
                Ok(true) if !shut.load(Ordering::Acquire) => {}
                Ok(_) => {
                    let _ = io.shutdown().await;
                    return End::Closed;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "client connection ended mid-response");
                    return End::Closed;
                }
            }
        }
    }
}

/// A request's head taken out of the buffer (with its body when it came
/// along): its body, parts and fields as they came; or how the connection
/// ends (closed, the head deadline, or a head hyper serves).
async fn next_head(
    io: &mut ClientIo,
    buf: &mut BytesMut,
    shut: &AtomicBool,
    settings: &Settings,
) -> Result<
    (
        bytes::Bytes,
        Box<http::request::Parts>,
        h1_codec::fields::Fields,
    ),
    End,
> {
    let mut deadline: Option<Pin<Box<Sleep>>> = None;
    loop {
        if !buf.is_empty() {
            let framed = io.framed_head(buf.len());
            match head::parse(buf, &settings.head, framed) {
                Parsed::Request {
                    body,
                    parts,
                    fields,
                    ..
                } => return Ok((body, parts, fields)),
                Parsed::Other => return Err(End::Handoff(buf.to_vec())),
                Parsed::Partial => {}
            }
            if deadline.is_none() {
                deadline = Some(Box::pin(tokio::time::sleep(settings.header_read_timeout)));
            }
        }
        match read(io, buf, shut, deadline.as_mut()).await {
            Read::Bytes => {}
            Read::Ended => return Err(End::Closed),
        }
    }
}

/// The client's side while a request is served: pipelined requests are
/// buffered (up to `max` bytes, a head's size; then TCP back-pressure), and
/// an end of stream ends it (the request is then cancelled, as hyper cancels
/// it: no half-close, so a client that left holds no member slot).
fn client_side<'b>(
    io: &'b mut ClientIo,
    buf: &'b mut BytesMut,
    max: usize,
) -> impl Future<Output = ()> + 'b {
    std::future::poll_fn(move |cx| {
        loop {
            if buf.len() >= max {
                return Poll::Pending;
            }
            match io.poll_fill::<4096>(buf, cx) {
                // A smuggling shape was cut behind this request: it is
                // answered, then hyper refuses what follows.
                Poll::Ready(Ok(0)) if io.was_cut() => return Poll::Pending,
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
    })
}

/// What waiting for a head's bytes ended with.
enum Read {
    Bytes,
    /// EOF, an error, the head deadline, or `shut`.
    Ended,
}

/// Reads more of a head into `buf`. While nothing is buffered, the buffer is
/// freed and the framing rests ([`ClientIo::rest`]): an idle connection holds
/// neither.
async fn read(
    io: &mut ClientIo,
    buf: &mut BytesMut,
    shut: &AtomicBool,
    mut deadline: Option<&mut Pin<Box<Sleep>>>,
) -> Read {
    std::future::poll_fn(|cx| {
        if shut.load(Ordering::Acquire) {
            return Poll::Ready(Read::Ended);
        }
        if let Some(d) = deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            tracing::debug!("request head not complete within limits.header_read_timeout; closing");
            return Poll::Ready(Read::Ended);
        }
        match io.poll_fill::<4096>(buf, cx) {
            Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(Read::Ended),
            Poll::Ready(Ok(_)) => Poll::Ready(Read::Bytes),
            Poll::Pending => {
                if buf.is_empty() {
                    *buf = BytesMut::new();
                    io.rest();
                }
                Poll::Pending
            }
        }
    })
    .await
}

/// What `body` says of its length.
fn length_of(body: &ProxyBody) -> BodyLength {
    if body.is_end_stream() {
        return BodyLength::None;
    }
    body.size_hint()
        .exact()
        .map_or(BodyLength::Unknown, BodyLength::Known)
}

/// A member's own reason phrase, which hyper's client keeps in the response's
/// extensions.
fn reason_of(parts: &http::response::Parts) -> Option<&[u8]> {
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    reason.map(|r| r.as_bytes())
}

/// Writes `answer` (to a `method` request); `Ok(false)`: the connection closes
/// after it.
fn write<'a>(
    io: &'a mut ClientIo,
    answer: Answer,
    method: &Method,
    date: &mut DateCache,
) -> impl Future<Output = std::io::Result<bool>> + 'a {
    // The head is encoded before the future is made: the future keeps only the
    // body, the encoder and the bytes to write (not the response beside them),
    // which keeps the connection's task small between requests.
    let Answer {
        response,
        fields,
        added,
        request_id,
    } = answer;
    let (parts, body) = response.into_parts();
    let length = length_of(&body);
    let mut out = Vec::with_capacity(1024);
    let to_write = ToWrite {
        parts: &parts,
        reason: reason_of(&parts),
        member: fields.as_ref(),
        added: &added,
        request_id: Some(request_id.as_bytes()),
        method,
        body: length,
    };
    let head = response::encode_head(&to_write, date, &mut out);
    drop((parts, fields));
    let (last, encoder) = (head.last, head.encoder);
    // Nothing to write (HEAD, 204, 304, an empty body): the body is dropped, as
    // hyper drops it, and the framing ended.
    let body = (length != BodyLength::None && encoder != Encoder::Length(0)).then_some(body);
    let mut w = Writing {
        body,
        encoder,
        out,
        last,
    };
    // Most bodies are whole by now (a member's response read with its head): one
    // small future writes them. A body still arriving is written by a boxed one,
    // so that its state (the body's, the waits') is no part of the connection's
    // task, which every idle connection keeps.
    match w.gather() {
        Ok(false) => futures_util::future::Either::Left(Box::pin(write_body(io, w))),
        ended => {
            // Only the bytes are kept for the write, not the spent body.
            let keep_alive = w.keep_alive();
            let mut out = w.out;
            futures_util::future::Either::Right(async move {
                ended?;
                flush(io, &mut out).await?;
                Ok(keep_alive)
            })
        }
    }
}

/// A response body being written: what is left of it (`None` once it has ended),
/// its framing, and the bytes not written yet.
struct Writing {
    body: Option<ProxyBody>,
    encoder: Encoder,
    out: Vec<u8>,
    /// The connection closes after this response.
    last: bool,
}

impl Writing {
    /// Appends what the body has ready now to `out`, until a frame is not ready or
    /// `GATHER` bytes wait (so `out` holds at most `GATHER` and one frame);
    /// `Ok(true)`: the body has ended (its end framing is in `out`).
    fn gather(&mut self) -> std::io::Result<bool> {
        if self.body.is_none() {
            return self.end(None).map(|()| true);
        }
        while let Some(b) = self.body.as_mut() {
            if self.out.len() >= GATHER {
                return Ok(false);
            }
            match b.frame().now_or_never() {
                Some(frame) => self.take(frame)?,
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Appends one frame of the body (`None`: it ended) to `out`.
    fn take(
        &mut self,
        frame: Option<
            Result<hyper::body::Frame<bytes::Bytes>, crate::request::phases::body::ProxyBodyError>,
        >,
    ) -> std::io::Result<()> {
        let Some(b) = self.body.as_mut() else {
            return Ok(());
        };
        match frame {
            None => {
                self.body = None;
                self.end(None)
            }
            Some(Err(e)) => Err(std::io::Error::other(e)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    if data.is_empty() && !b.is_end_stream() {
                        return Ok(());
                    }
                    let done = self.encoder.data(&data, &mut self.out) == response::Wrote::Done;
                    if b.is_end_stream() {
                        self.body = None;
                        self.end(None)
                    } else {
                        if done {
                            self.body = None;
                        }
                        Ok(())
                    }
                }
                Err(frame) => {
                    self.body = None;
                    self.encoder.end(frame.trailers_ref(), &mut self.out);
                    Ok(())
                }
            },
        }
    }

    /// The end of the body's framing; an error if it ended short of its length.
    fn end(&mut self, trailers: Option<&http::HeaderMap>) -> std::io::Result<()> {
        if self.encoder.end(trailers, &mut self.out) {
            Ok(())
        } else {
            Err(std::io::Error::other(
                "response body ended short of its length",
            ))
        }
    }

    /// Whether the connection carries on after this response.
    fn keep_alive(&self) -> bool {
        !self.last && self.encoder != Encoder::CloseDelimited
    }
}

/// The rest of [`write`] for a body still arriving: what is ready is gathered
/// into one write; what is gathered is written out before waiting for more.
async fn write_body(io: &mut ClientIo, mut w: Writing) -> std::io::Result<bool> {
    loop {
        if w.gather()? {
            break;
        }
        if !w.out.is_empty() {
            flush(io, &mut w.out).await?;
            continue;
        }
        let Some(b) = w.body.as_mut() else { break };
        let frame = b.frame().await;
        w.take(frame)?;
        if w.body.is_none() {
            // Ended, its framing in `out` already: `gather` would end it again
            // (a second `0\r\n\r\n` in front of the next response).
            break;
        }
    }
    flush(io, &mut w.out).await?;
    Ok(w.keep_alive())
}

async fn flush(io: &mut ClientIo, out: &mut Vec<u8>) -> std::io::Result<()> {
    if !out.is_empty() {
        io.write_all(out).await?;
        out.clear();
    }
    io.flush().await
}
