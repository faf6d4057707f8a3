//! Client-facing listeners: accept, limit, serve each connection, drain.
//!
//! The accept loop only accepts: it accepts a client, takes a connection slot for
//! it, then spawns a task that owns the connection. At `limits.max_connections` a
//! new client evicts the connection that has been quiet the longest (no request in
//! flight: a slowloris head that never ends, an idle keep-alive), as nginx reuses
//! its keep-alive connections when it runs out; when every connection is busy, the
//! new client waits for a slot and the ones behind it wait in the kernel backlog.
//! An HTTP/1.1 connection starts on the router's own path ([`super::h1`]) and is
//! handed to hyper at the first request that path does not take; hyper serves the
//! rest, enforces the header size and count limits (431) and the request-head
//! read timeout (slowloris), and hands upgraded connections back for tunnelling.
//! h2 (by ALPN, or detected by the client preface, so h2 with prior knowledge
//! works on the plain port) is the router's own server ([`super::h2`]).
//!
//! A TLS listener does the handshake in the connection's task (never in the accept
//! loop), within `tls.handshake_timeout`, then serves the same way; ALPN picks h2 or
//! HTTP/1.1.
//!
//! Every state of a connection has a deadline: the handshake
//! (`tls.handshake_timeout`); before the first request and between requests
//! ([`Activity`]: `limits.header_read_timeout`, then `limits.idle_timeout`); a
//! request head (hyper's `header_read_timeout`); a client that stops reading
//! ([`ClientIo`]: `limits.send_timeout`), or an h2 client whose responses wait on
//! flow-control windows it never opens ([`Activity::stalled`], the same timeout); an
//! h2 peer that stops answering PINGs (`limits.h2_keepalive_*`).
//!
//! On shutdown the loop stops accepting, every connection is told to finish (HTTP/1
//! closes after the in-flight response, h2 sends GOAWAY) and the listener waits for
//! them (every connection holds a slot: all slots back means all done; a WebSocket
//! tunnel keeps its connection's slot until it closes) up to the grace period, then
//! closes what is left.

use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use per_source::ClientKey;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::activity::{Activity, ConnectionSlot};
use super::client_conn::ClientConn;
use super::client_io::{ClientIo, Stream};
use super::h1;
use super::lifecycle::{Event, Signal, Watch, next_signalled};
use super::limits::Limits;
use super::listener::{Gate, Live, Slots, stopped};
use super::own_waker::{Flag, OwnWaker};
use super::registry::{Connections, Registered, lock};
use crate::request::Proxy;
use crate::request::phases::upload::Received;
use crate::tls::rewind::Rewind;

/// With passthrough routes in the table, reads the ClientHello first: a name whose
/// gear terminates TLS itself is relayed there (see [`super::passthrough`]) and the
/// connection ends here (`None`); any other is handed to our own handshake with the
/// bytes put back, so it gets exactly the answer it would have had.
async fn hello_then_handshake(
    proxy: &Arc<Proxy>,
    tls: &TlsListener,
    mut stream: tokio::net::TcpStream,
    peer: ClientKey,
    activity: &Arc<Activity>,
    metrics: &crate::metrics::TlsMetrics,
) -> Option<tokio_rustls::server::TlsStream<Rewind>> {
    let mut read = Vec::new();
    if proxy.table.load().passthrough() > 0 {
        let hello =
            tokio::time::timeout(tls.handshake_timeout, crate::tls::hello::read(&mut stream)).await;
        let Ok(hello) = hello else {
            metrics.handshake_failed("timeout");
            return None;
        };
        if let Some(route) = hello
            .sni
            .as_deref()
            .and_then(|n| proxy.passthrough_route(n))
        {
            // A task of its own, like an upgraded tunnel: it keeps the connection's
            // place (the activity), but is no longer a quiet connection to evict.
            let (proxy, activity) = (proxy.clone(), activity.clone());
            tokio::spawn(async move {
                proxy
                    .pass_through(route, stream, hello.bytes, peer, activity)
                    .await;
            });
            return None;
        }
        read = hello.bytes;
    }
    crate::tls::server::handshake(
        &tls.acceptor,
        Rewind::new(stream, read),
        tls.handshake_timeout,
        metrics,
    )
    .await
}

