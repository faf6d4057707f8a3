//! A real HTTP/1.1 backend that reports what it received.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

/// What the backend saw, decoded from its JSON answer.
#[derive(Debug, Clone)]
pub struct Echo {
    pub method: String,
    /// The request target exactly as received on the wire (origin-form).
    pub target: String,
    pub version: String,
    pub headers: Vec<(String, String)>,
    pub body_len: u64,
    /// Which backend answered (its port).
    pub port: u16,
}

impl Echo {
    pub fn parse(body: &[u8]) -> Echo {
        let v: serde_json::Value = serde_json::from_slice(body)
            .unwrap_or_else(|e| panic!("not an echo ({e}): {}", String::from_utf8_lossy(body)));
        Echo {
            method: v["method"].as_str().unwrap_or_default().into(),
            target: v["target"].as_str().unwrap_or_default().into(),
            version: v["version"].as_str().unwrap_or_default().into(),
            headers: v["headers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|p| {
                            (
                                p[0].as_str().unwrap_or_default().to_string(),
                                p[1].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
            body_len: v["body_len"].as_u64().unwrap_or_default(),
            port: v["port"].as_u64().unwrap_or_default() as u16,
        }
    }

    /// All values of a header, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.all(name).first().copied()
    }
}

/// A running backend; stops when dropped.
pub struct Backend {
    pub addr: SocketAddr,
    /// Requests answered.
    pub hits: Arc<AtomicUsize>,
    seen: Arc<Seen>,
    task: tokio::task::JoinHandle<()>,
}

/// What the backend counts besides hits, and how it misbehaves on demand.
#[derive(Default)]
struct Seen {
    /// Requests that came through the router (they carry X-Forwarded-For).
    proxied: AtomicUsize,
    /// Host headers of the router's health checks.
    check_hosts: std::sync::Mutex<Vec<String>>,
    /// Answer every request with this status (0: behave).
    forced_status: AtomicU16,
    /// Requests through the router (health checks excluded) being handled now
    /// (until their response head is ready), and the most there ever were at once.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    pub async fn start() -> Backend {
        Backend::start_on("127.0.0.1:0".parse().expect("addr")).await
    }

    /// Listens on `addr`. Dropping the backend closes the listener *and* every open
    /// connection, like a gear that died.
    pub async fn start_on(addr: SocketAddr) -> Backend {
        Backend::serve(addr, None).await
    }

    /// An HTTPS backend (a gear with `ssl_to_gear`) with this certificate and key.
    /// It records the SNI names clients sent.
    pub async fn start_tls(
        leaf: &crate::pki::Leaf,
    ) -> (Backend, Arc<std::sync::Mutex<Vec<String>>>) {
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("cert");
        let key =
            rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        let snis = Arc::new(std::sync::Mutex::new(Vec::new()));
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let b = Backend::serve(
            "127.0.0.1:0".parse().expect("addr"),
            Some((acceptor, snis.clone())),
        )
        .await;
        (b, snis)
    }

