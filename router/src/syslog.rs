//! Access lines to syslog (`access_log.syslog`), besides stderr: RFC 5424 or
//! RFC 3164, over UDP, TCP (RFC 6587 octet counting for 5424, a newline for
//! 3164) or a unix datagram socket such as `/dev/log`, each line written from
//! the operator's template ([`crate::log_format`]).
//!
//! A slow or dead sink never slows a request: a line is handed to a bounded
//! queue (`access_log.syslog.queue`, 10 000 lines by default, about 3 MB)
//! without waiting, and one sender task writes the queue out; a line that
//! finds the queue full, or that the transport refuses, is dropped and
//! counted (`router_access_log_dropped_total{reason}`). A TCP sink that goes
//! away is connected to again, no more than once a second.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use crate::log_format::{Captures, Template};

/// `access_log.syslog`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyslogSettings {
    /// `udp://host:port`, `tcp://host:port` or `unix:///dev/log`.
    pub address: String,
    #[serde(default)]
    pub protocol: Protocol,
    /// A facility name (`local0` … `local7`, `user`, `daemon`).
    #[serde(default = "local1")]
    pub facility: String,
    /// The APP-NAME (5424) or TAG (3164).
    #[serde(default = "router")]
    pub tag: String,
    /// Lines waiting at most; more are dropped.
    #[serde(default = "queue")]
    pub queue: usize,
}

fn local1() -> String {
    "local1".into()
}
fn router() -> String {
    "router".into()
}
fn queue() -> usize {
    10_000
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    #[default]
    Rfc5424,
    Rfc3164,
}

/// Where lines go.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Udp(String),
    Tcp(String),
    Unix(PathBuf),
}

impl Target {
    fn parse(address: &str) -> Result<Target, String> {
        if let Some(a) = address.strip_prefix("udp://") {
            return Ok(Target::Udp(a.to_string()));
        }
        if let Some(a) = address.strip_prefix("tcp://") {
            return Ok(Target::Tcp(a.to_string()));
        }
        if let Some(p) = address.strip_prefix("unix://") {
            return Ok(Target::Unix(PathBuf::from(p)));
        }
        Err(format!(
            "{address:?}: udp://host:port, tcp://host:port or unix:///path"
        ))
    }
}

/// The facility's number.
fn facility(name: &str) -> Option<u8> {
    Some(match name {
        "kern" => 0,
        "user" => 1,
        "daemon" => 3,
        "auth" => 4,
        "local0" => 16,
        "local1" => 17,
        "local2" => 18,
        "local3" => 19,
        "local4" => 20,
        "local5" => 21,
        "local6" => 22,
        "local7" => 23,
        _ => return None,
    })
}

impl SyslogSettings {
    /// Refuses what cannot apply: `(field, problem)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        Target::parse(&self.address).map_err(|e| ("access_log.syslog.address", e))?;
        facility(&self.facility).ok_or((
            "access_log.syslog.facility",
            "local0 … local7, user, daemon, auth or kern".to_string(),
        ))?;
        let tag_ok = !self.tag.is_empty()
            && self.tag.len() <= 48
            && self.tag.bytes().all(|b| b.is_ascii_graphic());
        if !tag_ok {
            return Err((
                "access_log.syslog.tag",
                "1 to 48 visible ASCII characters".into(),
            ));
        }
        if !(1..=1_000_000).contains(&self.queue) {
            return Err(("access_log.syslog.queue", "1 to 1 000 000 lines".into()));
        }
        Ok(())
    }
}

/// The access lines' sink: the template, the queue and its counters.
pub struct Sink {
    pub template: Template,
    /// What is captured, in the template's order (see `access_log.capture`).
    pub capture: Capture,
    tx: mpsc::Sender<Bytes>,
    prefix: Prefix,
    queue_full: prometheus::IntCounter,
}

/// What starts every line: the priority, the host name, the tag.
struct Prefix {
    protocol: Protocol,
    /// A unix socket: the local form.
    local: bool,
    pri: u8,
    host: String,
    tag: String,
}

