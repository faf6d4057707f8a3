//! The client side of h2 on the router's own framing (`h2-codec`): one
//! driver per connection reads the client's frames, starts each request's
//! answer ([`Proxy::response`](crate::request::Proxy::response), routed,
//! balanced and forwarded as every request is), and writes the responses
//! back through the client's flow-control windows ([`streams`]).
//!
//! Everything runs in the connection's task: a request's answer is a future
//! the driver polls (not a task of its own), its response body is pulled
//! from the member only when the client's windows and the socket have room,
//! and a request body is handed over as the client sends it ([`inbox`]),
//! its window opened again as the request path reads it.
//!
//! Why: hyper's h2 server and the `h2` crate cost 21,013 user-space
//! instructions a request on a toy server where this codec costs 6,583
//! (`bench/h2_toys.py`); on the router that gap was what kept h2 over TLS
//! behind haproxy (see `bench/RESULTS.md`).
//!
//! The bounds a client meets are the codec's (`h2_codec::conn::Limits`:
//! concurrent streams, windows, header block size, reset and control-frame
//! floods) and the connection's: a client that stops reading
//! ([`ClientIo`]'s write deadline), whose windows stay shut
//! ([`Activity::stalled`](super::activity::Activity::stalled)), or that
//! stops answering the keep-alive PING (`limits.h2_keepalive_*`) is closed;
//! a quiet one by the connection's idle deadline. A drain sends GOAWAY and
//! ends the connection once its streams are done.

/// Public for the fuzz targets (`fuzz/`: `member_response` writes each
/// member head it reads as an h2 block).
pub mod head;
mod inbox;
mod streams;

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::task::AtomicWaker;
use h1_codec::encode::response::DateCache;
use h2_codec::conn::{Conn, Event, Limits};
use tokio::io::AsyncWrite as _;
use tokio::time::{Instant, Sleep};

use self::streams::{Answering, HIGH_WATER, Streams};
use super::client_conn::ClientConn;
use super::client_io::ClientIo;
use super::own_waker::Flag;
use crate::request::Proxy;

/// What the driver needs from `limits`.
#[derive(Clone, Debug)]
pub struct Settings {
    limits: Limits,
    /// `limits.h2_keepalive_interval`: a PING after this long with nothing read.
    keepalive: Duration,
    /// `limits.h2_keepalive_timeout`: its answer within this.
    keepalive_timeout: Duration,
}

impl Settings {
    pub fn of(limits: &super::limits::Limits) -> Settings {
        let header = u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX);
        Settings {
            limits: Limits {
                max_concurrent_streams: limits.h2_max_concurrent_streams,
                max_header_list: header,
                max_header_block: limits.max_header_bytes,
                // Every stream the client may hold, cancelled twice a second
                // (a page left, then the next): past that, a rapid reset
                // (nginx's bound on new streams is the same, 2 x concurrent).
                max_resets: limits.h2_max_concurrent_streams.saturating_mul(2),
                ..Limits::default()
            },
            keepalive: limits.h2_keepalive_interval,
            keepalive_timeout: limits.h2_keepalive_timeout,
        }
    }
}

/// How an h2 connection ended.
pub type Ended = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// [`run`], then the connection closed: the FIN after the GOAWAY, and what
/// the client still sends read and dropped for a moment, so that no reset
/// overtakes it. Boxed (the settings moved in): inline, the driver's state
/// would be in every connection's task, HTTP/1.1 ones included.
pub fn serve<'a>(
    io: &'a mut ClientIo,
    read: Vec<u8>,
    proxy: impl Fn() -> Arc<Proxy> + Send + Sync + 'a,
    client: &'a Arc<ClientConn>,
    finish: &'a AtomicBool,
    settings: Settings,
) -> Pin<Box<impl std::future::Future<Output = Ended> + Send + 'a>> {
    Box::pin(async move {
        let ended = run(io, read, proxy, client, finish, settings).await;
        let _ = tokio::io::AsyncWriteExt::shutdown(io).await;
        ended
    })
}