/// TLS on a listener.
#[derive(Clone)]
pub struct TlsListener {
    pub acceptor: crate::tls::server::Acceptor,
    pub handshake_timeout: Duration,
}

/// Hyper's server settings from the limits.
fn builder_for(limits: &Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes)
        .max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.h2_keepalive_interval))
        .keep_alive_timeout(limits.h2_keepalive_timeout)
        .max_concurrent_streams(limits.h2_max_concurrent_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}

/// Serves the proxy on `listener` until `stop` turns true, then drains for `grace`.
pub async fn listen(
    listener: TcpListener,
    name: &'static str,
    tls: Option<crate::tls::server::Acceptor>,
    live: Live,
    (mut stop, drainer): (watch::Receiver<bool>, super::drain::Drainer),
    grace: Duration,
    workers: Option<Arc<crate::workers::Workers>>,
) {
    let gate = Gate::new(&live);
    let builder = Arc::new(builder_for(&gate.current.limits));
    let metrics = gate.current.proxy.metrics.clone();
    let errors = metrics.accept_errors.with_label_values(&[name]);
    let local_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    // Connections still open when the grace period is over are closed through this.
    let (kill_tx, kill) = watch::channel(false);
    let listening = match Listening::new(listener, workers) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(listener = name, error = %e, "cannot watch the listener; not accepting");
            return;
        }
    };
    let quiet = Arc::new(Mutex::new(Connections::default()));
    // Its connections wait on their own signal, not on the drain epoch and the
    // kill switch: each is woken when one turns (see `lifecycle::Signal`).
    let wake = {
        let quiet = quiet.clone();
        move || lock(&quiet).wake_all()
    };
    let mut http = HttpListener {
        listening,
        gate,
        builder,
        quiet,
        evicted: metrics.evicted.with_label_values(&[name]),
        refused: metrics.refused.with_label_values(&[name, "source_limit"]),
        open: metrics.open_connections.with_label_values(&[name]),
        accepted: metrics.connections.with_label_values(&[name]),
        local_port,
        tls,
        live,
        epochs: drainer.epochs_waking(stop.clone(), wake.clone()),
        kill,
    };
    accept::run(&mut http, name, &errors, stopped(&mut stop)).await;
    drop(http.listening);
    drain(name, &http.gate.slots, grace, (kill_tx, wake)).await;
}

/// The HTTP and HTTPS listeners' steps of the one accept loop (`accept::run`).
struct HttpListener {
    listening: Listening,
    gate: Gate,
    /// hyper's settings by the live limits, renewed after a reload.
    builder: Arc<auto::Builder<TokioExecutor>>,
    /// The open connections, for making room at the cap.
    quiet: Arc<Mutex<Connections>>,
    evicted: prometheus::IntCounter,
    refused: prometheus::IntCounter,
    open: prometheus::IntGauge,
    accepted: prometheus::IntCounter,
    local_port: u16,
    tls: Option<crate::tls::server::Acceptor>,
    live: Live,
    /// What each connection watches to drain: the stop, or a drain request.
    epochs: super::drain::Epochs,
    kill: watch::Receiver<bool>,
}

impl accept::Source for Listening {
    type Client = Accepted;

    async fn next(&mut self) -> std::io::Result<Option<(Accepted, SocketAddr)>> {
        self.accept().await.map(Some)
    }
}

impl accept::Listener for HttpListener {
    type Source = Listening;
    type Passed = per_source::SourceSlot;

    fn source(&mut self) -> &mut Listening {
        &mut self.listening
    }

