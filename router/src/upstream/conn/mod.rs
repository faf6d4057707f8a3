//! One HTTP/1.1 connection to a member, driven by the request that uses it, and what
//! its errors mean.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;

use super::request_body::{RequestBody, RequestBodyError};
use crate::metrics::UpstreamError;
use h1_codec::BodyFraming;
use h1_codec::encode;
use h1_codec::response::{self as h1, Chunked, Decoded, ParseError};

mod errors;
pub use errors::{ExchangeError, ResponseBodyError, SendError, local_shortage};
mod member_io;
pub use member_io::{MemberIo, MemberTls};
mod outgoing;
pub use outgoing::Encoded;
use outgoing::*;

/// A member's response head: status, version and reason phrase in a response
/// whose map is empty, its fields as they came in the body's place (the client's
/// own HTTP/1.1 path writes them on without a map; see [`h1_codec::fields`]).
pub type MemberHead = Response<h1_codec::fields::Fields>;

/// One HTTP/1.1 connection to a member, framed by `h1`. Boxed: a connection
/// moves at every step of a request (out of the idle list, into the response's
/// body, back into the list), and a word moves cheaper than its state (about
/// 200 instructions a request less, `bench/instructions.py`); it is allocated
/// once per member connection, not per request.
pub struct Upstream(Box<UpstreamState>);

impl std::ops::Deref for Upstream {
    type Target = UpstreamState;
    fn deref(&self) -> &UpstreamState {
        &self.0
    }
}

impl std::ops::DerefMut for Upstream {
    fn deref_mut(&mut self) -> &mut UpstreamState {
        &mut self.0
    }
}

/// What an [`Upstream`] holds.
pub struct UpstreamState {
    io: MemberIo,
    /// The TLS server name, for TLS members: reused only for the same host.
    sni: Option<Arc<str>>,
    /// When it was last returned idle; `None` if it was never used before.
    idle_since: Option<Instant>,
    /// Bytes read from the member and not yet handed on.
    rbuf: BytesMut,
    /// Where the current response's body stands.
    body: BodyState,
    /// The member may take another request once this response has ended.
    keep_alive: bool,
    /// The response-head deadline's timer, armed lazily (see [`Upstream::past`]).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The per-core worker whose reactor the connection is registered with, whose
    /// idle list it goes back to (see [`super::Pool`]); 0 without workers.
    home: usize,
}

/// The response body being read.
#[derive(Debug)]
enum BodyState {
    /// Ended (or not begun): the connection is between messages.
    Done,
    Length(u64),
    Chunked(Chunked),
    /// Up to the member's close.
    Close,
}

/// How much of a member's bytes one read takes at most.
const READ_CHUNK: usize = 8 * 1024;
/// How much of a request body is gathered before it is written.
const WRITE_BATCH: usize = 64 * 1024;

/// How a new connection is made, from `upstream.*` (how idle ones are kept is
/// [`PoolSettings`](super::PoolSettings)).
#[derive(Clone, Copy, Debug)]
pub struct ConnectSettings {
    pub connect_timeout: Duration,
}

