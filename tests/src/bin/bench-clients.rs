//! `bench-clients`: the load tools of `bench/shapes.py` (h2, open-loop latency,
//! idle connections, route changes under load).
//!
//! ```text
//! bench-clients certs DIR HOST
//!     writes DIR/ca.pem and DIR/tls.crt, DIR/tls.key (a leaf for HOST and *.HOST's parent)
//! bench-clients open-loop ADDR HOST RATE CONNS SECS
//!     HTTP/1.1 GETs at a fixed RATE (req/s) spread over CONNS keep-alive connections,
//!     each request sent at its scheduled time whatever the previous answers did
//!     (open loop); prints one JSON line: sent, ok, errors, late (sends > 1 ms behind
//!     schedule: back-pressure), p50/p90/p99/p999/max latency in µs from the write
//! bench-clients hold ADDR HOST KIND N [CA]
//!     KIND plain | tls | ws | h2: opens N connections, one exchange each (GET, a
//!     TLS handshake then a GET, a WebSocket upgrade then one echoed message, a
//!     TLS handshake with ALPN h2 then a GET on an h2 stream), prints
//!     `ready N` and holds them until stdin closes. WebSockets send one message a
//!     second each (spread) and expect its echo. Then prints one JSON line: opened,
//!     failed, closed (by the other side while held), echo_errors, echoes.
//! bench-clients zero-window ADDR HOST PATH CONNS STREAMS SECS
//!     CONNS h2 connections (prior knowledge), each with STREAMS requests for PATH
//!     and a receive window of zero never opened, held SECS; one JSON line: sent,
//!     answered, failed
//! bench-clients slow-requests ADDR HOST PATH CLIENTS SECS
//!     CLIENTS HTTP/1.1 connections asking for PATH (e.g. /slow?ms=20000) again as
//!     soon as answered, for SECS; the same JSON line
//! bench-clients handshakes ADDR SNI CA GROUPS N CONNS [HOST]
//!     N full TLS 1.3 handshakes (no resumption) by a rustls client (aws-lc-rs)
//!     offering the key-exchange GROUPS (comma-separated, preferred first:
//!     `x25519mlkem768,x25519` as browsers, or `x25519`), CONNS at a time, each
//!     then one GET for HOST (SNI) with `Connection: close` that must be a 200;
//!     trusts CA (PEM) for SNI. With `CLIENT_CERT` and `CLIENT_KEY` (PEM files)
//!     in the environment it presents that client certificate. One JSON
//!     line: done, ok, failed, seconds, and how many agreed on each group
//! ```
//!
//! A tool, not a test: it exits with a message on a setup error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

fn main() {
    raise_nofile();
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_else(|| usage());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    match arg(1).as_str() {
        "certs" => certs(&arg(2), &arg(3)),
        "open-loop" => open_loop(
            addr(&arg(2)),
            arg(3),
            num(&arg(4)),
            num(&arg(5)),
            num(&arg(6)),
        ),
        "hold" => rt.block_on(hold(
            addr(&arg(2)),
            arg(3),
            arg(4),
            num(&arg(5)),
            args.get(6).cloned(),
        )),
        "handshakes" => {
            let (a, sni, ca, groups) = (addr(&arg(2)), arg(3), arg(4), arg(5));
            let (n, conns) = (num(&arg(6)) as usize, num(&arg(7)) as usize);
            let host = args.get(8).cloned().unwrap_or_else(|| sni.clone());
            rt.block_on(handshakes(a, (sni, host), &ca, &groups, (n, conns)));
        }
        "zero-window" => {
            let until = Instant::now() + Duration::from_secs(num(&arg(7)));
            let (a, host, path) = (addr(&arg(2)), arg(3), arg(4));
            let (conns, streams) = (num(&arg(5)) as usize, num(&arg(6)) as usize);
            let t = rt.block_on(e2e::attack::zero_window(
                a, &host, &path, conns, streams, until,
            ));
            println!("{}", t.json());
        }
        "slow-requests" => {
            let until = Instant::now() + Duration::from_secs(num(&arg(6)));
            let (a, host, path, clients) = (addr(&arg(2)), arg(3), arg(4), num(&arg(5)) as usize);
            let t = rt.block_on(e2e::attack::slow_requests(
                a, &host, &path, "", clients, until,
            ));
            println!("{}", t.json());
        }
        _ => usage(),
    }
}

