//! Whether a member may take new requests: active checks, passive ejection, and the
//! states they move a member through.
//!
//! Endpoints are announced before their gear starts and withdrawn only after it died,
//! and nothing is sent when a gear stops or idles (routing-spi §3), so the router finds
//! out for itself:
//!
//! - **Active checks**: every member has one small task that sends an HTTP `GET` of
//!   `health.path` (or, for non-HTTP and TLS members, opens a TCP connection) every
//!   `health.interval` ± `health.jitter`. `rise` passes in a row bring a member up,
//!   `fall` failures in a row take it down. A new member starts [`Health::Unknown`] and
//!   gets no traffic until its first check passes (`health.gate_new`). The first checks
//!   of the members loaded at start-up are spread over one interval, so 10k members
//!   cost 10k/interval small connections per second, never a burst.
//! - **Passive ejection**: `health.passive_failures` connect failures or resets in a
//!   row take a member down at once, between checks; the checks then bring it back
//!   after `rise` passes (a down member is probed even when active checks are off;
//!   until then its checker sleeps without waking).
//!
//! State lives in the member's [`Backend`](crate::backend::Backend) (outside the route
//! table) so it survives table swaps. Transitions use compare-and-swap: a check that
//! finished after a passive ejection cannot undo the ejection with a stale result.
//!
//! The HTTP check is a few lines over a TCP stream rather than a client library: it
//! only needs the status code of one request with `Connection: close`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::backend::Backend;
use crate::metrics::HealthMetrics;

/// What the router believes about a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Health {
    /// New and not checked yet.
    Unknown = 0,
    Up = 1,
    Down = 2,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
        }
    }

    fn from_u8(v: u8) -> Health {
        match v {
            1 => Health::Up,
            2 => Health::Down,
            _ => Health::Unknown,
        }
    }
}

/// A member's health, readable on the request path with one relaxed load.
#[derive(Debug)]
pub struct HealthCell(AtomicU8);

impl HealthCell {
    pub fn new(h: Health) -> HealthCell {
        HealthCell(AtomicU8::new(h as u8))
    }

    pub fn get(&self) -> Health {
        Health::from_u8(self.0.load(Ordering::Relaxed))
    }

    /// Moves `from` → `to`; false if someone else changed it first.
    pub fn transition(&self, from: Health, to: Health) -> bool {
        self.0
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
}

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

/// `health.*`, resolved.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Active checks on every member; when off, only down members are probed.
    pub active: bool,
    pub path: String,
    pub statuses: Vec<StatusMatch>,
    pub interval: Duration,
    pub timeout: Duration,
    pub jitter: Duration,
    pub rise: u32,
    pub fall: u32,
    /// New members wait for their first passing check.
    pub gate_new: bool,
    /// Connect failures or resets in a row that eject a member at once; 0 = never.
    pub passive_failures: u32,
    /// Host header of HTTP checks (default: the app's name, else the member address).
    pub host: Option<String>,
    /// Send HTTP checks to this port on the member's address (the node's front end)
    /// instead of the member's port, so the platform's idler sees traffic.
    pub keep_awake_port: Option<u16>,
}

