//! The router and its member, started once per process, and one client connection
//! per input.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::View;
use super::member::{self, Log};
use super::oracle::Request;

/// How long the router may take to answer or close: far beyond what loopback
/// needs, so only a router that waits for bytes it will never get trips it.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// The Host the member's app answers to.
pub const HOST: &str = "ha-myapp-demo.example.com";

pub struct Harness {
    router: SocketAddr,
    log: Arc<Log>,
    /// Inputs run so far: each connects from an address of its own.
    runs: AtomicU32,
}

/// What one connection got.
pub struct Run {
    /// The final answers to the requests the strict reader read, in order: the
    /// status and, when the member gave it, the digest of what the member read.
    /// (Answers past them are not parsed: how long an answer's body is depends on
    /// its request, a HEAD's has none, and those requests are not known.)
    pub answers: Vec<(u16, Option<u64>)>,
    /// Answers from the member in everything the router sent back, parsed or not.
    pub member_answers_in_all: usize,
    /// Requests of this connection the member read whole.
    pub member_read: usize,
    /// The router reset the connection: answers may be lost.
    pub reset: bool,
}

impl Run {
    /// (request index, digest) of every answer the member gave.
    pub fn member_answers(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.answers
            .iter()
            .enumerate()
            .filter_map(|(i, (_, d))| d.map(|d| (i, d)))
    }
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

pub fn get() -> &'static Harness {
    HARNESS.get_or_init(|| match start() {
        Ok(h) => h,
        Err(e) => panic!("cannot start the router for client_stream: {e}"),
    })
}

fn start() -> Result<Harness, String> {
    let log = Arc::new(Log::default());
    let member = member::start(log.clone()).map_err(|e| format!("member: {e}"))?;
    let parent = std::env::temp_dir().join("fuzz-client-stream");
    remove_stale(&parent);
    let root = parent.join(std::process::id().to_string());
    let spool = root.join("spool");
    std::fs::create_dir_all(&spool).map_err(|e| format!("{}: {e}", spool.display()))?;
    let event = format!(
        "---\n:action: :add_public_endpoint\n:app_name: myapp\n:namespace: demo\n\
         :gear_id: 5464c9f6e0b8cd5a6e000001\n:public_port_name: haproxy-1.4\n\
         :public_address: {ip}\n:public_port: {port}\n:protocols:\n- http\n\
         :types:\n- load_balancer\n:mappings:\n- frontend: ''\n  backend: ''\n",
        ip = member.ip(),
        port = member.port()
    );
    std::fs::write(spool.join("01.yaml"), event).map_err(|e| format!("event: {e}"))?;
    let yaml = format!(
        "cloud_domain: example.com\nstate_dir: {state}\nlisten:\n  http: 127.0.0.1:0\n  admin: null\n\
         spi:\n  source: spool\n  spool:\n    path: {spool}\n    interval: 20ms\n\
         health:\n  checks: false\n",
        state = root.join("state").display(),
        spool = spool.display(),
    );
    let config =
        router::config::Config::parse(&yaml, "client_stream.yaml").map_err(|e| e.to_string())?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => return drop(tx.send(Err(e.to_string()))),
        };
        runtime.block_on(async move {
            match router::Router::bind(config).await {
                Ok(router) => {
                    let _ = tx.send(Ok(router.http_addr()));
                    router.run(std::future::pending()).await;
                }
                Err(e) => drop(tx.send(Err(e.to_string()))),
            }
        });
    });
    let router = rx.recv().map_err(|e| e.to_string())??;
    let harness = Harness {
        router,
        log,
        runs: AtomicU32::new(0),
    };
    harness.wait_routed()?;
    Ok(harness)
}

