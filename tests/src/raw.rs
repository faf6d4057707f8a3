//! Exact bytes in, raw bytes out: for requests no well-behaved client would send.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` and reads until the server closes or `limit` passes.
pub async fn exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("write");
    read_all(&mut s, limit).await
}

/// Sends `request` and reads until the router closes the connection; `None` if it
/// has not closed it within `limit` (a deadline the router missed, not a timing).
pub async fn exchange_to_close(
    addr: SocketAddr,
    request: &[u8],
    limit: Duration,
) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request).await.expect("write");
    let (out, closed) = read_to_close(&mut s, limit).await;
    closed.then_some(out)
}

/// [`exchange`] from another local address (`source`, e.g. 127.0.0.2 or an IPv6
/// address the test's namespace holds): what a
/// second client would send, for rules that go by the client's address.
pub async fn exchange_from(
    source: &str,
    addr: SocketAddr,
    request: &[u8],
    limit: Duration,
) -> Vec<u8> {
    let source: std::net::IpAddr = source.parse().expect("source address");
    let socket = match source {
        std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .expect("socket");
    socket
        .bind(SocketAddr::new(source, 0))
        .unwrap_or_else(|e| panic!("bind {source}: {e}"));
    let mut s = socket.connect(addr).await.expect("connect");
    s.write_all(request).await.expect("write");
    read_all(&mut s, limit).await
}

pub async fn read_all(s: &mut TcpStream, limit: Duration) -> Vec<u8> {
    read_to_close(s, limit).await.0
}

/// What `s` gives until it closes or `limit` passes, and whether it closed.
async fn read_to_close(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let closed = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (out, closed)
}

/// The body of a raw HTTP/1.x response: what follows its head.
pub fn body(resp: &[u8]) -> &[u8] {
    let at = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(0, |i| i + 4);
    &resp[at..]
}

/// The status code of a raw HTTP/1.x response, if it starts like one.
pub fn status(response: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(response.get(..12)?).ok()?;
    text.strip_prefix("HTTP/1.")?.get(2..5)?.parse().ok()
}