impl Sink {
    /// Starts the sender task (on the current runtime) and registers the
    /// counters; `template` was checked with the configuration.
    pub fn start(
        settings: &SyslogSettings,
        template: &str,
        capture: &Capture,
        registry: &prometheus::Registry,
    ) -> Result<Arc<Sink>, String> {
        let target = Target::parse(&settings.address)?;
        let local = matches!(target, Target::Unix(_));
        let template = Template::parse(template, &capture.names())?;
        let dropped = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "router_access_log_dropped_total",
                "Access lines to syslog dropped, by reason (queue_full: the sink is slower than the requests; send_failed: the transport refused them)",
            ),
            &["reason"],
        )
        .map_err(|e| e.to_string())?;
        registry
            .register(Box::new(dropped.clone()))
            .map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel(settings.queue);
        let failed = dropped.with_label_values(&["send_failed"]);
        tokio::spawn(send_all(rx, target, settings.protocol, failed));
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "-".into());
        Ok(Arc::new(Sink {
            template,
            capture: capture.clone(),
            tx,
            prefix: Prefix {
                protocol: settings.protocol,
                local,
                pri: facility(&settings.facility).unwrap_or(17) * 8 + 6,
                host,
                tag: settings.tag.clone(),
            },
            queue_full: dropped.with_label_values(&["queue_full"]),
        }))
    }

    /// Queues `message` (the template's line) as one syslog message, never
    /// waiting.
    pub fn send(&self, message: &str, now: std::time::SystemTime) {
        let p = &self.prefix;
        let line = match p.protocol {
            Protocol::Rfc5424 => format!(
                "<{}>1 {} {} {} {} - - {message}",
                p.pri,
                httpdate_rfc3339(now),
                p.host,
                p.tag,
                std::process::id()
            ),
            // Over a local socket without the host name, as glibc's
            // syslog(3) writes to /dev/log (the daemon adds its own).
            Protocol::Rfc3164 if p.local => format!(
                "<{}>{} {}[{}]: {message}",
                p.pri,
                rfc3164_time(now),
                p.tag,
                std::process::id()
            ),
            Protocol::Rfc3164 => format!(
                "<{}>{} {} {}[{}]: {message}",
                p.pri,
                rfc3164_time(now),
                p.host,
                p.tag,
                std::process::id()
            ),
        };
        if self.tx.try_send(Bytes::from(line)).is_err() {
            self.queue_full.inc();
        }
    }
}

/// `2026-11-29T02:13:49.123Z`.
pub fn httpdate_rfc3339(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (date, (h, m, s)) = civil(d.as_secs());
    format!(
        "{:04}-{:02}-{:02}T{h:02}:{m:02}:{s:02}.{:03}Z",
        date.0,
        date.1,
        date.2,
        d.subsec_millis()
    )
}

/// `Nov 29 02:13:49` (RFC 3164's TIMESTAMP, in UTC).
fn rfc3164_time(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let ((_, month, day), (h, m, s)) = civil(d.as_secs());
    format!(
        "{} {day:2} {h:02}:{m:02}:{s:02}",
        MONTHS[usize::from(month - 1)]
    )
}