    async fn serve(
        addr: SocketAddr,
        tls: Option<(
            tokio_rustls::TlsAcceptor,
            Arc<std::sync::Mutex<Vec<String>>>,
        )>,
    ) -> Backend {
        let listener = TcpListener::bind(addr).await.expect("bind backend");
        let addr = listener.local_addr().expect("addr");
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(Seen::default());
        let (h, s) = (hits.clone(), seen.clone());
        let task = tokio::spawn(async move {
            // Connections live in this set: aborting the task aborts them all.
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let stream = tokio::select! {
                    r = listener.accept() => match r {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    Some(_) = conns.join_next() => continue,
                };
                let (hits, seen) = (h.clone(), s.clone());
                let tls = tls.clone();
                conns.spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        hits.fetch_add(1, Ordering::Relaxed);
                        let h = req.headers();
                        if h.contains_key("x-forwarded-for") {
                            seen.proxied.fetch_add(1, Ordering::Relaxed);
                        } else if h
                            .get(header::USER_AGENT)
                            .is_some_and(|v| v == "router-health-check")
                            && let Some(host) = h.get(header::HOST)
                        {
                            let host = String::from_utf8_lossy(host.as_bytes()).into_owned();
                            if let Ok(mut v) = seen.check_hosts.lock() {
                                v.push(host);
                            }
                        }
                        let forced = seen.forced_status.load(Ordering::Relaxed);
                        let seen = seen.clone();
                        let proxied = req.headers().contains_key("x-forwarded-for");
                        async move {
                            if !proxied {
                                return handle(req, addr.port(), forced).await;
                            }
                            let now = seen.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
                            seen.max_in_flight.fetch_max(now, Ordering::AcqRel);
                            let answer = handle(req, addr.port(), forced).await;
                            seen.in_flight.fetch_sub(1, Ordering::AcqRel);
                            answer
                        }
                    });
                    match tls {
                        None => {
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .with_upgrades()
                                .await;
                        }
                        Some((acceptor, snis)) => {
                            let Ok(stream) = acceptor.accept(stream).await else {
                                return;
                            };
                            if let (Some(name), Ok(mut v)) =
                                (stream.get_ref().1.server_name(), snis.lock())
                            {
                                v.push(name.to_string());
                            }
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), service)
                                .with_upgrades()
                                .await;
                        }
                    }
                });
            }
        });
        Backend {
            addr,
            hits,
            seen,
            task,
        }
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::Relaxed)
    }

    /// The most requests through the router this backend was handling at once.
    pub fn max_in_flight(&self) -> usize {
        self.seen.max_in_flight.load(Ordering::Acquire)
    }

    /// Requests that came through the router (health checks excluded).
    pub fn proxied(&self) -> usize {
        self.seen.proxied.load(Ordering::Relaxed)
    }

    /// Host headers the router's health checks carried.
    pub fn check_hosts(&self) -> Vec<String> {
        self.seen
            .check_hosts
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default()
    }

    /// Answer everything with `status` from now on (0: behave again).
    pub fn force_status(&self, status: u16) {
        self.seen.forced_status.store(status, Ordering::Relaxed);
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn handle(
    mut req: Request<Incoming>,
    port: u16,
    forced: u16,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let param = |name: &str| -> u64 {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };

    if req
        .headers()
        .get(header::UPGRADE)
        .is_some_and(|v| v == "websocket")
    {
        return Ok(websocket(&mut req));
    }
    if path == "/slow" {
        tokio::time::sleep(Duration::from_millis(param("ms"))).await;
    }
    let text = |name: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(|v| v.replace("%2F", "/"))
    };
    if path == "/stream" {
        // 64 KiB chunks: of `x`, or of a page's text when a `type` is asked.
        let chunks = param("chunks");
        let chunk = match text("type") {
            Some(_) => page_bytes(0, 64 * 1024),
            None => Bytes::from(vec![b'x'; 64 * 1024]),
        };
        // `gap_ms`: a pause before each chunk and before the end (a body whose
        // end comes on its own, after the member's last bytes).
        let gap = Duration::from_millis(param("gap_ms"));
        let stream = futures_util::stream::unfold(0, move |i| {
            let chunk = chunk.clone();
            async move {
                if !gap.is_zero() {
                    tokio::time::sleep(gap).await;
                }
                (i < chunks).then(|| (Ok::<_, Infallible>(Frame::data(chunk)), i + 1))
            }
        });
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
        if let Some(t) = text("type").and_then(|t| header::HeaderValue::from_str(&t).ok()) {
            r.headers_mut().insert(header::CONTENT_TYPE, t);
        }
        return Ok(r);
    }
    if path == "/page" {
        // `bytes` of text (with its length), of `type` (text/html), with the
        // `encoding` given as the member's own Content-Encoding if any.
        let body = page_bytes(0, param("bytes") as usize);
        let mut r = Response::new(BodyExt::boxed(Full::new(body)));
        let kind = text("type").unwrap_or_else(|| "text/html".into());
        for (name, value) in [
            ("content-type", Some(kind)),
            ("content-encoding", text("encoding")),
        ] {
            if let Some(v) = value.and_then(|v| header::HeaderValue::from_str(&v).ok()) {
                r.headers_mut().insert(name, v);
            }
        }
        return Ok(r);
    }
    let status = path
        .strip_prefix("/status/")
        .and_then(|s| s.parse().ok())
        .or((forced != 0).then_some(forced))
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);

    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let method = req.method().to_string();
    let version = format!("{:?}", req.version());
    // Count the body as it streams; never hold it whole.
    let mut body = req.into_body();
    let mut body_len = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => body_len += f.data_ref().map_or(0, |d| d.len() as u64),
            Err(_) => break,
        }
    }
    let echo = json!({
        "method": method, "target": target, "version": version,
        "headers": headers, "body_len": body_len, "port": port,
    });
    let mut resp = Response::new(BodyExt::boxed(Full::new(Bytes::from(echo.to_string()))));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    // A hop-by-hop header the router must not pass on.
    resp.headers_mut()
        .insert("keep-alive", header::HeaderValue::from_static("timeout=10"));
    resp.headers_mut().insert(
        header::SET_COOKIE,
        header::HeaderValue::from_static("GEAR=local-abc; path=/"),
    );
    Ok(resp)
}

