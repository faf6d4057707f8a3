//! The other client during an attack: asks for a page from another address, on a
//! new connection each time, and counts the answers that came in time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a probe saw: answers `200` within the limit, and attempts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Probed {
    pub ok: u32,
    pub total: u32,
}

impl Probed {
    /// The share of attempts answered 200 in time.
    pub fn share(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        f64::from(self.ok) / f64::from(self.total)
    }
}

/// `GET /` for `host` from `from` (e.g. 127.0.0.2) every `every` until `until`,
/// each on a new connection with `within` to get a `200` status line.
pub async fn probe(
    router: SocketAddr,
    host: &str,
    from: &str,
    every: Duration,
    within: Duration,
    until: Instant,
) -> Probed {
    let mut seen = Probed::default();
    while Instant::now() < until {
        let started = Instant::now();
        seen.total += 1;
        let one = async {
            let socket = tokio::net::TcpSocket::new_v4().ok()?;
            socket.bind(format!("{from}:0").parse().ok()?).ok()?;
            let mut s = socket.connect(router).await.ok()?;
            let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await.ok()?;
            let mut head = [0u8; 12];
            s.read_exact(&mut head).await.ok()?;
            Some(head.starts_with(b"HTTP/1.1 200"))
        };
        if let Ok(Some(true)) = tokio::time::timeout(within, one).await {
            seen.ok += 1;
        }
        tokio::time::sleep(every.saturating_sub(started.elapsed())).await;
    }
    seen
}