/// The directories of earlier processes that have ended (by PID: `/proc/PID`).
fn remove_stale(parent: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let ended = name
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|pid| !std::path::Path::new("/proc").join(pid.to_string()).exists());
        if ended {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Harness {
    /// Until a request for [`HOST`] reaches the member.
    fn wait_routed(&self) -> Result<(), String> {
        let probe = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
        let (requests, _) = super::oracle::all(probe.as_bytes());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            let run = self.exchange(probe.as_bytes(), 0, &requests);
            if run.member_answers().next().is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("the app was not routed within 20 s".into())
    }

    /// The member's view behind `digest`, to show beside the client's.
    pub fn member_view(&self, digest: u64) -> Option<View> {
        self.log.view(digest)
    }

    /// An address of 127.0.0.0/8 for the next input (never 127.0.0.1, the
    /// member's and the router's; last octets 1 to 254).
    fn next_ip(&self) -> IpAddr {
        let n = self.runs.fetch_add(1, Ordering::Relaxed) % (254 * 255 * 255);
        let (a, rest) = (n % 254 + 1, n / 254);
        IpAddr::V4(Ipv4Addr::new(
            127,
            1 + (rest / 255) as u8 % 254,
            (rest % 255) as u8,
            a as u8,
        ))
    }

    /// Writes `stream` in two pieces (split at `at`), and reads every answer until
    /// the router closes; once the requests the strict reader found are answered,
    /// the client ends its side.
    pub fn exchange(&self, stream: &[u8], at: usize, requests: &[Request]) -> Run {
        let ip = self.next_ip();
        self.log.begin(ip);
        let mut conn = match connect(ip, self.router) {
            Ok(c) => c,
            Err(e) => panic!("cannot connect from {ip} to the router: {e}"),
        };
        for piece in [&stream[..at], &stream[at..]] {
            if !piece.is_empty() && conn.write_all(piece).is_err() {
                break;
            }
        }
        let mut reader = Answers::new(requests);
        let mut shut = false;
        let mut chunk = [0u8; 16 * 1024];
        let mut all = Vec::new();
        let reset = loop {
            reader.parse();
            if !shut && reader.answers.len() >= requests.len() {
                let _ = conn.shutdown(Shutdown::Write);
                shut = true;
            }
            match conn.read(&mut chunk) {
                Ok(0) => break false,
                Ok(n) => {
                    reader.buf.extend_from_slice(&chunk[..n]);
                    all.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break true,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    panic!(
                        "the router neither answered nor closed within {ANSWER_WITHIN:?}: \
                     {} of {} requests answered",
                        reader.answers.len(),
                        requests.len()
                    )
                }
                Err(e) => panic!("reading the router's answers: {e}"),
            }
        };
        reader.finish();
        // A request the router forwarded just before it closed may still be on
        // its way to the member: wait for the member to read it whole.
        let settle = Instant::now() + Duration::from_millis(200);
        while self.log.busy() && Instant::now() < settle {
            std::thread::sleep(Duration::from_micros(200));
        }
        Run {
            answers: reader.answers,
            member_read: self.log.completed(ip),
            member_answers_in_all: all
                .windows(MEMBER_MARK.len())
                .filter(|w| *w == MEMBER_MARK)
                .count(),
            reset,
        }
    }
}

/// What only the member's answers carry (see `member::answer`).
const MEMBER_MARK: &[u8] = b"\r\nx-fuzz-view: ";

/// A connection from `ip` to the router; reads time out after [`ANSWER_WITHIN`].
fn connect(ip: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(ip, 0).into())?;
    socket.connect(&to.into())?;
    let conn: TcpStream = socket.into();
    conn.set_nodelay(true)?;
    conn.set_read_timeout(Some(ANSWER_WITHIN))?;
    Ok(conn)
}

/// Reads answers off the client side of the connection: a HEAD's answer, a 1xx,
/// 204 and 304 have no body; else `Content-Length`, chunked, or until the close.
struct Answers<'a> {
    requests: &'a [Request],
    buf: Vec<u8>,
    answers: Vec<(u16, Option<u64>)>,
    /// An answer read until the close: its status and digest.
    open: Option<(u16, Option<u64>)>,
}

impl<'a> Answers<'a> {
    fn new(requests: &'a [Request]) -> Self {
        Answers {
            requests,
            buf: Vec::new(),
            answers: Vec::new(),
            open: None,
        }
    }

    /// Takes every whole answer from the buffer.
    fn parse(&mut self) {
        while self.open.is_none() && self.answers.len() < self.requests.len() {
            let mut fields = [httparse::EMPTY_HEADER; 64];
            let mut head = httparse::Response::new(&mut fields);
            let used = match head.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => return,
                Err(e) => panic!(
                    "the router's answer is not HTTP/1 ({e}): {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            };
            let status = head.code.unwrap_or(0);
            let field = |name: &str| {
                head.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
            };
            let digest = field("x-fuzz-view").and_then(|d| u64::from_str_radix(&d, 16).ok());
            let head_only = self.requests[self.answers.len()].method == b"HEAD";
            let body =
                if (100..200).contains(&status) || status == 204 || status == 304 || head_only {
                    Some(0)
                } else if let Some(len) = field("content-length") {
                    Some(
                        len.trim()
                            .parse::<usize>()
                            .unwrap_or_else(|_| panic!("answer length {len:?}")),
                    )
                } else if field("transfer-encoding").is_some() {
                    match chunked_len(&self.buf[used..]) {
                        Some(n) => Some(n),
                        None => return,
                    }
                } else {
                    None
                };
            match body {
                Some(n) if self.buf.len() >= used + n => {
                    self.buf.drain(..used + n);
                    if status >= 200 {
                        self.answers.push((status, digest));
                    }
                }
                Some(_) => return,
                None => {
                    self.buf.drain(..used);
                    self.open = Some((status, digest));
                }
            }
        }
    }

    /// At the close: an answer read until then is whole.
    fn finish(&mut self) {
        if let Some(open) = self.open.take() {
            self.answers.push(open);
        }
    }
}

/// The length of a whole chunked body at the start of `bytes`, if it is all there.
fn chunked_len(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line_end = bytes[at..].windows(2).position(|w| w == b"\r\n")? + at;
        let digits: String = String::from_utf8_lossy(&bytes[at..line_end])
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        let size = usize::from_str_radix(&digits, 16).ok()?;
        at = line_end + 2;
        if size == 0 {
            let end = bytes[at..].windows(4).position(|w| w == b"\r\n\r\n");
            return match bytes[at..].starts_with(b"\r\n") {
                true => Some(at + 2),
                false => end.map(|e| at + e + 4),
            };
        }
        at += size + 2;
        if at > bytes.len() {
            return None;
        }
    }
}