/// Serves h2 on `io` (`read`: bytes read already, the preface's start)
/// until the client closes, a connection error, or, once `finish` is set
/// (drain, idle), its last stream is done.
pub async fn run(
    io: &mut ClientIo,
    read: Vec<u8>,
    proxy: impl Fn() -> Arc<Proxy> + Send,
    client: &Arc<ClientConn>,
    finish: &AtomicBool,
    settings: Settings,
) -> Ended {
    let waker = Arc::new(AtomicWaker::new());
    let mut driver = Driver {
        h2: Conn::new(settings.limits.clone()),
        read: BytesMut::from(&read[..]),
        events: Vec::new(),
        streams: Streams::new(waker.clone()),
        keepalive: Keepalive::new(&settings),
        date: DateCache::default(),
        failed: None,
        waker,
        peer: client.ip,
    };
    let mut answer = |id: u32, req| -> Answering {
        let (proxy, client) = (proxy(), client.clone());
        Box::pin(async move { (id, proxy.answer(client, Box::new(req), None).await) })
    };
    if !driver.read.is_empty() {
        driver.frames(&mut answer);
    }
    std::future::poll_fn(|cx| driver.poll(cx, io, finish, &mut answer)).await
}

/// One connection's state.
struct Driver {
    h2: Conn,
    read: BytesMut,
    events: Vec<Event>,
    streams: Streams,
    keepalive: Keepalive,
    date: DateCache,
    /// A connection error: its GOAWAY is written, then the connection ends.
    failed: Option<h2_codec::Error>,
    waker: Arc<AtomicWaker>,
    /// The client, for the log.
    peer: std::net::IpAddr,
}

impl Driver {
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut ClientIo,
        finish: &AtomicBool,
        answer: &mut impl FnMut(
            u32,
            http::Request<crate::request::phases::upload::Received>,
        ) -> Answering,
    ) -> Poll<Ended> {
        self.waker.register(cx.waker());
        if finish.load(Ordering::Acquire) {
            self.h2.go_away();
        }
        loop {
            let mut moved = false;
            if self.failed.is_none() && self.h2.output().len() < HIGH_WATER {
                match io.poll_fill::<{ 16 * 1024 }>(&mut self.read, cx) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Ok(())),
                    Poll::Ready(Ok(_)) => {
                        self.keepalive.read(&mut self.h2);
                        self.frames(answer);
                        moved = true;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                    Poll::Pending => {}
                }
            }
            moved |= self.streams.poll(cx, &mut self.h2, &mut self.date);
            if let Poll::Ready(why) = self.keepalive.poll(cx, &mut self.h2) {
                return Poll::Ready(Err(why.into()));
            }
            let had = self.h2.output().len();
            match poll_write_out(io, self.h2.output(), cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                // Written out: room again to read and to pull bodies, which
                // stopped at HIGH_WATER with no waker of theirs to call.
                Poll::Ready(Ok(())) if had >= HIGH_WATER => moved = true,
                _ => {}
            }
            if self.h2.output().is_empty() {
                if let Some(e) = self.failed.take() {
                    return Poll::Ready(Err(e.into()));
                }
                if self.h2.going_away() && self.streams.is_empty() {
                    return Poll::Ready(Ok(()));
                }
            }
            if !moved {
                if self.streams.is_empty() {
                    self.rest();
                }
                return Poll::Pending;
            }
        }
    }

    /// Nothing in flight: the buffers a busy connection grew are let go, so
    /// that an idle one keeps none (its output is written out by now, or
    /// waits on the socket and is kept).
    fn rest(&mut self) {
        let out = self.h2.output();
        if out.is_empty() {
            *out = BytesMut::new();
        }
        if self.events.capacity() > 8 {
            self.events = Vec::new();
        }
    }

    /// The frames read so far, and what they meant.
    fn frames(
        &mut self,
        answer: &mut impl FnMut(
            u32,
            http::Request<crate::request::phases::upload::Received>,
        ) -> Answering,
    ) {
        let read = self.h2.read(&mut self.read, &mut self.events);
        for event in self.events.drain(..) {
            if let Event::Pong = event {
                self.keepalive.answered();
            }
            self.streams.on(event, &mut self.h2, answer);
        }
        if let Err(e) = read {
            if e.code == h2_codec::Code::ENHANCE_YOUR_CALM {
                // A flood: worth an operator's eye, and rate-limited as
                // every line a client can cause is (`log_limit`).
                tracing::warn!(target: "h2_server", client = %self.peer, error = %e, "h2 client flooded the connection; GOAWAY sent, closed");
            } else {
                tracing::debug!(client = %self.peer, error = %e, "h2 connection error; GOAWAY sent");
            }
            self.failed = Some(e);
        }
        if self.read.is_empty() {
            // Nothing partial: an idle connection keeps no buffer.
            self.read = BytesMut::new();
        }
    }
}

