//! Access lines to syslog (`access_log.syslog`), besides stderr: RFC 5424 or
//! RFC 3164, over UDP, TCP (RFC 6587 octet counting for 5424, a newline for
//! 3164) or a unix datagram socket such as `/dev/log`, each line written from
//! the operator's template ([`crate::log_format`]).
//!
//! A slow or dead sink never slows a request. Over UDP and a unix datagram
//! socket each line is one non-blocking send from the thread that ends the
//! request, as haproxy's `log` sends (no hand-off to another task, whose
//! wake-up cost more than the send); a full socket buffer drops the line. Over
//! TCP a line is handed to a bounded queue (`access_log.syslog.queue`, 10 000
//! lines by default, about 3 MB) without waiting, and one sender task writes
//! the queue out. A line that finds the queue or the buffer full, or that the
//! transport refuses, is dropped and counted
//! (`router_access_log_dropped_total{reason}`). A TCP sink that goes away is
//! connected to again, no more than once a second.
//!
//! A line is written at a position in one buffer a thread ([`Line`]): the
//! head's fixed parts made once, the time's text once a second per thread,
//! numbers up to four digits from a table; the `httplog` preset by a writer
//! of its own (`AccessRecord::httplog`), any other template step by step.
//! The line through `core::fmt` (a `format!` a piece, a `String` grown piece
//! by piece) cost 18 000 instructions a request, this one about 1 100, 4.7 %
//! of a request; see `bench/RESULTS.md`.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Deserialize;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;

use h1_codec::fields::NameSet;

use crate::log_format::{Captures, Literal, Steps, Template, Var};

mod line;

use line::Scratch;
pub use line::{LINE_MAX, Line, SLACK, TimeText, time_text, written};

thread_local! {
    /// The line's buffer, the second's texts and the clock's anchor of each
    /// thread that writes lines.
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::EMPTY) };
}

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

/// The access lines' sink: the template, where lines go and the counters.
pub struct Sink {
    pub template: Template,
    /// The template as a line is written.
    pub steps: Steps,
    /// Whether a line reads the request's ID or trace ID, the time to its
    /// response head, its host (a request's record keeps them only then).
    pub reads_ids: bool,
    pub reads_head: bool,
    pub reads_host: bool,
    /// The template is `httplog`'s, written by its own writer.
    pub httplog: bool,
    /// What is captured, in the template's order (see `access_log.capture`).
    pub capture: Capture,
    /// The request's and the response's field names of `capture`, compiled.
    pub request_names: CaptureNames,
    pub response_names: CaptureNames,
    out: Out,
    prefix: Prefix,
    queue_full: prometheus::IntCounter,
    failed: prometheus::IntCounter,
}

/// Where lines go.
enum Out {
    /// A datagram socket (UDP, connected; or unix), non-blocking, sent to
    /// from the thread that ends the request.
    Udp(std::net::UdpSocket),
    Unix(std::os::unix::net::UnixDatagram, PathBuf),
    /// The TCP sender's queue (a stream can stall; a datagram cannot).
    Tcp(mpsc::Sender<Bytes>),
}

/// What starts every line, made once: the text before the time and after it.
struct Prefix {
    protocol: Protocol,
    /// `<PRI>1 ` (5424) or `<PRI>` (3164).
    before: Literal,
    /// ` HOST TAG PID - - ` (5424), ` HOST TAG[PID]: ` or, over a unix
    /// socket, ` TAG[PID]: ` (3164: the local form, as glibc's syslog(3)
    /// writes to /dev/log; the daemon adds the host).
    after: Literal,
}

impl Prefix {
    fn of(settings: &SyslogSettings, local: bool) -> Prefix {
        let pri = facility(&settings.facility).unwrap_or(17) * 8 + 6;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "-".into());
        let (tag, pid) = (&settings.tag, std::process::id());
        let (before, after) = match settings.protocol {
            Protocol::Rfc5424 => (format!("<{pri}>1 "), format!(" {host} {tag} {pid} - - ")),
            Protocol::Rfc3164 if local => (format!("<{pri}>"), format!(" {tag}[{pid}]: ")),
            Protocol::Rfc3164 => (format!("<{pri}>"), format!(" {host} {tag}[{pid}]: ")),
        };
        Prefix {
            protocol: settings.protocol,
            before: Literal::of(before.as_bytes()),
            after: Literal::of(after.as_bytes()),
        }
    }
}