    fn gate(&mut self, client: Accepted, peer: SocketAddr) -> Option<(Accepted, Self::Passed)> {
        // A reload: new limits for the connections from here on.
        if self.gate.refresh(&self.live) {
            self.builder = Arc::new(builder_for(&self.gate.current.limits));
        }
        let trusted = &self.gate.current.proxy.proxy_trusted;
        if super::proxied::is_trusted(trusted, peer.ip()) {
            let keys = self.gate.current.limits.client_keys();
            // A load balancer: under no per-source cap (its clients are, once
            // their headers name them: see [`super::proxied`]).
            let balancer = per_source::SourceSlot::uncounted(keys.key(peer.ip()));
            return Some((client, balancer));
        }
        // Its source holds its share of the listener: closed at once.
        let Some(source) = self.gate.pass(peer.ip()) else {
            self.refused.inc();
            tracing::debug!(client = %peer, "client source at limits.max_connections_per_source; closed");
            return None;
        };
        Some((client, source))
    }

    fn slots(&self) -> Arc<tokio::sync::Semaphore> {
        self.gate.slots.sem.clone()
    }

    /// Full, and a client is here: make room (see `make_room`). If nothing can
    /// go, this client waits for a slot.
    fn full(&mut self, client: Accepted, source: &Self::Passed) -> Option<Accepted> {
        if lock(&self.quiet).make_room(source.source(), &self.gate.sources) {
            self.evicted.inc();
        }
        Some(client)
    }

    fn serve(
        &mut self,
        stream: Accepted,
        peer: SocketAddr,
        source: Self::Passed,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let current = &self.gate.current;
        let keys = current.limits.client_keys();
        let _ = stream.set_nodelay(true);
        self.accepted.inc();
        // The slot and the gauge live in the connection's activity: past the end of
        // this task when the connection became a tunnel.
        let from = source.source();
        // The gate passed a trusted load balancer uncounted (its clients are).
        let behind = source.is_uncounted();
        let activity = Activity::new(Some(ConnectionSlot::new(slot, source, self.open.clone())));
        let member_of = Registered::new(&self.quiet, activity.clone(), from);
        // getsockname only when `Forwarded` names the address (`by: ip`).
        let forwarded = &current.proxy.forwarded;
        let local = (forwarded.header && forwarded.by == "ip")
            .then(|| stream.local_addr().ok())
            .flatten();
        let mut conn = ClientConn::new(
            peer.ip(),
            keys,
            self.local_port,
            self.tls.is_some(),
            activity.clone(),
        )
        .with_forwarded(forwarded, local);
        conn.kill = Some(self.kill.clone());
        let proxied = behind.then(|| self.gate.sources.clone());
        let connection = Connection {
            peer,
            conn,
            proxied,
            tls: self.tls.clone(),
            serving: current.clone(),
            activity,
            evict: member_of.evict.clone(),
            member_of,
            builder: self.builder.clone(),
            live: self.live.clone(),
            stop: self.epochs.for_connection(),
            kill: self.kill.clone(),
        };
        stream.spawn(connection);
    }
}

/// Waits up to `grace` for the listener's connections to end (every connection
/// holds a slot until it ends: all slots back means all done), then closes what
/// is left (the kill switch, and `wake` to have the connections look at it).
async fn drain(
    name: &str,
    slots: &Slots,
    grace: Duration,
    (kill, wake): (watch::Sender<bool>, impl Fn()),
) {
    tracing::info!(listener = name, grace = ?grace, "stopped accepting; draining connections");
    let all = u32::try_from(slots.max()).unwrap_or(u32::MAX);
    if tokio::time::timeout(grace, slots.sem.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            listener = name,
            "grace period over; closing the remaining connections"
        );
        let _ = kill.send(true);
        wake();
        // Tunnels close cleanly (see `tunnel::close_cleanly`): a moment for
        // them before the process ends.
        let _ = tokio::time::timeout(super::tunnel::LINGER, slots.sem.acquire_many(all)).await;
    }
}

/// A listener's accepting side. Without workers, a tokio listener: each accepted
/// socket is registered with this runtime, which serves it. With workers, the
/// listener is only watched for readiness here and its sockets are accepted
/// unregistered (`accept4` with `SOCK_NONBLOCK`), so that each is registered once,
/// with its worker's reactor: accepting through tokio and moving the socket
/// registered it here and removed it again, two `epoll_ctl` calls per connection.
enum Listening {
    Here(TcpListener),
    ForWorkers(
        tokio::io::unix::AsyncFd<std::net::TcpListener>,
        Arc<crate::workers::Workers>,
    ),
}

