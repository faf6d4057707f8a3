//! `bench-h1-floor LISTEN MEMBER`: the floor of a native HTTP/1.1 proxy path, for
//! `bench/http.py --floor`. Not a product: it measures what a request costs
//! when the proxy parses heads in place with `httparse` and copies bytes, with none of
//! a general HTTP library's machinery, so that the router's figure can be read
//! against what its design could reach on this machine.
//!
//! Per request it does what the router must at least do on its common path: parse the
//! request head, look the host up in a map, drop hop-by-hop headers, add
//! `X-Forwarded-For/-Proto/-Host/-Port`, write the head and a `Content-Length` body to
//! a kept-alive member connection (one per client connection), parse the response
//! head, and copy it and its `Content-Length` body back. Anything else (chunked
//! bodies, upgrades, a missing host) closes the connection: wrk and the nginx backend
//! never send it.
//!
//! With `--hyper` as a third argument the client side is hyper's HTTP/1 server
//! instead (request head into a `HeaderMap`, a service call, the response head back
//! from a `HeaderMap`), the member side unchanged: the difference between the two
//! modes is what hyper's server costs per request on this path.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
];

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(member), hyper) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: bench-h1-floor LISTEN MEMBER");
        std::process::exit(64);
    };
    let (Ok(listen), Ok(member)) = (listen.parse::<SocketAddr>(), member.parse::<SocketAddr>())
    else {
        eprintln!("bench-h1-floor: addresses are IP:PORT");
        std::process::exit(64);
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench-h1-floor: {e}");
            std::process::exit(1);
        }
    };
    if hyper.as_deref() == Some("--hyper") {
        rt.block_on(serve_hyper(listen, member));
    } else {
        rt.block_on(serve(listen, member));
    }
}

/// The listener, and the names that route to the one member (the lookup is what
/// a router pays).
async fn bind(
    listen: SocketAddr,
    member: SocketAddr,
) -> (TcpListener, Arc<HashMap<String, SocketAddr>>) {
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bench-h1-floor: {listen}: {e}");
            std::process::exit(1);
        }
    };
    let routes = Arc::new(
        ["ha-bench-bench.example.com", "localhost", "127.0.0.1"]
            .into_iter()
            .map(|h| (h.to_string(), member))
            .collect(),
    );
    (listener, routes)
}

/// Accepts for ever, handing each client (with its address, the listening port and
/// the routes) to `each`, spawned.
async fn accept_each<F, Fut>(listen: SocketAddr, member: SocketAddr, each: F)
where
    F: Fn(TcpStream, SocketAddr, u16, Arc<HashMap<String, SocketAddr>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (listener, routes) = bind(listen, member).await;
    loop {
        let Ok((client, peer)) = listener.accept().await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        tokio::spawn(each(client, peer, listen.port(), routes.clone()));
    }
}

async fn serve(listen: SocketAddr, member: SocketAddr) {
    accept_each(listen, member, |client, peer, port, routes| async move {
        let _ = connection(client, peer, port, &routes).await;
    })
    .await;
}

/// How far a head goes and how long its body is.
struct Head {
    len: usize,
    body: usize,
}

async fn connection(
    mut client: TcpStream,
    peer: SocketAddr,
    port: u16,
    routes: &HashMap<String, SocketAddr>,
) -> std::io::Result<()> {
    let gone = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    let mut inbuf: Vec<u8> = Vec::with_capacity(4096);
    let mut out: Vec<u8> = Vec::with_capacity(1024);
    let mut resp: Vec<u8> = Vec::with_capacity(4096);
    let mut upstream: Option<TcpStream> = None;
    let peer_ip = peer.ip().to_string();
    loop {
        // A request head.
        let head = loop {
            if let Some(h) = request_head(&inbuf, &mut out, &peer_ip, port, routes)? {
                break h;
            }
            if read_more(&mut client, &mut inbuf).await? == 0 {
                return Ok(());
            }
        };
        while inbuf.len() < head.len + head.body {
            if read_more(&mut client, &mut inbuf).await? == 0 {
                return Err(gone());
            }
        }
        out.extend_from_slice(&inbuf[head.len..head.len + head.body]);
        inbuf.drain(..head.len + head.body);
        let member = match upstream.as_mut() {
            Some(m) => m,
            None => {
                let target = routes
                    .get("ha-bench-bench.example.com")
                    .copied()
                    .ok_or_else(gone)?;
                let m = TcpStream::connect(target).await?;
                let _ = m.set_nodelay(true);
                upstream.insert(m)
            }
        };
        member.write_all(&out).await?;
        // The response head and body.
        resp.clear();
        let head = loop {
            if let Some(h) = response_head(&resp)? {
                break h;
            }
            if read_more(member, &mut resp).await? == 0 {
                return Err(gone());
            }
        };
        while resp.len() < head.len + head.body {
            if read_more(member, &mut resp).await? == 0 {
                return Err(gone());
            }
        }
        client.write_all(&resp[..head.len + head.body]).await?;
    }
}

async fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 2048 {
        buf.reserve(4096);
    }
    s.read_buf(buf).await
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

/// Parses a request head in `buf`; on success writes the head to send into `out`.
fn request_head(
    buf: &[u8],
    out: &mut Vec<u8>,
    peer_ip: &str,
    port: u16,
    routes: &HashMap<String, SocketAddr>,
) -> std::io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(invalid("request head")),
    };
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return Err(invalid("request line"));
    };
    out.clear();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut host = None;
    let mut body = 0usize;
    let mut xff = None;
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("host") {
            host = std::str::from_utf8(h.value).ok();
        } else if h.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| invalid("content-length"))?;
        } else if h.name.eq_ignore_ascii_case("x-forwarded-for") {
            xff = Some(h.value);
            continue;
        } else if HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            if h.name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(invalid("chunked is not in the floor"));
            }
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    let host = host.ok_or_else(|| invalid("host"))?;
    let name = host.split(':').next().unwrap_or(host);
    if !routes.contains_key(name) {
        return Err(invalid("unknown host"));
    }
    out.extend_from_slice(b"X-Forwarded-For: ");
    if let Some(v) = xff {
        out.extend_from_slice(v);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(peer_ip.as_bytes());
    out.extend_from_slice(b"\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\nX-Forwarded-Port: ");
    out.extend_from_slice(port.to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    Ok(Some(Head { len, body }))
}

fn response_head(buf: &[u8]) -> std::io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(invalid("response head")),
    };
    let mut body = None;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            body = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(invalid("chunked is not in the floor"));
        }
    }
    Ok(Some(Head {
        len,
        body: body.ok_or_else(|| invalid("no content-length"))?,
    }))
}

type Member = Arc<tokio::sync::Mutex<(Option<TcpStream>, Vec<u8>, Vec<u8>)>>;

async fn serve_hyper(listen: SocketAddr, member: SocketAddr) {
    use hyper::service::service_fn;
    accept_each(listen, member, |client, peer, port, routes| async move {
        let up: Member = Arc::new(tokio::sync::Mutex::new((None, Vec::new(), Vec::new())));
        let service = service_fn(move |req| {
            let (routes, up) = (routes.clone(), up.clone());
            async move { exchange(req, peer, port, &routes, &up).await }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(client), service)
            .await;
    })
    .await;
}

async fn exchange(
    req: http::Request<hyper::body::Incoming>,
    peer: SocketAddr,
    port: u16,
    routes: &HashMap<String, SocketAddr>,
    up: &Member,
) -> std::io::Result<http::Response<http_body_util::Full<bytes::Bytes>>> {
    use http_body_util::BodyExt;
    let gone = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map_err(|_| gone())?.to_bytes();
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or_else(|| invalid("host"))?;
    let name = host.split(':').next().unwrap_or(host);
    let target = routes
        .get(name)
        .copied()
        .ok_or_else(|| invalid("unknown host"))?;
    let mut guard = up.lock().await;
    let (conn, out, resp) = &mut *guard;
    out.clear();
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .as_bytes(),
    );
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut xff = None;
    for (n, v) in parts.headers.iter() {
        if n.as_str() == "x-forwarded-for" {
            xff = Some(v.as_bytes());
            continue;
        }
        if HOP.contains(&n.as_str()) {
            continue;
        }
        out.extend_from_slice(n.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"X-Forwarded-For: ");
    if let Some(v) = xff {
        out.extend_from_slice(v);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(peer.ip().to_string().as_bytes());
    out.extend_from_slice(b"\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: ");
    out.extend_from_slice(host.as_bytes());
    out.extend_from_slice(b"\r\nX-Forwarded-Port: ");
    out.extend_from_slice(port.to_string().as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&body);
    let member = match conn.as_mut() {
        Some(m) => m,
        None => {
            let m = TcpStream::connect(target).await?;
            let _ = m.set_nodelay(true);
            conn.insert(m)
        }
    };
    member.write_all(out).await?;
    resp.clear();
    let head = loop {
        if let Some(h) = response_head(resp)? {
            break h;
        }
        if read_more(member, resp).await? == 0 {
            return Err(gone());
        }
    };
    while resp.len() < head.len + head.body {
        if read_more(member, resp).await? == 0 {
            return Err(gone());
        }
    }
    // The response head into a `HeaderMap`, as a hyper-based proxy must.
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut parsed = httparse::Response::new(&mut headers);
    let _ = parsed.parse(resp).map_err(|_| invalid("response head"))?;
    let mut response = http::Response::builder().status(parsed.code.unwrap_or(502));
    for h in parsed.headers.iter() {
        if HOP.iter().any(|n| h.name.eq_ignore_ascii_case(n)) {
            continue;
        }
        response = response.header(h.name, h.value);
    }
    let body = bytes::Bytes::copy_from_slice(&resp[head.len..head.len + head.body]);
    response
        .body(http_body_util::Full::new(body))
        .map_err(|_| invalid("response"))
}