/// A TCP connection to `target` by `deadline`, without delay on small writes.
pub async fn dial(
    addr: &Arc<str>,
    target: SocketAddr,
    deadline: tokio::time::Instant,
) -> Result<TcpStream, SendError> {
    let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(target)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => {
            return Err(SendError::Connect {
                addr: addr.clone(),
                source,
            });
        }
        Err(_) => return Err(SendError::ConnectTimeout { addr: addr.clone() }),
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

impl Upstream {
    /// Opens a new connection to `addr` (`target`, its parsed form), with TLS if
    /// `tls` is given. The connect timeout covers the TLS handshake too.
    pub async fn connect(
        addr: &Arc<str>,
        target: Option<SocketAddr>,
        settings: ConnectSettings,
        tls: Option<MemberTls<'_>>,
    ) -> Result<Upstream, SendError> {
        let addr = addr.clone();
        let target: SocketAddr = match target {
            Some(a) => a,
            None => {
                return Err(SendError::Connect {
                    addr,
                    source: io::Error::new(io::ErrorKind::InvalidInput, "not an IP address"),
                });
            }
        };
        let deadline = tokio::time::Instant::now() + settings.connect_timeout;
        let stream = dial(&addr, target, deadline).await?;
        let (io, sni) = match tls {
            None => (MemberIo::Plain(stream), None),
            Some(tls) => {
                let name =
                    rustls::pki_types::ServerName::try_from(tls.host.to_string()).map_err(|e| {
                        SendError::Tls {
                            addr: addr.clone(),
                            source: io::Error::new(io::ErrorKind::InvalidInput, e),
                        }
                    })?;
                match tokio::time::timeout_at(deadline, tls.connector.connect(name, stream)).await {
                    Ok(Ok(s)) => (MemberIo::Tls(Box::new(s)), Some(Arc::from(tls.host))),
                    Ok(Err(source)) => return Err(SendError::Tls { addr, source }),
                    Err(_) => return Err(SendError::ConnectTimeout { addr }),
                }
            }
        };
        Ok(Upstream(Box::new(UpstreamState {
            io,
            sni,
            idle_since: None,
            rbuf: BytesMut::new(),
            body: BodyState::Done,
            keep_alive: true,
            timer: None,
            home: 0,
        })))
    }

    /// Sends a request that asks for an upgrade (WebSocket) through hyper's client,
    /// which drives the switch in a task of its own; the connection is never pooled.
    pub async fn send_upgrade(
        self,
        addr: &Arc<str>,
        req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let http = |source| SendError::Http {
            addr: addr.clone(),
            reused: false,
            source,
        };
        let (mut sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(self.0.io))
            .await
            .map_err(http)?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        sender.send_request(req).await.map_err(http)
    }
}

impl UpstreamState {
    /// The worker whose idle list the connection returns to.
    pub fn home(&self) -> usize {
        self.home
    }

    /// Opened on worker `worker` (its reactor has the connection's I/O).
    pub fn set_home(&mut self, worker: usize) {
        self.home = worker;
    }

    /// The TLS server name this connection was made for (`None`: plain TCP).
    pub fn sni(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    /// Whether this connection had served a request before.
    pub fn reused(&self) -> bool {
        self.idle_since.is_some()
    }

    /// Sends `req` and waits for the response head, writing the request body
    /// meanwhile; the response body is then read through [`Upstream::poll_body`].
    /// A member that answers before it has read the whole body (a 413, say) gets
    /// its answer taken, and the connection is not reused.
    /// `Err(None)`: no response head within `within`.
    pub async fn send(
        &mut self,
        addr: &Arc<str>,
        req: &mut Encoded,
        within: Duration,
    ) -> Result<MemberHead, Option<SendError>> {
        let deadline = tokio::time::Instant::now() + within;
        let reused = self.reused();
        let Encoded {
            ex,
            body,
            head_request,
        } = req;
        let head_request = *head_request;
        let result =
            std::future::poll_fn(|cx| match self.poll_exchange(cx, ex, body, head_request) {
                Poll::Ready(r) => Poll::Ready(Some(r)),
                Poll::Pending if self.past(cx, deadline) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            })
            .await;
        let Some(result) = result else {
            self.keep_alive = false;
            return Err(None);
        };
        match result {
            Ok(head) => {
                // An answer before the whole request was written ends the exchange:
                // what is left of the body cannot be sent on this connection.
                self.keep_alive = head.keep_alive && ex.done && ex.written == ex.out.len();
                self.body = match head.framing {
                    BodyFraming::Empty => BodyState::Done,
                    BodyFraming::Length(n) => BodyState::Length(n),
                    BodyFraming::Chunked => BodyState::Chunked(Chunked::default()),
                    BodyFraming::Close => BodyState::Close,
                };
                let mut response = Response::new(head.fields);
                *response.status_mut() = head.status;
                *response.version_mut() = head.version;
                if let Some(reason) = head
                    .reason
                    .and_then(|r| hyper::ext::ReasonPhrase::try_from(r).ok())
                {
                    response.extensions_mut().insert(reason);
                }
                Ok(response)
            }
            Err(source) => {
                self.keep_alive = false;
                Err(Some(SendError::Exchange {
                    addr: addr.clone(),
                    reused,
                    source,
                }))
            }
        }
    }

    /// Whether `deadline` has passed, with the waker registered for it if not.
    ///
    /// One timer per connection, re-armed only when it fires before the current
    /// deadline (it was set for an earlier request) or a nearer one comes (a
    /// reload shortened `response_timeout`): a request costs no registration in
    /// the timer wheel, where a `tokio::time::timeout` per request registered and
    /// cleared an entry each time.
    fn past(&mut self, cx: &mut Context<'_>, deadline: tokio::time::Instant) -> bool {
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() > deadline {
            timer.as_mut().reset(deadline);
        }
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if tokio::time::Instant::now() >= deadline {
                return true;
            }
            timer.as_mut().reset(deadline);
        }
    }

    /// Writes what it can of the request and reads what the member sent, until a
    /// final response head is complete.
    fn poll_exchange(
        &mut self,
        cx: &mut Context<'_>,
        ex: &mut Outgoing,
        body: &mut RequestBody,
        head_request: bool,
    ) -> Poll<Result<h1::ResponseHead, ExchangeError>> {
        loop {
            if let Some(head) = h1::parse_response_head(&mut self.rbuf, head_request)? {
                return Poll::Ready(Ok(head));
            }
            let mut progressed = false;
            if !ex.finished() {
                match ex.poll_write(cx, &mut self.io, body) {
                    Poll::Ready(Ok(p)) => progressed |= p,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into_exchange(&self.rbuf))),
                    Poll::Pending => {}
                }
            }
            match poll_fill(&mut self.io, &mut self.rbuf, cx) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(ExchangeError::Closed)),
                Poll::Ready(Ok(_)) => progressed = true,
                Poll::Ready(Err(source)) => {
                    return Poll::Ready(Err(ExchangeError::Io {
                        before_response: self.rbuf.is_empty(),
                        source,
                    }));
                }
                Poll::Pending => {}
            }
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    /// The next frame of the response body; `None` once it has ended.
    pub fn poll_body(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        loop {
            match &mut self.body {
                BodyState::Done => return Poll::Ready(None),
                BodyState::Length(0) => {
                    self.body = BodyState::Done;
                    return Poll::Ready(None);
                }
                BodyState::Length(left) if !self.rbuf.is_empty() => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(self.rbuf.len());
                    *left -= take as u64;
                    if *left == 0 {
                        self.body = BodyState::Done;
                    }
                    let data = self.rbuf.split_to(take).freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                BodyState::Close if !self.rbuf.is_empty() => {
                    let data = self.rbuf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                BodyState::Chunked(_) => {
                    if let Some(frame) = self.chunked_frame() {
                        return Poll::Ready(frame);
                    }
                }
                BodyState::Length(_) | BodyState::Close => {}
            }
            match ready!(poll_fill(&mut self.io, &mut self.rbuf, cx)) {
                Ok(0) if matches!(self.body, BodyState::Close) => {
                    self.body = BodyState::Done;
                    return Poll::Ready(None);
                }
                Ok(0) => {
                    self.broken();
                    return Poll::Ready(Some(Err(ResponseBodyError::Incomplete)));
                }
                Ok(_) => {}
                Err(e) => {
                    self.broken();
                    return Poll::Ready(Some(Err(e.into())));
                }
            }
        }
    }

    /// What the chunked decoder makes of the bytes read: a frame (the
    /// trailers are the last: the body has ended with them, a server may never
    /// poll past them), the end, or `None` when it needs more bytes.
    #[inline]
    fn chunked_frame(&mut self) -> Option<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        let BodyState::Chunked(chunked) = &mut self.body else {
            return None;
        };
        match chunked.decode(&mut self.rbuf) {
            Ok(Decoded::Data(data)) => Some(Some(Ok(Frame::data(data)))),
            Ok(Decoded::Trailers(t)) => {
                self.body = BodyState::Done;
                Some(Some(Ok(Frame::trailers(t))))
            }
            Ok(Decoded::End) => {
                self.body = BodyState::Done;
                Some(None)
            }
            Ok(Decoded::More) => None,
            Err(e) => {
                self.broken();
                Some(Some(Err(e.into())))
            }
        }
    }

    /// The response body has ended (or there was none).
    pub fn body_ended(&self) -> bool {
        matches!(self.body, BodyState::Done)
    }

    /// What is known of the response body's length.
    pub fn body_size_hint(&self) -> SizeHint {
        match self.body {
            BodyState::Done => SizeHint::with_exact(0),
            BodyState::Length(n) => SizeHint::with_exact(n),
            BodyState::Chunked(_) | BodyState::Close => SizeHint::default(),
        }
    }

    /// Never to be reused (the stream is no longer at a message boundary).
    fn broken(&mut self) {
        self.keep_alive = false;
        self.body = BodyState::Done;
    }

    /// Whether it can take another request: the last response ended at a message
    /// boundary with keep-alive, nothing unasked-for arrived since, and the member
    /// has not closed it. Cheap: the socket is only read if the runtime saw it
    /// become readable.
    pub fn is_reusable(&mut self) -> bool {
        if !self.ended_cleanly() {
            return false;
        }
        let mut cx = Context::from_waker(std::task::Waker::noop());
        poll_fill(&mut self.io, &mut self.rbuf, &mut cx).is_pending()
    }

    /// The last response ended at a message boundary with keep-alive and nothing
    /// unasked-for is buffered: [`Upstream::is_reusable`] without looking at the
    /// socket (what a connection going back to its pool is checked for; whether
    /// the member closed it meanwhile is looked at when it is taken again).
    pub fn ended_cleanly(&self) -> bool {
        self.keep_alive && self.body_ended() && self.rbuf.is_empty()
    }

    /// Whether it has been idle longer than `limit` at `now`.
    pub fn expired(&self, now: Instant, limit: Duration) -> bool {
        self.idle_since
            .is_some_and(|t| now.saturating_duration_since(t) >= limit)
    }

    /// Goes idle: the read buffer (empty, see [`Upstream::ended_cleanly`]) is
    /// freed, not kept while the connection waits in its pool: the next response
    /// reserves one anyway, the last body's bytes having shared this one.
    pub(super) fn mark_idle(&mut self, now: Instant) {
        self.idle_since = Some(now);
        self.rbuf = BytesMut::new();
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("sni", &self.sni).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_is_never_the_members_fault() {
        for errno in [libc::EMFILE, libc::ENFILE] {
            let e = SendError::Connect {
                addr: Arc::from("10.0.0.1:80"),
                source: io::Error::from_raw_os_error(errno),
            };
            assert_eq!(e.kind(), UpstreamError::LocalResources);
            assert!(!e.kind().members_fault());
        }
        let refused = SendError::Connect {
            addr: Arc::from("10.0.0.1:80"),
            source: io::Error::from_raw_os_error(libc::ECONNREFUSED),
        };
        assert_eq!(refused.kind(), UpstreamError::Connect);
        assert!(refused.kind().members_fault());
    }
}