impl Sink {
    /// Opens the sink (a TCP one's sender task on the current runtime) and
    /// registers the counters; `template` was checked with the configuration.
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
        let failed = dropped.with_label_values(&["send_failed"]);
        let out = match target {
            Target::Udp(addr) => Out::Udp(udp(&addr).map_err(|e| format!("{addr}: {e}"))?),
            Target::Unix(path) => {
                let socket = std::os::unix::net::UnixDatagram::unbound()
                    .and_then(|s| s.set_nonblocking(true).map(|()| s))
                    .map_err(|e| e.to_string())?;
                Out::Unix(socket, path)
            }
            Target::Tcp(addr) => {
                let (tx, rx) = mpsc::channel(settings.queue);
                tokio::spawn(send_all(rx, addr, settings.protocol, failed.clone()));
                Out::Tcp(tx)
            }
        };
        Ok(Arc::new(Sink {
            reads_ids: template.reads(|v| matches!(v, Var::RequestId | Var::TraceId)),
            reads_head: template.reads(|v| matches!(v, Var::HeadMs)),
            reads_host: template.reads(|v| matches!(v, Var::Host)),
            httplog: template.is_httplog(),
            steps: Steps::of(&template),
            template,
            capture: capture.clone(),
            request_names: CaptureNames::of(&capture.request),
            response_names: CaptureNames::of(&capture.response),
            out,
            prefix: Prefix::of(settings, local),
            queue_full: dropped.with_label_values(&["queue_full"]),
            failed,
        }))
    }

    /// Writes one line for a request that ended at `end` and sends it,
    /// never waiting: the syslog head, then what `message` writes (the
    /// template's text). Written in the thread's own buffer, from which a
    /// datagram sink sends it: no allocation a line.
    pub fn write(&self, end: Instant, message: impl FnOnce(&mut Line<'_>)) {
        let p = &self.prefix;
        // The line by value: a local of this closure, its position kept
        // in a register while the template's pieces are written.
        let fill = |mut line: Line<'_>| {
            line.literal(&p.before);
            line.time(match p.protocol {
                Protocol::Rfc5424 => TimeText::Rfc3339,
                Protocol::Rfc3164 => TimeText::Rfc3164,
            });
            line.literal(&p.after);
            message(&mut line);
            line.finish()
        };
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => scratch.write(end, fill, |line| self.send(line)),
            // Not reached (nothing in a line writes another): counted, not
            // written a second way (one call of `fill`, so that it is
            // inlined and the line's position kept in a register).
            Err(_) => self.failed.inc(),
        });
    }

    fn send(&self, line: &[u8]) {
        let sent = match &self.out {
            // The system call itself (`rustix`): glibc's `send` is a
            // cancellation point, whose bookkeeping around the call cost
            // as much as the rest of the send (`bench/RESULTS.md`).
            Out::Udp(socket) => rustix::net::send(socket, line, rustix::net::SendFlags::DONTWAIT)
                .map(drop)
                .map_err(std::io::Error::from),
            Out::Unix(socket, path) => socket.send_to(line, path).map(drop),
            Out::Tcp(tx) => {
                if tx.try_send(Bytes::copy_from_slice(line)).is_err() {
                    self.queue_full.inc();
                }
                return;
            }
        };
        match sent {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self.queue_full.inc(),
            Err(_) => self.failed.inc(),
        }
    }
}

/// A connected, non-blocking UDP socket to `addr` (`host:port`), bound to
/// the unspecified address of its family.
fn udp(addr: &str) -> std::io::Result<std::net::UdpSocket> {
    use std::net::{Ipv4Addr, Ipv6Addr, ToSocketAddrs};
    let to = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("resolves to no address"))?;
    let any: std::net::IpAddr = if to.is_ipv6() {
        Ipv6Addr::UNSPECIFIED.into()
    } else {
        Ipv4Addr::UNSPECIFIED.into()
    };
    let socket = std::net::UdpSocket::bind((any, 0))?;
    socket.connect(to)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// The TCP sender task: every queued line to `addr`, until the queue closes.
async fn send_all(
    mut rx: mpsc::Receiver<Bytes>,
    addr: String,
    protocol: Protocol,
    failed: prometheus::IntCounter,
) {
    let mut tcp: Option<tokio::net::TcpStream> = None;
    let mut next_connect = tokio::time::Instant::now();
    while let Some(line) = rx.recv().await {
        if tcp.is_none() && tokio::time::Instant::now() >= next_connect {
            next_connect = tokio::time::Instant::now() + Duration::from_secs(1);
            let connect = tokio::net::TcpStream::connect(addr.as_str());
            tcp = tokio::time::timeout(Duration::from_secs(2), connect)
                .await
                .ok()
                .and_then(Result::ok);
        }
        let Some(stream) = tcp.as_mut() else {
            failed.inc();
            continue;
        };
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
        if stream.write_all(&framed).await.is_err() {
            tcp = None;
            failed.inc();
        }
    }
}

/// Values a line holds at most: every capture (32 at most, see
/// `access_log.capture`) and the app.
const MAX_VALUES: usize = 34;