/// `29/Nov/2026:02:13:49.123` (haproxy's date).
pub fn haproxy_time(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let ((year, month, day), (h, m, s)) = civil(d.as_secs());
    format!(
        "{day:02}/{}/{year}:{h:02}:{m:02}:{s:02}.{:03}",
        MONTHS[usize::from(month - 1)],
        d.subsec_millis()
    )
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The UTC date and time of `secs` since the epoch (Howard Hinnant's
/// days-from-civil, inverted).
fn civil(secs: u64) -> ((i64, u8, u8), (u64, u64, u64)) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = yoe + era * 400 + i64::from(month <= 2);
    ((year, month, day), (rem / 3600, rem % 3600 / 60, rem % 60))
}

/// The sender task: every queued line to `target`, until the queue closes.
async fn send_all(
    mut rx: mpsc::Receiver<Bytes>,
    target: Target,
    protocol: Protocol,
    failed: prometheus::IntCounter,
) {
    let mut tcp: Option<tokio::net::TcpStream> = None;
    let mut next_connect = tokio::time::Instant::now();
    let udp = match &target {
        Target::Udp(addr) => match tokio::net::UdpSocket::bind("0.0.0.0:0").await {
            Ok(s) => s.connect(addr).await.ok().map(|()| s),
            Err(_) => None,
        },
        _ => None,
    };
    let unix = match &target {
        Target::Unix(_) => tokio::net::UnixDatagram::unbound().ok(),
        _ => None,
    };
    while let Some(line) = rx.recv().await {
        let sent = match &target {
            Target::Udp(_) => match &udp {
                Some(s) => s.send(&line).await.is_ok(),
                None => false,
            },
            Target::Unix(path) => match &unix {
                Some(s) => s.send_to(&line, path).await.is_ok(),
                None => false,
            },
            Target::Tcp(addr) => {
                if tcp.is_none() && tokio::time::Instant::now() >= next_connect {
                    next_connect = tokio::time::Instant::now() + Duration::from_secs(1);
                    let connect = tokio::net::TcpStream::connect(addr.as_str());
                    tcp = tokio::time::timeout(Duration::from_secs(2), connect)
                        .await
                        .ok()
                        .and_then(Result::ok);
                }
                match tcp.as_mut() {
                    Some(stream) => {
                        let framed = match protocol {
                            Protocol::Rfc5424 => {
                                let mut f = format!("{} ", line.len()).into_bytes();
                                f.extend_from_slice(&line);
                                f
                            }
                            Protocol::Rfc3164 => {
                                let mut f = line.to_vec();
                                f.push(b'\n');
                                f
                            }
                        };
                        let ok = stream.write_all(&framed).await.is_ok();
                        if !ok {
                            tcp = None;
                        }
                        ok
                    }
                    None => false,
                }
            }
        };
        if !sent {
            failed.inc();
        }
    }
}

/// The captured values a template reads, from a message's fields: each
/// named field's first value (or cookie's), cut at `length` bytes; `-` when
/// it has none.
pub fn capture<'a>(
    names: &[String],
    value_of: impl Fn(&str) -> Option<&'a [u8]>,
    length: usize,
) -> Vec<String> {
    names
        .iter()
        .map(|n| match value_of(n) {
            Some(v) => {
                let v = &v[..v.len().min(length)];
                String::from_utf8_lossy(v)
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect()
            }
            None => "-".into(),
        })
        .collect()
}

/// `access_log.capture`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Capture {
    pub request: Vec<String>,
    pub response: Vec<String>,
    pub cookies: Vec<String>,
    /// Bytes of a value kept at most.
    pub length: usize,
}

impl Default for Capture {
    fn default() -> Capture {
        Capture {
            request: Vec::new(),
            response: Vec::new(),
            cookies: Vec::new(),
            length: 64,
        }
    }
}

/// The template's captures, for [`Template::parse`].
impl Capture {
    pub fn names(&self) -> Captures<'_> {
        Captures {
            request: &self.request,
            response: &self.response,
            cookies: &self.cookies,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_each_format_wants() {
        // 2026-11-29T02:13:49.123Z
        let t = std::time::UNIX_EPOCH + Duration::from_millis(1_795_918_429_123);
        assert_eq!(httpdate_rfc3339(t), "2026-11-29T02:13:49.123Z");
        assert_eq!(rfc3164_time(t), "Nov 29 02:13:49");
        assert_eq!(haproxy_time(t), "29/Nov/2026:02:13:49.123");
        let leap = std::time::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(&httpdate_rfc3339(leap)[..10], "2000-02-29");
    }

    #[test]
    fn addresses_and_settings_are_checked() {
        assert_eq!(
            Target::parse("udp://127.0.0.1:514"),
            Ok(Target::Udp("127.0.0.1:514".into()))
        );
        assert_eq!(
            Target::parse("unix:///dev/log"),
            Ok(Target::Unix("/dev/log".into()))
        );
        assert!(Target::parse("127.0.0.1:514").is_err());
        let s = SyslogSettings {
            address: "tcp://127.0.0.1:601".into(),
            protocol: Protocol::Rfc3164,
            facility: "local9".into(),
            tag: "router".into(),
            queue: 10,
        };
        assert_eq!(s.check().unwrap_err().0, "access_log.syslog.facility");
    }

    #[test]
    fn captures_are_cut_and_cleaned() {
        let names = ["user-agent".to_string(), "x-missing".to_string()];
        let got = capture(
            &names,
            |n| (n == "user-agent").then_some(&b"curl/8\x01abcdef"[..]),
            8,
        );
        assert_eq!(got, ["curl/8 a", "-"]);
    }
}