/// `n` full handshakes, `conns` at a time (see the module's usage).
async fn handshakes(
    addr: SocketAddr,
    (sni, host): (String, String),
    ca: &str,
    groups: &str,
    (n, conns): (usize, usize),
) {
    use rustls::crypto::aws_lc_rs;
    let pem = std::fs::read_to_string(ca).unwrap_or_else(|e| panic!("{ca}: {e}"));
    let mut provider = aws_lc_rs::default_provider();
    let wanted: Vec<String> = groups
        .split(',')
        .map(|g| g.trim().to_ascii_uppercase())
        .collect();
    provider.kx_groups = wanted
        .iter()
        .filter_map(|w| {
            aws_lc_rs::ALL_KX_GROUPS
                .iter()
                .copied()
                .find(|g| format!("{:?}", g.name()).eq_ignore_ascii_case(w))
        })
        .collect();
    if provider.kx_groups.len() != wanted.len() {
        eprintln!("unknown group in {groups}");
        std::process::exit(64);
    }
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots);
    let mut config = match (std::env::var("CLIENT_CERT"), std::env::var("CLIENT_KEY")) {
        (Ok(cert), Ok(key)) => {
            let chain = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
                .and_then(|c| c.collect::<Result<Vec<_>, _>>())
                .unwrap_or_else(|e| panic!("{cert}: {e}"));
            let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key)
                .unwrap_or_else(|e| panic!("{key}: {e}"));
            builder
                .with_client_auth_cert(chain, key)
                .expect("client certificate")
        }
        _ => builder.with_no_client_auth(),
    };
    config.resumption = rustls::client::Resumption::disabled();
    let config = Arc::new(config);
    let next = Arc::new(AtomicU64::new(0));
    let agreed = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
        String,
        u64,
    >::new()));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let (config, next) = (config.clone(), next.clone());
            let (sni, host) = (sni.clone(), host.clone());
            let (agreed, ok, failed) = (agreed.clone(), ok.clone(), failed.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < n as u64 {
                    match one_handshake(addr, (&sni, &host), &config).await {
                        Ok(group) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                            *agreed.lock().expect("lock").entry(group).or_default() += 1;
                        }
                        Err(e) => {
                            // The first failure says why (the rest are counted).
                            if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("handshake failed: {e}");
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    let line = serde_json::json!({
        "done": n, "ok": ok.load(Ordering::Relaxed), "failed": failed.load(Ordering::Relaxed),
        "seconds": start.elapsed().as_secs_f64(), "groups": *agreed.lock().expect("lock"),
    });
    println!("{line}");
}

/// One handshake and one GET; the group agreed.
async fn one_handshake(
    addr: SocketAddr,
    (sni, host): (&str, &str),
    config: &Arc<rustls::ClientConfig>,
) -> std::io::Result<String> {
    let mut tls = e2e::tlsclient::connect(addr, sni, config).await?;
    let group = tls
        .get_ref()
        .1
        .negotiated_key_exchange_group()
        .map_or("none".to_string(), |g| format!("{:?}", g.name()));
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await?;
    let mut sink = Vec::new();
    tls.read_to_end(&mut sink).await?;
    if !sink.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other("not a 200"));
    }
    Ok(group)
}

