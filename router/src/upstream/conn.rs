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

/// A member's response head: status, version and reason phrase in a response
/// whose map is empty, its fields as they came in the body's place (the client's
/// own HTTP/1.1 path writes them on without a map; see [`h1_codec::fields`]).
pub type MemberHead = Response<h1_codec::fields::Fields>;

/// The byte stream to a member: plain TCP or TLS over it.
pub enum MemberIo {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl tokio::io::AsyncRead for MemberIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for MemberIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MemberIo::Plain(s) => s.is_write_vectored(),
            MemberIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_flush(cx),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// TLS towards a member: the connector and the name to ask for and verify.
pub struct MemberTls<'a> {
    pub connector: &'a tokio_rustls::TlsConnector,
    pub host: &'a str,
}

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

/// What went wrong in one request and response with a member.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The member closed the connection before a whole response head.
    #[error("connection closed before a response")]
    Closed,
    #[error("{source}")]
    Io {
        source: io::Error,
        /// No byte of a response had arrived.
        before_response: bool,
    },
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// The client's request body, on its way to the member, failed.
    #[error("{0}")]
    Body(#[from] RequestBodyError),
}

/// Why a member's response body broke off (the client's connection is then
/// aborted: HTTP/1 cannot say it otherwise).
#[derive(Debug, thiserror::Error)]
pub enum ResponseBodyError {
    #[error("member response body: {0}")]
    Io(#[from] io::Error),
    #[error("member closed the connection before the end of the response body")]
    Incomplete,
    #[error("member response body: {0}")]
    Parse(#[from] ParseError),
}

/// The error is this process running out of something (file descriptors, memory),
/// not the peer refusing: it must never count against a member.
pub fn local_shortage(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Why a connection to a member could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: Arc<str>,
        #[source]
        source: io::Error,
    },
    #[error("connect to {addr}: timed out")]
    ConnectTimeout { addr: Arc<str> },
    #[error("TLS to {addr}: {source}")]
    Tls {
        addr: Arc<str>,
        #[source]
        source: io::Error,
    },
    /// An upgrade request (hyper's client drives those).
    #[error("member {addr}: {source}")]
    Http {
        addr: Arc<str>,
        /// The connection had served a request before (a pooled one).
        reused: bool,
        #[source]
        source: hyper::Error,
    },
    #[error("member {addr}: {source}")]
    Exchange {
        addr: Arc<str>,
        /// The connection had served a request before (a pooled one).
        reused: bool,
        #[source]
        source: ExchangeError,
    },
}

impl SendError {
    /// The kind, for the status code and the metric.
    pub fn kind(&self) -> UpstreamError {
        match self {
            SendError::Connect { source, .. } if local_shortage(source) => {
                UpstreamError::LocalResources
            }
            SendError::Connect { .. } => UpstreamError::Connect,
            SendError::ConnectTimeout { .. } => UpstreamError::ConnectTimeout,
            SendError::Tls { .. } => UpstreamError::Tls,
            // hyper's "user" errors here come from the request body we stream: the
            // client's side failed, not the member.
            SendError::Http { source, .. } if source.is_user() => {
                match std::error::Error::source(source).and_then(|e| e.downcast_ref()) {
                    Some(RequestBodyError::Stalled(_)) => UpstreamError::ClientTimeout,
                    _ => UpstreamError::ClientBody,
                }
            }
            SendError::Http { source, .. } if source.is_parse() => UpstreamError::Protocol,
            SendError::Http { .. } => UpstreamError::Reset,
            SendError::Exchange { source, .. } => match source {
                // The client's side failed, not the member.
                ExchangeError::Body(RequestBodyError::Stalled(_)) => UpstreamError::ClientTimeout,
                ExchangeError::Body(_) => UpstreamError::ClientBody,
                ExchangeError::Parse(_) => UpstreamError::Protocol,
                ExchangeError::Closed | ExchangeError::Io { .. } => UpstreamError::Reset,
            },
        }
    }

    /// The member closed or reset the connection before sending any response byte:
    /// the one failure after which an idempotent request may be sent again (as
    /// nginx's default `proxy_next_upstream error` does). A garbled response or a
    /// timeout is not one of them.
    pub fn closed_before_response(&self) -> bool {
        let source = match self {
            SendError::Exchange { source, .. } => {
                return match source {
                    ExchangeError::Closed => true,
                    ExchangeError::Io {
                        source,
                        before_response: true,
                    } => closed_kind(source),
                    _ => false,
                };
            }
            SendError::Http { source, .. } => source,
            _ => return false,
        };
        if source.is_user() {
            return false;
        }
        if source.is_incomplete_message() || source.is_canceled() || source.is_closed() {
            return true;
        }
        // A reset while writing the request or waiting for the head.
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            std::error::Error::source(source);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return closed_kind(io);
            }
            cause = e.source();
        }
        false
    }

    /// The connection had served a request before: its close was likely the
    /// member's keep-alive timeout, not the member dying.
    pub fn on_reused(&self) -> bool {
        matches!(
            self,
            SendError::Http { reused: true, .. } | SendError::Exchange { reused: true, .. }
        )
    }
}