/// `len` bytes of a page's text from offset `at` of an endless one: lines of
/// HTML with numbers and words, compressible as a real page is (about 4:1
/// with gzip), the same bytes every time.
pub fn page_bytes(at: usize, len: usize) -> Bytes {
    const WORDS: [&str; 8] = [
        "router", "member", "gear", "alias", "table", "event", "route", "pair",
    ];
    const LINE: usize = 41;
    let mut out = String::with_capacity(len + 2 * LINE);
    let mut line = at / LINE;
    let skip = at % LINE;
    while out.len() < len + skip {
        let w = WORDS[(line * 7 + line / 3) % WORDS.len()];
        out.push_str(&format!(
            "<li id=\"{line:08}\">{w:<8} {:>8}</li>\n",
            line * 31 % 99991
        ));
        line += 1;
    }
    let bytes = out.into_bytes();
    Bytes::copy_from_slice(&bytes[skip.min(bytes.len())..(skip + len).min(bytes.len())])
}

/// Accepts a WebSocket upgrade and echoes every message back.
fn websocket(req: &mut Request<Incoming>) -> Response<Body> {
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        let mut r = Response::new(BodyExt::boxed(Full::new(Bytes::new())));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            None,
        )
        .await;
        while let Some(Ok(msg)) = ws.next().await {
            if msg.is_close() {
                break;
            }
            if ws.send(msg).await.is_err() {
                break;
            }
        }
    });
    let mut r = Response::new(BodyExt::boxed(Full::new(Bytes::new())));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(
        header::UPGRADE,
        header::HeaderValue::from_static("websocket"),
    );
    h.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = header::HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        h.insert("sec-websocket-accept", v);
    }
    r
}

/// A loopback port that refuses every connection for as long as this lives.
///
/// The socket is bound but never listens, so the kernel answers a SYN with a
/// reset and no other process (or parallel test) can take the port. A port
/// that was bound and dropped instead can be handed to the next `bind(:0)`,
/// which turns "a dead member" into someone else's live backend.
pub struct Refusing {
    _socket: tokio::net::TcpSocket,
    pub addr: SocketAddr,
}

impl Refusing {
    pub fn new() -> Refusing {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().expect("loopback"))
            .expect("bind");
        let addr = socket.local_addr().expect("addr");
        Refusing {
            _socket: socket,
            addr,
        }
    }
}

impl Default for Refusing {
    fn default() -> Self {
        Refusing::new()
    }
}