fn usage() -> ! {
    eprintln!(
        "usage: bench-clients certs DIR HOST | open-loop ADDR HOST RATE CONNS SECS | hold ADDR HOST plain|tls|ws|h2 N [CA] | zero-window ADDR HOST PATH CONNS STREAMS SECS | slow-requests ADDR HOST PATH CLIENTS SECS | handshakes ADDR SNI CA GROUPS N CONNS [HOST]"
    );
    std::process::exit(64)
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap_or_else(|_| usage())
}

fn num(s: &str) -> u64 {
    s.parse().unwrap_or_else(|_| usage())
}

fn raise_nofile() {
    let lim = libc::rlimit {
        rlim_cur: 20000,
        rlim_max: 20000,
    };
    // SAFETY: setrlimit reads a valid, initialised struct.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
}

fn certs(dir: &str, host: &str) {
    let dir = std::path::Path::new(dir);
    let ca = e2e::pki::Ca::new("bench CA");
    let leaf = ca.leaf(&[host]);
    std::fs::write(dir.join("ca.pem"), &ca.pem).expect("write ca.pem");
    std::fs::write(dir.join("tls.crt"), &leaf.cert_pem).expect("write tls.crt");
    std::fs::write(dir.join("tls.key"), &leaf.key_pem).expect("write tls.key");
}