/// An accepted socket: registered with this runtime, or not yet with any and
/// going to one of these workers.
enum Accepted {
    Here(tokio::net::TcpStream),
    ForWorker(std::net::TcpStream, Arc<crate::workers::Workers>),
}

impl Listening {
    fn new(
        listener: TcpListener,
        workers: Option<Arc<crate::workers::Workers>>,
    ) -> std::io::Result<Listening> {
        let Some(workers) = workers else {
            return Ok(Listening::Here(listener));
        };
        let listener = listener.into_std()?;
        // SAFETY: a `std::net::TcpListener` owns its descriptor: it stays open and
        // the same for as long as the `AsyncFd` owns the listener.
        let watched = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                listener,
                tokio::io::Interest::READABLE,
            )
        };
        watched
            .map(|w| Listening::ForWorkers(w, workers))
            .map_err(|e| e.into_parts().1)
    }

    async fn accept(&self) -> std::io::Result<(Accepted, SocketAddr)> {
        let (watched, workers) = match self {
            Listening::Here(l) => {
                return l.accept().await.map(|(s, a)| (Accepted::Here(s), a));
            }
            Listening::ForWorkers(watched, workers) => (watched, workers),
        };
        loop {
            let mut ready = watched.readable().await?;
            let accepted = ready.try_io(|l| {
                socket2::SockRef::from(l.get_ref())
                    .accept4(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
            });
            let Ok(accepted) = accepted else {
                continue; // would block: readiness cleared, wait again
            };
            let (socket, addr) = accepted?;
            let addr = addr.as_socket().ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "not an IP peer")
            })?;
            return Ok((Accepted::ForWorker(socket.into(), workers.clone()), addr));
        }
    }
}

impl Accepted {
    fn set_nodelay(&self, on: bool) -> std::io::Result<()> {
        match self {
            Accepted::Here(s) => s.set_nodelay(on),
            Accepted::ForWorker(s, _) => s.set_nodelay(on),
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Accepted::Here(s) => s.local_addr(),
            Accepted::ForWorker(s, _) => s.local_addr(),
        }
    }

    /// Serves `connection` in a task of its own: here, or on the worker with the
    /// fewest connections, registered with its reactor there (see
    /// `crate::workers`).
    fn spawn(self, mut connection: Connection) {
        match self {
            Accepted::Here(stream) => {
                tokio::spawn(connection.run(Incoming::Here(stream)));
            }
            Accepted::ForWorker(stream, workers) => {
                let (placed, worker) = workers.pick();
                connection.conn.worker = placed.index;
                worker.spawn(connection.run(Incoming::Worker(stream, placed)));
            }
        }
    }
}

/// The socket a connection's task starts from: registered with this runtime
/// already, or to be registered with its worker's, there (see
/// `crate::workers`), with the worker's count of it.
enum Incoming {
    Here(tokio::net::TcpStream),
    Worker(std::net::TcpStream, crate::workers::WorkerSlot),
}

impl Incoming {
    /// The socket, registered with the runtime polling this; the worker's count
    /// of it, held for the connection's life.
    fn register(
        self,
    ) -> std::io::Result<(tokio::net::TcpStream, Option<crate::workers::WorkerSlot>)> {
        match self {
            Incoming::Here(s) => Ok((s, None)),
            Incoming::Worker(s, placed) => Ok((tokio::net::TcpStream::from_std(s)?, Some(placed))),
        }
    }
}