impl Default for Settings {
    /// The defaults of `health.*` (one source: the configuration's).
    fn default() -> Settings {
        crate::config::HealthConfig::default().settings()
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
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(&'static str),
}

/// The checker of one member; ends when the member is gone from every table.
pub async fn run(
    member: Weak<Backend>,
    wake: Arc<tokio::sync::Notify>,
    settings: Arc<Settings>,
    metrics: HealthMetrics,
    first: Duration,
) {
    tokio::time::sleep(first).await;
    let (mut passes, mut fails) = (0u32, 0u32);
    let mut seen = Health::Unknown;
    loop {
        let Some(b) = member.upgrade() else { return };
        let now = b.health.get();
        if now != seen {
            // Changed behind our back (passive ejection): count afresh.
            (passes, fails, seen) = (0, 0, now);
        }
        if !settings.active && now != Health::Down {
            // Nothing to probe until a passive ejection (or the member is freed).
            drop(b);
            wake.notified().await;
            continue;
        }
        let (addr, probe) = (b.addr.clone(), b.probe.clone());
        drop(b); // a check must not keep a removed member alive
        let start = Instant::now();
        let outcome = check(&addr, &probe, &settings).await;
        metrics.observe(start.elapsed(), &outcome);
        let Some(b) = member.upgrade() else { return };
        match outcome {
            Outcome::Pass => {
                (passes, fails) = (passes + 1, 0);
                // A new member comes up on its first pass; a down one after `rise`.
                let up = match seen {
                    Health::Unknown => true,
                    Health::Down => passes >= settings.rise,
                    Health::Up => false,
                };
                if up && b.health.transition(seen, Health::Up) {
                    if seen == Health::Down {
                        metrics.recoveries.inc();
                        tracing::info!(member = %addr, "member is up again");
                    }
                    metrics.set_up(&addr, true);
                }
            }
            Outcome::Fail(why) => {
                (passes, fails) = (0, fails + 1);
                if seen != Health::Down
                    && fails >= settings.fall
                    && b.health.transition(seen, Health::Down)
                {
                    if seen == Health::Up {
                        metrics.ejected("check");
                        tracing::warn!(member = %addr, reason = why, "member is down (health check)");
                    }
                    metrics.set_up(&addr, false);
                }
            }
        }
        seen = b.health.get();
        tokio::time::sleep(next_delay(&settings)).await;
    }
}

/// The interval ± jitter, so that checks started together drift apart.
fn next_delay(s: &Settings) -> Duration {
    let jitter = s.jitter.min(s.interval / 2);
    if jitter.is_zero() {
        return s.interval;
    }
    let span = jitter.as_micros() as usize * 2;
    let offset = crate::balance::random_below(span.max(1)) as u64;
    (s.interval - jitter) + Duration::from_micros(offset)
}

/// When the first check of a member runs: spread over one interval for members
/// loaded at start-up, almost at once for members announced later (they get no
/// traffic until it passes).
pub fn first_delay(s: &Settings, at_startup: bool) -> Duration {
    let span = if at_startup {
        s.interval
    } else {
        s.interval.min(Duration::from_millis(100))
    };
    Duration::from_micros(crate::balance::random_below(span.as_micros().max(1) as usize) as u64)
}

/// One check of `addr` (`address:port`).
pub async fn check(addr: &str, probe: &Probe, s: &Settings) -> Outcome {
    match tokio::time::timeout(s.timeout, check_inner(addr, probe, s)).await {
        Ok(o) => o,
        Err(_) => Outcome::Fail("timeout"),
    }
}

async fn check_inner(addr: &str, probe: &Probe, s: &Settings) -> Outcome {
    let target = match (s.keep_awake_port, probe.tcp_only) {
        (Some(port), false) => match addr.rsplit_once(':') {
            Some((host, _)) => format!("{host}:{port}"),
            None => addr.to_string(),
        },
        _ => addr.to_string(),
    };
    let Ok(mut stream) = TcpStream::connect(&target).await else {
        return Outcome::Fail("connect");
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
    // The status line is all we need: "HTTP/1.1 200 OK\r\n".
    let mut buf = [0u8; 64];
    let mut len = 0;
    while len < 12 {
        match stream.read(&mut buf[len..]).await {
            Ok(0) | Err(_) => return Outcome::Fail("reset"),
            Ok(n) => len += n,
        }
    }
    match parse_status(&buf[..len]) {
        Some(code) if s.statuses.iter().any(|m| m.matches(code)) => Outcome::Pass,
        Some(_) => Outcome::Fail("status"),
        None => Outcome::Fail("protocol"),
    }
}

/// The status code of an HTTP/1.x status line.
fn parse_status(head: &[u8]) -> Option<u16> {
    let rest = head
        .strip_prefix(b"HTTP/1.1 ")
        .or_else(|| head.strip_prefix(b"HTTP/1.0 "))?;
    let code = std::str::from_utf8(rest.get(..3)?).ok()?.parse().ok()?;
    (100..=599).contains(&code).then_some(code)
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
    fn status_line() {
        assert_eq!(
            parse_status(b"HTTP/1.1 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(parse_status(b"HTTP/1.0 200 OK"), Some(200));
        assert_eq!(parse_status(b"SSH-2.0-OpenSSH"), None);
        assert_eq!(parse_status(b"HTTP/1.1 9"), None);
    }

    #[test]
    fn transitions_are_compare_and_swap() {
        let h = HealthCell::new(Health::Up);
        assert!(h.transition(Health::Up, Health::Down));
        // A stale view (still "up") cannot move it.
        assert!(!h.transition(Health::Up, Health::Down));
        assert!(!h.transition(Health::Unknown, Health::Up));
        assert_eq!(h.get(), Health::Down);
    }

    #[test]
    fn delays_stay_in_bounds() {
        let s = Settings::default();
        for _ in 0..1000 {
            let d = next_delay(&s);
            assert!(
                d >= s.interval - s.jitter && d <= s.interval + s.jitter,
                "{d:?}"
            );
            assert!(first_delay(&s, true) < s.interval);
            assert!(first_delay(&s, false) < Duration::from_millis(100));
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
        let s = Settings {
            timeout: Duration::from_secs(5),
            ..Settings::default()
        };
        let http = Probe::default();
        let ok = serve_once(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n").await;
        assert_eq!(check(&ok, &http, &s).await, Outcome::Pass);
        let bad = serve_once(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
        assert_eq!(check(&bad, &http, &s).await, Outcome::Fail("status"));
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