/// Reads one HTTP/1.1 response (head, then a Content-Length body) and returns its
/// status; `None` when the connection failed or the answer is not HTTP.
async fn read_response<S: AsyncRead + Unpin>(s: &mut S, buf: &mut Vec<u8>) -> Option<u16> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    let mut want = None;
    loop {
        if want.is_none()
            && let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n")
        {
            let (status, length) = head_of(&buf[..i + 4])?;
            want = Some((status, i + 4 + length));
        }
        if let Some((status, total)) = want
            && buf.len() >= total
        {
            return Some(status);
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One blocking thread per connection, sleeping with `clock_nanosleep` until each
/// request's scheduled time (tokio's timer has a 1 ms tick, which would send the
/// requests in bursts of RATE/1000), timer slack set to 1 µs.
fn open_loop(addr: SocketAddr, host: String, rate: u64, conns: u64, secs: u64) {
    use std::io::Write;
    let request = Arc::new(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes());
    let interval = Duration::from_secs_f64(conns as f64 / rate as f64);
    let start = Instant::now() + Duration::from_millis(200);
    let end = start + Duration::from_secs(secs);
    let late = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..conns)
        .map(|i| {
            let (request, late) = (request.clone(), late.clone());
            // Connection i sends at start + i/rate + k·interval: the union is `rate`
            // per second, evenly spaced.
            let first = start + Duration::from_secs_f64(i as f64 / rate as f64);
            std::thread::spawn(move || {
                // SAFETY: prctl with PR_SET_TIMERSLACK takes a plain integer.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000) };
                let mut lat = Vec::new();
                let mut errors = 0u64;
                let connect = || {
                    let s = std::net::TcpStream::connect(addr).ok()?;
                    s.set_nodelay(true).ok()?;
                    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                    Some(s)
                };
                let Some(mut s) = connect() else {
                    return (lat, 1);
                };
                let mut buf = Vec::with_capacity(8192);
                let mut next = first;
                while next < end {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    let sent = Instant::now();
                    if sent.duration_since(next) > Duration::from_millis(1) {
                        late.fetch_add(1, Ordering::Relaxed);
                    }
                    let ok = s.write_all(&request).is_ok()
                        && read_response_blocking(&mut s, &mut buf) == Some(200);
                    if ok {
                        lat.push(sent.elapsed().as_micros() as u32);
                    } else {
                        errors += 1;
                        match connect() {
                            Some(n) => s = n,
                            None => return (lat, errors),
                        }
                    }
                    next += interval;
                }
                (lat, errors)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in threads {
        if let Ok((l, e)) = t.join() {
            all.extend(l);
            errors += e;
        }
    }
    all.sort_unstable();
    let q = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{}",
        serde_json::json!({
            "sent": all.len() as u64 + errors, "ok": all.len(), "errors": errors,
            "late": late.load(Ordering::Relaxed),
            "p50_us": q(0.50), "p90_us": q(0.90), "p99_us": q(0.99), "p999_us": q(0.999),
            "max_us": all.last().copied().unwrap_or(0),
        })
    );
}

/// [`read_response`] on a blocking socket.
fn read_response_blocking(s: &mut std::net::TcpStream, buf: &mut Vec<u8>) -> Option<u16> {
    use std::io::Read;
    buf.clear();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let (status, want) = head_of(&buf[..head_end])?;
    while buf.len() < head_end + want {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(status)
}

/// Status and Content-Length of a response head (benchmark backends always send one).
fn head_of(head: &[u8]) -> Option<(u16, usize)> {
    let head = std::str::from_utf8(head).ok()?;
    let status: u16 = head.get(9..12)?.parse().ok()?;
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    Some((status, length))
}

#[derive(Default)]
struct HoldStats {
    opened: AtomicU64,
    failed: AtomicU64,
    closed: AtomicU64,
    echo_errors: AtomicU64,
    echoes: AtomicU64,
}

async fn hold(addr: SocketAddr, host: String, kind: String, n: u64, ca: Option<String>) {
    let stats = Arc::new(HoldStats::default());
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let tls = match kind.as_str() {
        "tls" | "h2" => {
            let ca = std::fs::read_to_string(ca.unwrap_or_else(|| usage())).expect("CA file");
            let alpn: &[u8] = if kind == "h2" { b"h2" } else { b"http/1.1" };
            Some(e2e::tlsclient::client_config(&ca, &[alpn]))
        }
        "plain" | "ws" => None,
        _ => usage(),
    };
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
    let mut tasks = Vec::new();
    // Open in batches of 100 at a time: a burst of thousands of SYNs overflows the
    // listener's backlog and measures retransmits, not memory.
    let gate = Arc::new(tokio::sync::Semaphore::new(100));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
    for i in 0..n {
        let (stats, mut stop, request, tls, host, kind, gate, ready_tx) = (
            stats.clone(),
            stop.clone(),
            request.clone(),
            tls.clone(),
            host.clone(),
            kind.clone(),
            gate.clone(),
            ready_tx.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire_owned().await;
            match (kind.as_str(), tls) {
                ("tls", Some(config)) => {
                    let s = e2e::tlsclient::connect(addr, &host, &config).await;
                    exchange_and_hold(s, &request, &stats, &ready_tx, permit, &mut stop).await;
                }
                ("h2", Some(config)) => {
                    let s = e2e::tlsclient::connect(addr, &host, &config).await;
                    h2_exchange_and_hold(s, &host, &stats, &ready_tx, permit, &mut stop).await;
                }
                ("ws", _) => {
                    let tcp = match TcpStream::connect(addr).await {
                        Ok(s) => s,
                        Err(_) => return fail(&stats, &ready_tx),
                    };
                    let url = format!("ws://{host}/ws");
                    let Ok((mut ws, _)) = tokio_tungstenite::client_async(url, tcp).await else {
                        return fail(&stats, &ready_tx);
                    };
                    if ws.send(Message::text("hello")).await.is_err()
                        || !matches!(ws.next().await, Some(Ok(Message::Text(_))))
                    {
                        return fail(&stats, &ready_tx);
                    }
                    opened(&stats, &ready_tx, permit);
                    // One message a second, spread over the connections.
                    tokio::time::sleep(Duration::from_millis(i * 1000 / n.max(1))).await;
                    let mut tick = tokio::time::interval(Duration::from_secs(1));
                    loop {
                        tokio::select! {
                            _ = tick.tick() => {}
                            _ = stop.changed() => return,
                        }
                        if ws.send(Message::text("ping")).await.is_err() {
                            stats.closed.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                        let echo = tokio::time::timeout(Duration::from_secs(5), ws.next()).await;
                        match echo {
                            Ok(Some(Ok(Message::Text(t)))) if t.as_str() == "ping" => {
                                stats.echoes.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(None) | Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) => {
                                stats.closed.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            _ => {
                                stats.echo_errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                _ => {
                    let s = TcpStream::connect(addr).await;
                    exchange_and_hold(s, &request, &stats, &ready_tx, permit, &mut stop).await;
                }
            }
        }));
    }
    drop(ready_tx);
    let mut done = 0;
    while done < n && ready_rx.recv().await.is_some() {
        done += 1;
    }
    println!("ready {}", stats.opened.load(Ordering::Relaxed));
    // Hold until stdin closes (the driving script says when).
    let _ = tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    })
    .await;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "opened": v(&stats.opened), "failed": v(&stats.failed), "closed": v(&stats.closed),
            "echo_errors": v(&stats.echo_errors), "echoes": v(&stats.echoes),
        })
    );
}

fn fail(stats: &HoldStats, ready: &tokio::sync::mpsc::UnboundedSender<bool>) {
    stats.failed.fetch_add(1, Ordering::Relaxed);
    let _ = ready.send(false);
}

fn opened(
    stats: &HoldStats,
    ready: &tokio::sync::mpsc::UnboundedSender<bool>,
    permit: Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>,
) {
    drop(permit);
    stats.opened.fetch_add(1, Ordering::Relaxed);
    let _ = ready.send(true);
}

/// One request and its answer on `s`, then holds it idle until told to stop.
async fn exchange_and_hold<S: AsyncRead + AsyncWrite + Unpin>(
    s: std::io::Result<S>,
    request: &[u8],
    stats: &HoldStats,
    ready: &tokio::sync::mpsc::UnboundedSender<bool>,
    permit: Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    let mut buf = Vec::with_capacity(4096);
    let mut s = match s {
        Ok(s) => s,
        Err(_) => return fail(stats, ready),
    };
    if s.write_all(request).await.is_err() || read_response(&mut s, &mut buf).await != Some(200) {
        return fail(stats, ready);
    }
    opened(stats, ready, permit);
    held(&mut s, stop, stats).await;
}

/// One h2 request (TLS, ALPN h2) and its answer, then the connection held
/// idle (hyper's client answers the server's PINGs) until told to stop.
async fn h2_exchange_and_hold<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    s: std::io::Result<S>,
    host: &str,
    stats: &HoldStats,
    ready: &tokio::sync::mpsc::UnboundedSender<bool>,
    permit: Result<tokio::sync::OwnedSemaphorePermit, tokio::sync::AcquireError>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    use http_body_util::{BodyExt as _, Empty};
    let Ok(s) = s else {
        return fail(stats, ready);
    };
    let io = hyper_util::rt::TokioIo::new(s);
    let executor = hyper_util::rt::TokioExecutor::new();
    let Ok((mut send, conn)) = hyper::client::conn::http2::handshake(executor, io).await else {
        return fail(stats, ready);
    };
    let mut conn = tokio::spawn(conn);
    let req = http::Request::get(format!("https://{host}/"))
        .body(Empty::<bytes::Bytes>::new())
        .expect("a request");
    let answered = match send.send_request(req).await {
        Ok(resp) if resp.status() == 200 => resp.into_body().collect().await.is_ok(),
        _ => false,
    };
    if !answered {
        return fail(stats, ready);
    }
    opened(stats, ready, permit);
    tokio::select! {
        _ = &mut conn => { stats.closed.fetch_add(1, Ordering::Relaxed); }
        _ = stop.changed() => {}
    }
    drop(send);
}

/// Holds an idle connection until told to stop; counts it if the other side closes.
async fn held<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    stats: &HoldStats,
) {
    let mut one = [0u8; 1];
    tokio::select! {
        _ = s.read(&mut one) => { stats.closed.fetch_add(1, Ordering::Relaxed); }
        _ = stop.changed() => {}
    }
}