/// An accepted client connection and what serving it needs, moved into its task
/// (on this runtime, or on a per-core worker's). Small on purpose: what the task
/// captures stays allocated for the connection's whole life (the serving
/// generation and hyper's builder are shared, not copied per connection).
struct Connection {
    peer: SocketAddr,
    conn: ClientConn,
    /// From a trusted load balancer: its PROXY header names the client, whose
    /// per-source slot is taken here (see [`super::proxied`]).
    proxied: Option<Arc<per_source::PerSource>>,
    tls: Option<crate::tls::server::Acceptor>,
    /// The proxy and limits live when it was accepted.
    serving: Arc<crate::request::connection::listener::Serving>,
    activity: Arc<Activity>,
    evict: Arc<Signal>,
    member_of: Registered,
    builder: Arc<auto::Builder<TokioExecutor>>,
    live: Live,
    stop: watch::Receiver<bool>,
    kill: watch::Receiver<bool>,
}

impl Connection {
    /// Serves the connection until it closes, a deadline passes or the drain ends
    /// it. Not an `async fn`: the future captures the fields it needs, not the
    /// struct whole beside them.
    fn run(self, incoming: Incoming) -> impl Future<Output = ()> + Send {
        let Connection {
            peer,
            conn,
            proxied,
            tls,
            serving,
            activity,
            evict,
            member_of,
            builder,
            live,
            stop,
            kill,
        } = self;
        // Every quiet state has a deadline (see `Activity`); drain and quiet end
        // the connection gracefully, the kill switch at once (see `supervise`).
        // Made here and lent: what the task captures stays for its whole life.
        let mut watch = Watch::of(&serving.limits, (stop, kill), evict, activity);
        let start = Box::new(Start {
            incoming,
            proxied,
            tls,
            serving,
            // Shared from here (its requests take it by `Arc`): the future
            // keeps a pointer, not the 160 bytes, for the connection's life.
            conn: Arc::new(conn),
            live,
            builder,
        });
        async move {
            let Some(Opened {
                io,
                own,
                first,
                placed: _placed,
                client_source: _client_source,
                conn,
                live,
                builder,
            }) = open(start, &watch, peer).await
            else {
                return;
            };
            // Told to close gracefully (drain, idle): HTTP/1 after the response
            // in progress, h2 with a GOAWAY.
            let finish = Arc::new(AtomicBool::new(false));
            // Pinned here and lent to `supervise`: moved into it, the connection's
            // state was kept twice in this task (3.5 KiB more per idle connection).
            let connection = serve_http(io, live, conn, finish.clone(), own, builder);
            tokio::pin!(connection);
            let result = supervise(connection.as_mut(), &mut watch, &finish, first).await;
            if let Err(e) = result {
                tracing::debug!(client = %peer, error = %e, "client connection ended with an error");
            }
            drop(member_of);
        }
    }
}

/// A connection ready for its first request: registered with its runtime, past
/// its TLS handshake, with what serving it needs of the limits live when it was
/// accepted.
struct Opened {
    io: ClientIo,
    own: h1::Settings,
    /// `limits.header_read_timeout`.
    first: Duration,
    /// The worker's count of it, held for the connection's life.
    placed: Option<crate::workers::WorkerSlot>,
    /// Its client's count among its source's, when a PROXY header named it.
    client_source: Option<per_source::SourceSlot>,
    conn: Arc<ClientConn>,
    live: Live,
    builder: Arc<auto::Builder<TokioExecutor>>,
}

/// What a connection's task starts from and has used up by its first request:
/// boxed, so that it is freed then. Captured by the task's future instead, it
/// stayed there for the connection's life, moved out or not (80 bytes).
struct Start {
    incoming: Incoming,
    /// From a trusted load balancer (see [`Connection`]).
    proxied: Option<Arc<per_source::PerSource>>,
    tls: Option<crate::tls::server::Acceptor>,
    /// The proxy and limits live when it was accepted (each request gets the
    /// ones live at its start).
    serving: Arc<crate::request::connection::listener::Serving>,
    conn: Arc<ClientConn>,
    live: Live,
    builder: Arc<auto::Builder<TokioExecutor>>,
}