/// The peer closed or reset the connection (not some other I/O failure).
fn closed_kind(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

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
                BodyState::Chunked(chunked) => match chunked.decode(&mut self.rbuf) {
                    Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                    // Trailers are the last frame: the body has ended with them
                    // (a server may never poll past them).
                    Ok(Decoded::Trailers(t)) => {
                        self.body = BodyState::Done;
                        return Poll::Ready(Some(Ok(Frame::trailers(t))));
                    }
                    Ok(Decoded::End) => {
                        self.body = BodyState::Done;
                        return Poll::Ready(None);
                    }
                    Ok(Decoded::More) => {}
                    Err(e) => {
                        self.broken();
                        return Poll::Ready(Some(Err(e.into())));
                    }
                },
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

    pub(super) fn mark_idle(&mut self, now: Instant) {
        self.idle_since = Some(now);
    }
}

/// A request to send: its head encoded once, its body as it comes. One without a
/// body can be sent again exactly ([`Encoded::rewind`]), on another connection.
pub struct Encoded {
    ex: Outgoing,
    body: RequestBody,
    head_request: bool,
}

impl Encoded {
    pub fn new(req: Request<RequestBody>) -> Encoded {
        let (mut parts, body) = req.into_parts();
        let body_len = (!body.is_end_stream()).then(|| body.size_hint().exact());
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut out = Vec::with_capacity(512);
        let framing = encode::encode_request_head(
            &parts.method,
            target,
            &mut parts.headers,
            body_len,
            &mut out,
        );
        Encoded::with(out, framing, &parts.method, body)
    }

    /// A request whose head is written already (`head`, by the caller: the
    /// client's fields as they came, their `Content-Length` with them); its body,
    /// if it has one, is sent as it comes, as long as that length says.
    pub fn from_head(head: Vec<u8>, method: &Method, body: RequestBody) -> Encoded {
        let framing = if body.is_end_stream() {
            BodyFraming::Empty
        } else {
            BodyFraming::Length(body.size_hint().exact().unwrap_or(0))
        };
        Encoded::with(head, framing, method, body)
    }

    pub fn with(out: Vec<u8>, framing: BodyFraming, method: &Method, body: RequestBody) -> Encoded {
        Encoded {
            ex: Outgoing {
                out,
                written: 0,
                chunked: framing == BodyFraming::Chunked,
                done: framing == BodyFraming::Empty,
                trailers: None,
                flushed: false,
            },
            body,
            head_request: method == Method::HEAD,
        }
    }

    /// The request has no body: all of it is the encoded head.
    pub fn has_no_body(&self) -> bool {
        matches!(self.body, RequestBody::Empty) && self.ex.done
    }

    /// Makes a request without a body ready to be sent again from its start.
    pub fn rewind(&mut self) {
        if self.has_no_body() {
            self.ex.written = 0;
            self.ex.flushed = false;
        }
    }
}

/// A request on its way out: its encoded bytes and where its body stands.
struct Outgoing {
    out: Vec<u8>,
    written: usize,
    chunked: bool,
    /// The body has ended (its last bytes are in `out`).
    done: bool,
    /// Trailers, sent with the last chunk.
    trailers: Option<http::HeaderMap>,
    /// Everything written has been flushed (out of a TLS buffer too).
    flushed: bool,
}

/// A failure while writing a request.
enum WriteError {
    Io(io::Error),
    Body(RequestBodyError),
}

impl WriteError {
    fn into_exchange(self, rbuf: &BytesMut) -> ExchangeError {
        match self {
            WriteError::Io(source) => ExchangeError::Io {
                before_response: rbuf.is_empty(),
                source,
            },
            WriteError::Body(e) => ExchangeError::Body(e),
        }
    }
}

impl Outgoing {
    fn finished(&self) -> bool {
        self.done && self.written == self.out.len() && self.flushed
    }

    /// Gathers the body frames that are ready, then writes; `Ready(Ok(true))` if
    /// anything moved.
    fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut MemberIo,
        body: &mut RequestBody,
    ) -> Poll<Result<bool, WriteError>> {
        let mut progressed = false;
        loop {
            while !self.done && self.out.len() - self.written < WRITE_BATCH {
                match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        progressed = true;
                        match frame.into_data() {
                            Ok(data) if self.chunked => encode::encode_chunk(&data, &mut self.out),
                            Ok(data) => self.out.extend_from_slice(&data),
                            Err(frame) => {
                                if let Ok(t) = frame.into_trailers() {
                                    self.trailers = Some(t);
                                }
                            }
                        }
                    }
                    Poll::Ready(None) => {
                        progressed = true;
                        if self.chunked {
                            encode::encode_last_chunk(self.trailers.as_ref(), &mut self.out);
                        }
                        self.done = true;
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(WriteError::Body(e))),
                    Poll::Pending => break,
                }
            }
            if self.written < self.out.len() {
                match Pin::new(&mut *io).poll_write(cx, &self.out[self.written..]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(WriteError::Io(io::ErrorKind::WriteZero.into())));
                    }
                    Poll::Ready(Ok(n)) => {
                        progressed = true;
                        self.flushed = false;
                        self.written += n;
                        if self.written == self.out.len() && !self.done {
                            self.out.clear();
                            self.written = 0;
                        }
                        continue;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(WriteError::Io(e))),
                    Poll::Pending => {}
                }
            } else {
                // All written so far: push it out of any TLS buffer.
                match Pin::new(&mut *io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.flushed = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(WriteError::Io(e))),
                    Poll::Pending => {}
                }
            }
            return if progressed {
                Poll::Ready(Ok(true))
            } else {
                Poll::Pending
            };
        }
    }
}

/// Reads what the member sent into `buf` (`Ok(0)`: it closed).
fn poll_fill(
    io: &mut MemberIo,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
    std::pin::pin!(io.read_buf(buf)).poll(cx)
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
