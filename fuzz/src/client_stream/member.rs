//! The member behind the router in the `client_stream` target: it reads what the
//! router sends with the strict reader ([`super::oracle`]) and answers each request
//! with a digest of what it read, so the client can compare it with what it sent.
//!
//! What the router sends must be one unambiguous HTTP/1.1 stream: a request the
//! strict reader refuses, in another version, or from a client connection that has
//! already ended, aborts the process at once (libFuzzer keeps the input).

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::View;
use super::oracle::{self, Stop};

/// What the member has read, shared with the client side.
#[derive(Default)]
pub struct Log {
    /// Requests read whole, by the client address the router named last in
    /// `X-Forwarded-For` (each input connects from an address of its own).
    completed: Mutex<HashMap<IpAddr, usize>>,
    /// The address of the input being run; a request from any other is late.
    current: Mutex<Option<IpAddr>>,
    /// Views by digest, to show both sides when they differ.
    views: Mutex<HashMap<u64, View>>,
    /// Connections holding part of a request.
    busy: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Log {
    /// From now on requests come from `ip`.
    pub fn begin(&self, ip: IpAddr) {
        *lock(&self.current) = Some(ip);
        lock(&self.completed).clear();
    }

    /// Requests read whole from `ip`.
    pub fn completed(&self, ip: IpAddr) -> usize {
        lock(&self.completed).get(&ip).copied().unwrap_or(0)
    }

    /// Whether some connection holds part of a request.
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire) > 0
    }

    pub fn view(&self, digest: u64) -> Option<View> {
        lock(&self.views).get(&digest).cloned()
    }

    fn record(&self, ip: IpAddr, view: View) -> u64 {
        let current = *lock(&self.current);
        if current != Some(ip) {
            fail(&format!(
                "a request from {ip} reached the member while {current:?} runs: \
                 forwarded after its client's connection ended ({view:?})"
            ));
        }
        if std::env::var_os("FUZZ_SHOW").is_some() {
            eprintln!("member read from {ip}: {view:?}");
        }
        *lock(&self.completed).entry(ip).or_default() += 1;
        let digest = view.digest();
        let mut views = lock(&self.views);
        if views.len() > 10_000 {
            views.clear();
        }
        views.insert(digest, view);
        digest
    }
}

/// Aborts: a panic in a member thread would not stop the fuzzer.
fn fail(why: &str) -> ! {
    eprintln!("client_stream member: {why}");
    std::process::abort()
}

/// Listens on loopback; one thread per connection from the router.
pub fn start(log: Arc<Log>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || serve(conn, &log));
        }
    });
    Ok(addr)
}

fn serve(mut conn: TcpStream, log: &Log) {
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut partial = false;
    loop {
        // Every whole request read so far, in order.
        loop {
            match oracle::next_within(&buf, oracle::MEMBER) {
                Ok((request, used)) => {
                    buf.drain(..used);
                    if let Some((name, _)) = request.fields.iter().find(|(n, _)| n.contains(&b'_'))
                    {
                        fail(&format!(
                            "a field name with `_` reached the member: {:?}",
                            String::from_utf8_lossy(name)
                        ));
                    }
                    if !answer(&mut conn, log, &request) {
                        mark_busy(log, partial, false);
                        return;
                    }
                }
                Err(Stop::Invalid(why)) => fail(&format!(
                    "the router sent what a strict reader refuses ({why}): {:?}",
                    String::from_utf8_lossy(&buf)
                )),
                Err(Stop::Incomplete) => break,
            }
        }
        partial = mark_busy(log, partial, !buf.is_empty());
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => {
                mark_busy(log, partial, false);
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Counts this connection in [`Log::busy`] while it holds part of a request.
fn mark_busy(log: &Log, was: bool, is: bool) -> bool {
    match (was, is) {
        (false, true) => log.busy.fetch_add(1, Ordering::AcqRel),
        (true, false) => log.busy.fetch_sub(1, Ordering::AcqRel),
        _ => 0,
    };
    is
}

/// Records `request` and answers it with its digest; false when the connection
/// is to end.
fn answer(conn: &mut TcpStream, log: &Log, request: &oracle::Request) -> bool {
    let digest = log.record(client_of(request), received(request));
    let close = oracle::closes(request);
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nx-fuzz-view: {digest:016x}\r\n{}\r\n",
        if close { "connection: close\r\n" } else { "" }
    );
    conn.write_all(answer.as_bytes()).is_ok() && !close
}

/// The client address the router put last in `X-Forwarded-For`.
fn client_of(request: &oracle::Request) -> IpAddr {
    let last = oracle::values(request, b"x-forwarded-for")
        .last()
        .and_then(|v| v.rsplit(|&b| b == b',').next())
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok());
    match last {
        Some(ip) => ip,
        None => fail(&format!("no X-Forwarded-For from the router: {request:?}")),
    }
}

/// What the member read, checked for what the router must always send: HTTP/1.1
/// and a target in origin form (or `*`).
fn received(request: &oracle::Request) -> View {
    if request.minor != 1 {
        fail(&format!(
            "the router spoke HTTP/1.0 to the member: {request:?}"
        ));
    }
    if !(request.target.starts_with(b"/") || request.target == b"*") {
        fail(&format!(
            "a target not in origin form reached the member: {request:?}"
        ));
    }
    let host = oracle::values(request, b"host").next().map(<[u8]>::to_vec);
    View::new(request, request.target.clone(), host, &[])
}
