//! One check of one member: an HTTP `GET` of `health.path` whose status line must
//! match `health.statuses`, or, for TLS and non-HTTP members, a TCP connect.
//!
//! A few lines over a TCP stream rather than a client library: a check only needs the
//! status of one request with `Connection: close`, read from the response head by
//! the router's one HTTP/1 decoder (`h1_codec::response`). The Host line is the app's
//! name, validated at decode time (`spi-consumer`), so no broker message can inject
//! into it.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Statuses a check accepts: a class (`2xx`) or one code (`401`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusMatch {
    Class(u16),
    Code(u16),
}

impl StatusMatch {
    pub fn parse(s: &str) -> Option<StatusMatch> {
        let s = s.trim();
        if let Some(class) = s.strip_suffix("xx") {
            let c: u16 = class.parse().ok()?;
            return (1..=5).contains(&c).then_some(StatusMatch::Class(c));
        }
        let code: u16 = s.parse().ok()?;
        (100..=599)
            .contains(&code)
            .then_some(StatusMatch::Code(code))
    }

    pub fn matches(self, status: u16) -> bool {
        match self {
            StatusMatch::Class(c) => status / 100 == c,
            StatusMatch::Code(c) => status == c,
        }
    }
}

impl std::fmt::Display for StatusMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatusMatch::Class(c) => write!(f, "{c}xx"),
            StatusMatch::Code(c) => write!(f, "{c}"),
        }
    }
}

/// How checks are made: the part of `health.*` a single check needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub path: String,
    pub statuses: Vec<StatusMatch>,
    pub timeout: Duration,
    /// Host header of HTTP checks (default: the app's name, else the member address).
    pub host: Option<String>,
    /// Send HTTP checks to this port on the member's address (the node's front end)
    /// instead of the member's port, so the platform's idler sees traffic.
    pub keep_awake_port: Option<u16>,
}

impl Default for Check {
    /// The defaults of `health.path`, `health.statuses`, `health.timeout`.
    fn default() -> Check {
        Check {
            path: "/".into(),
            statuses: vec![
                StatusMatch::Class(2),
                StatusMatch::Class(3),
                StatusMatch::Code(401),
            ],
            timeout: Duration::from_secs(2),
            host: None,
            keep_awake_port: None,
        }
    }
}

/// How one member is checked, fixed when it is first seen.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    /// TCP connect only (TLS or non-HTTP endpoints).
    pub tcp_only: bool,
    /// The Host header of HTTP checks when `health.host` is not set (the app's name).
    pub host: Option<Arc<str>>,
}

/// What a check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(&'static str),
    /// No verdict: the router itself could not make the check (no file descriptor
    /// left). Neither a pass nor a failure of the member.
    Inconclusive(&'static str),
}

/// One check of `addr` (`address:port`).
pub async fn check(addr: &str, probe: &Probe, s: &Check) -> Outcome {
    match tokio::time::timeout(s.timeout, check_inner(addr, probe, s)).await {
        Ok(o) => o,
        Err(_) => Outcome::Fail("timeout"),
    }
}

async fn check_inner(addr: &str, probe: &Probe, s: &Check) -> Outcome {
    let target = match (s.keep_awake_port, probe.tcp_only) {
        (Some(port), false) => match addr.rsplit_once(':') {
            Some((host, _)) => format!("{host}:{port}"),
            None => addr.to_string(),
        },
        _ => addr.to_string(),
    };
    let mut stream = match TcpStream::connect(&target).await {
        Ok(s) => s,
        // Out of file descriptors (or memory) here says nothing about the member.
        Err(e) if crate::upstream::local_shortage(&e) => {
            return Outcome::Inconclusive("local_resources");
        }
        Err(_) => return Outcome::Fail("connect"),
    };
    // Close with a reset, as haproxy does for its checks: thousands of checks a
    // second would otherwise leave tens of thousands of sockets in TIME_WAIT here,
    // and the kernel's search for a free source port grows with them. (A zero
    // linger never blocks on close: the reset is sent at once.)
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    if probe.tcp_only {
        return Outcome::Pass;
    }
    let _ = stream.set_nodelay(true);
    let host = s.host.as_deref().or(probe.host.as_deref()).unwrap_or(addr);
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: router-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        s.path
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return Outcome::Fail("reset");
    }
    match read_status(&mut stream).await {
        Some(code) if s.statuses.iter().any(|m| m.matches(code)) => Outcome::Pass,
        Some(_) => Outcome::Fail("status"),
        None => Outcome::Fail("protocol"),
    }
}

/// The status of the response head `stream` sends (after any 1xx), or `None`
/// if the bytes are not one (or the member closes first).
async fn read_status(stream: &mut TcpStream) -> Option<u16> {
    let mut buf = bytes::BytesMut::with_capacity(1024);
    loop {
        match h1_codec::response::parse_response_head(&mut buf, false) {
            Ok(Some(head)) => return Some(head.status.as_u16()),
            Ok(None) => {}
            Err(_) => return None,
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_matches() {
        let m: Vec<StatusMatch> = ["2xx", "401"]
            .iter()
            .map(|s| StatusMatch::parse(s).expect("valid"))
            .collect();
        assert!(m.iter().any(|m| m.matches(204)));
        assert!(m.iter().any(|m| m.matches(401)));
        assert!(!m.iter().any(|m| m.matches(403)));
        assert!(!m.iter().any(|m| m.matches(500)));
        for bad in ["6xx", "0xx", "abc", "99", "600", ""] {
            assert_eq!(StatusMatch::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn status_match_prints_as_configured() {
        for s in ["2xx", "401", "5xx"] {
            assert_eq!(StatusMatch::parse(s).expect("valid").to_string(), s);
        }
    }

    #[tokio::test]
    async fn http_check_against_real_listeners() {
        use tokio::net::TcpListener;
        async fn serve_once(answer: &'static [u8]) -> String {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = l.local_addr().expect("addr").to_string();
            tokio::spawn(async move {
                if let Ok((mut s, _)) = l.accept().await {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(answer).await;
                }
            });
            addr
        }
        let s = Check {
            timeout: Duration::from_secs(5),
            ..Check::default()
        };
        let http = Probe::default();
        let ok = serve_once(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n").await;
        assert_eq!(check(&ok, &http, &s).await, Outcome::Pass);
        let bad = serve_once(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        assert_eq!(check(&bad, &http, &s).await, Outcome::Fail("status"));
        // The final head after an interim one; a head cut by the close.
        let interim = serve_once(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 401 No\r\n\r\n").await;
        assert_eq!(check(&interim, &http, &s).await, Outcome::Pass);
        let cut = serve_once(b"HTTP/1.1 401 Unauthorized\r\n").await;
        assert_eq!(check(&cut, &http, &s).await, Outcome::Fail("protocol"));
        let junk = serve_once(b"SSH-2.0-OpenSSH_9.2\r\n").await;
        assert_eq!(check(&junk, &http, &s).await, Outcome::Fail("protocol"));
        // Nothing listens on a port we bound and closed.
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        assert_eq!(check(&closed, &http, &s).await, Outcome::Fail("connect"));
        let tcp = Probe {
            tcp_only: true,
            host: None,
        };
        let open = serve_once(b"").await;
        assert_eq!(check(&open, &tcp, &s).await, Outcome::Pass);
    }
}