/// Captured values, in one buffer: value `i` ends at `ends[i]`. Two empty
/// vectors when nothing is captured (no allocation, and small to move: the
/// request's record is moved with it).
#[derive(Debug, Default)]
pub struct Values {
    bytes: Vec<u8>,
    ends: Vec<u32>,
}

impl Values {
    pub fn with_capacity(values: usize) -> Values {
        let values = values.min(MAX_VALUES);
        Values {
            bytes: Vec::with_capacity(values * 32),
            ends: Vec::with_capacity(values),
        }
    }

    /// Adds a value; its index comes back (past the last one when full: it
    /// then reads as none).
    pub fn push(&mut self, value: &[u8]) -> usize {
        if self.ends.len() >= MAX_VALUES {
            return MAX_VALUES;
        }
        self.bytes.extend_from_slice(value);
        self.ends.push(self.bytes.len() as u32);
        self.ends.len() - 1
    }

    /// Value `i` (`-` when there is none).
    pub fn get(&self, i: usize) -> &[u8] {
        let Some(&end) = self.ends.get(i) else {
            return b"-";
        };
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        self.bytes.get(start as usize..end as usize).unwrap_or(b"-")
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Adds `value` cut at `length` bytes, control bytes made spaces.
    fn push_clean(&mut self, value: &[u8], length: usize) {
        let value = &value[..value.len().min(length)];
        let at = self.bytes.len();
        self.push(value);
        // A fold with no early exit: vectorised, and values are rarely dirty.
        let control = |b: u8| b < b' ' || b == 0x7f;
        if value.iter().fold(false, |dirty, &b| dirty | control(b)) {
            for b in &mut self.bytes[at..] {
                if control(*b) {
                    *b = b' ';
                }
            }
        }
    }
}

/// The field names a sink captures, compiled once (see [`NameSet`]).
#[derive(Clone, Debug, Default)]
pub struct CaptureNames(NameSet);

impl CaptureNames {
    pub fn of(list: &[String]) -> CaptureNames {
        CaptureNames(NameSet::of(list.iter().map(|n| n.as_bytes()), false))
    }

    /// Each name's first value among `fields` (in their order), cut at
    /// `length` bytes and cleaned, into `into` in the names' order; `-` for a
    /// name no field has. One pass over the fields.
    pub fn capture<'a>(
        &self,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
        length: usize,
        into: &mut Values,
    ) {
        let names = &self.0;
        if names.is_empty() {
            return;
        }
        let mut found: [Option<&[u8]>; MAX_VALUES] = [None; MAX_VALUES];
        let mut missing = names.len();
        for (name, value) in fields {
            if missing == 0 {
                break;
            }
            for i in names.places(name) {
                if let Some(slot @ None) = found.get_mut(i) {
                    *slot = Some(value);
                    missing -= 1;
                }
            }
        }
        for value in found.iter().take(names.len()) {
            match value {
                Some(v) => into.push_clean(v, length),
                None => {
                    into.push(b"-");
                }
            }
        }
    }
}

/// Captures into `into` each cookie of `names`: its first value among the
/// `Cookie` fields' values, cut and cleaned as a field's.
pub fn capture_cookies<'a, I: Iterator<Item = &'a [u8]>>(
    names: &[String],
    cookies: impl Fn() -> I,
    length: usize,
    into: &mut Values,
) {
    for n in names {
        let value = cookies()
            .flat_map(|v| v.split(|b| *b == b';'))
            .find_map(|pair| {
                pair.trim_ascii()
                    .strip_prefix(n.as_bytes())?
                    .strip_prefix(b"=")
            });
        match value {
            Some(v) => into.push_clean(v, length),
            None => {
                into.push(b"-");
            }
        }
    }
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
        let names = CaptureNames::of(&["User-Agent".into(), "x-missing".into(), "host".into()]);
        let mut got = Values::default();
        got.push(b"first");
        let fields: [(&[u8], &[u8]); 4] = [
            (b"Host", b"h.example.com"),
            (b"user-agent", b"curl/8\x01abcdef"),
            (b"User-Agent", b"second"),
            (b"Accept", b"*/*"),
        ];
        names.capture(fields.into_iter(), 8, &mut got);
        assert_eq!(got.len(), 4);
        assert_eq!(
            [got.get(0), got.get(1), got.get(2), got.get(3), got.get(4)],
            [&b"first"[..], b"curl/8 a", b"-", b"h.exampl", b"-"]
        );
        let mut cookies = Values::default();
        let values: [&[u8]; 2] = [b"a=1; session=abc", b"session=later"];
        capture_cookies(
            &["session".into(), "none".into()],
            || values.into_iter(),
            64,
            &mut cookies,
        );
        assert_eq!([cookies.get(0), cookies.get(1)], [&b"abc"[..], b"-"]);
    }
}