/// Registers the socket with the runtime polling this and, on the HTTPS
/// listener, makes the handshake (until it ends, or the connection is
/// evicted); `None`: the connection ends here. `start` is freed on the way.
async fn open(start: Box<Start>, watch: &Watch, peer: SocketAddr) -> Option<Opened> {
    let Start {
        incoming,
        proxied,
        tls,
        serving,
        mut conn,
        live,
        builder,
    } = *start;
    let (mut stream, placed) = match incoming.register() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(client = %peer, error = %e, "cannot register a connection with its worker");
            return None;
        }
    };
    let client_source = match &proxied {
        Some(sources) => {
            let how = (serving.limits.header_read_timeout, &serving.proxy.forwarded);
            match super::proxied::take_header(&mut stream, &mut conn, sources, how).await {
                Ok(slot) => slot,
                Err(e) => {
                    let listener = if tls.is_some() { "https" } else { "http" };
                    let refused = &serving.proxy.metrics.refused;
                    refused.with_label_values(&[listener, "proxy_header"]).inc();
                    tracing::debug!(client = %peer, error = %e, "PROXY header refused; closed");
                    return None;
                }
            }
        }
        None => None,
    };
    let io = match tls {
        None => Stream::Plain(stream),
        // The handshake runs in the connection's task, never in the accept loop.
        Some(acceptor) => {
            let handshake = handshake(&serving, acceptor, stream, &mut conn, &watch.activity);
            tokio::select! {
                s = handshake => s?,
                _ = watch.evict.evicted_wait() => return None,
            }
        }
    };
    let limits = &serving.limits;
    Some(Opened {
        io: ClientIo::new(io, limits.send_timeout),
        own: h1::Settings::of(limits),
        first: limits.header_read_timeout,
        placed,
        client_source,
        conn,
        live,
        builder,
    })
}

/// The TLS handshake of a connection to the HTTPS listener (after a look at
/// its ClientHello when there are passthrough apps), `None` when it failed;
/// with the certificate it presented recorded in `conn` (requests for names
/// that would get another are 421: coalescing). Boxed: the handshake's state
/// is freed once it is done, not kept in the task for the connection's whole
/// life.
async fn handshake(
    serving: &crate::request::connection::listener::Serving,
    acceptor: crate::tls::server::Acceptor,
    stream: tokio::net::TcpStream,
    conn: &mut Arc<ClientConn>,
    activity: &Arc<Activity>,
) -> Option<Stream> {
    let tls = &TlsListener {
        acceptor,
        handshake_timeout: serving.handshake_timeout,
    };
    let (proxy, metrics) = (&serving.proxy, &serving.proxy.metrics.tls);
    let hello = hello_then_handshake(proxy, tls, stream, conn.key(), activity, metrics);
    let s = Box::pin(hello).await?;
    let session = s.get_ref().1;
    let policies = &tls.acceptor.policies;
    let policy = match session.server_name() {
        Some(name) if !policies.is_empty() => policies.of(Some(&name.to_ascii_lowercase())),
        _ => 0,
    };
    if let Some(sni) = session.server_name() {
        // Not shared yet: `make_mut` does not copy.
        let conn = Arc::make_mut(conn);
        conn.served = Some(tls.acceptor.served(sni));
        conn.sni = Some(Arc::from(sni));
        conn.client_policy = policy;
    }
    if tls.acceptor.asks_certificate(policy) {
        let cert = crate::tls::client_auth::ClientCert::of(session.peer_certificates());
        Arc::make_mut(conn).client_cert = Some(Arc::new(cert));
    }
    Some(Stream::Tls(Box::new(s)))
}