/// Writes `out` (as far as the socket takes it) and flushes; `Ready(Ok)`
/// once all of it is out. A large buffer left empty is let go.
fn poll_write_out(
    io: &mut ClientIo,
    out: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<()>> {
    let mut wrote = false;
    while !out.is_empty() {
        match Pin::new(&mut *io).poll_write(cx, out) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
            Poll::Ready(Ok(n)) => {
                let _ = out.split_to(n);
                wrote = true;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    }
    if out.capacity() > HIGH_WATER {
        *out = BytesMut::new();
    }
    if !wrote {
        return Poll::Ready(Ok(()));
    }
    Pin::new(io).poll_flush(cx)
}

/// The keep-alive PING and the flood counts' second, on one timer that
/// reads and client frames never touch: it is polled only when it fires
/// (its own waker), and re-armed then from when the client was last read.
struct Keepalive {
    interval: Duration,
    timeout: Duration,
    last_read: Instant,
    second: Instant,
    /// When the unanswered PING went out.
    pinged: Option<Instant>,
    tick: Pin<Box<Sleep>>,
    flag: Arc<Flag>,
    first: bool,
}

/// The keep-alive PING's opaque bytes.
const PING: [u8; 8] = *b"router:)";

impl Keepalive {
    fn new(settings: &Settings) -> Keepalive {
        let now = Instant::now();
        Keepalive {
            interval: settings.keepalive,
            timeout: settings.keepalive_timeout,
            last_read: now,
            second: now,
            pinged: None,
            tick: Box::pin(tokio::time::sleep_until(now + settings.keepalive)),
            flag: Arc::new(Flag::default()),
            first: true,
        }
    }

    /// The client sent something: a new second for the flood counts?
    fn read(&mut self, h2: &mut Conn) {
        let now = Instant::now();
        if now >= self.second + Duration::from_secs(1) {
            h2.second();
            self.second = now;
        }
        self.last_read = now;
    }

    fn answered(&mut self) {
        self.pinged = None;
    }

    /// `Ready`: the client did not answer the PING in time.
    fn poll(&mut self, cx: &mut Context<'_>, h2: &mut Conn) -> Poll<&'static str> {
        let woken = self.flag.woken(cx.waker());
        if !std::mem::take(&mut self.first) && !woken {
            return Poll::Pending;
        }
        let waker = std::task::Waker::from(self.flag.clone());
        let mut own = Context::from_waker(&waker);
        while self.tick.as_mut().poll(&mut own).is_ready() {
            let now = Instant::now();
            let next = match self.pinged {
                Some(at) if now >= at + self.timeout => {
                    return Poll::Ready(
                        "no answer to the keep-alive PING (limits.h2_keepalive_timeout)",
                    );
                }
                Some(at) => at + self.timeout,
                None if now >= self.last_read + self.interval => {
                    h2.ping(PING);
                    self.pinged = Some(now);
                    now + self.timeout
                }
                None => self.last_read + self.interval,
            };
            self.tick.as_mut().reset(next);
        }
        Poll::Pending
    }
}