/// The connection's HTTP: HTTP/1.1 on the router's own path while it can, hyper
/// for the rest (see `h1`), h2 on the own h2 server (see `h2`); `finish` asks for a graceful end (HTTP/1 after the
/// response in progress, h2 with a GOAWAY).
///
/// A plain function returning an `async` block: its captures are the only copy of
/// the arguments (an `async fn` keeps them twice, in every connection's task).
#[allow(clippy::manual_async_fn)] // see above: not an `async fn` on purpose
fn serve_http(
    mut io: ClientIo,
    live: Live,
    conn: Arc<ClientConn>,
    finish: Arc<AtomicBool>,
    own: h1::Settings,
    builder: Arc<auto::Builder<TokioExecutor>>,
) -> impl Future<Output = HttpResult> + Send {
    async move {
        // HTTP/1.1 on the router's own path while it can; hyper for
        // the rest (see `h1`).
        let proxy = || live.load().proxy.clone();
        let read = if io.is_h2() {
            Vec::new()
        } else {
            match h1::run(&mut io, proxy, &conn, &finish, &own).await {
                h1::End::Closed => return Ok(()),
                h1::End::Handoff(read) => read,
            }
        };
        // h2 (by ALPN, or a preface where HTTP/1.1 was expected) on the
        // router's own server.
        if io.is_h2() || read.starts_with(&h2_codec::frame::PREFACE[..16]) {
            let settings = super::h2::Settings::of(&live.load().limits);
            return super::h2::serve(&mut io, read, proxy, &conn, &finish, settings).await;
        }
        let io = TokioIo::new(Rewind::new(io, read));
        // Boxed: hyper keeps the box of its service future for the
        // connection's whole life, so an unboxed one (4 KiB) would stay
        // with every idle connection; boxed, it is freed with each
        // response.
        let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            Box::pin(
                live.load()
                    .proxy
                    .clone()
                    .response(conn.clone(), req.map(Received::Hyper)),
            )
        });
        let mut hyper = Box::pin(builder.serve_connection_with_upgrades(io, service));
        let mut told = false;
        std::future::poll_fn(|cx| {
            if !told && finish.load(Ordering::Acquire) {
                told = true;
                hyper.as_mut().graceful_shutdown();
            }
            hyper.as_mut().poll(cx)
        })
        .await
    }
}

/// Drives the connection while watching its deadlines and signals (see
/// [`Watch`]): shutdown and quiet end it gracefully, idle ends it after at most
/// `first` more, a stall or the kill switch at once. The watch is polled with a
/// waker of its own, so it runs when one of its events fires, never on the
/// connection's own wake-ups (several per request). Not an `async fn`, for the
/// reason `serve_http` gives.
#[allow(clippy::manual_async_fn)] // see above: not an `async fn` on purpose
fn supervise<'a, F: Future<Output = HttpResult>>(
    mut connection: Pin<&'a mut F>,
    watch: &'a mut Watch,
    finish: &'a AtomicBool,
    first: Duration,
) -> impl Future<Output = HttpResult> + 'a {
    async move {
        let (mut closing, mut shut) = (false, false);
        let flag = Arc::new(Flag::default());
        loop {
            // Boxed: made once per event (drain, idle, ...), rare; inline it would
            // stay in every connection's task (1.2 KiB).
            let mut next = Box::pin(next_signalled(watch, closing, shut));
            let event = tokio::select! {
                biased;
                r = connection.as_mut() => return r,
                next = OwnWaker::new(next.as_mut(), &flag) => next,
            };
            drop(next);
            match event {
                // Draining: h2 gets a GOAWAY (race-free by design); HTTP/1
                // responses carry `Connection: close` from now on, and a
                // connection left quiet for DRAIN_QUIET is closed.
                Event::Drain => {
                    closing = true;
                    watch.activity.close_after_responses();
                    if watch.activity.is_h2() {
                        shut = true;
                        finish.store(true, Ordering::Release);
                    }
                }
                Event::Quiet => {
                    shut = true;
                    finish.store(true, Ordering::Release);
                }
                Event::Idle => {
                    finish.store(true, Ordering::Release);
                    // A peer that ignores the GOAWAY is dropped soon after.
                    let bound = first;
                    break match tokio::time::timeout(bound, connection.as_mut()).await {
                        Ok(r) => r,
                        Err(_) => Ok(()),
                    };
                }
                Event::Stalled => {
                    return Err("the h2 client took nothing for limits.send_timeout".into());
                }
                Event::End => break Ok(()),
            }
        }
    }
}

/// How a connection's HTTP ended.
type HttpResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;
