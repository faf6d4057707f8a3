//! End-to-end test harness: the router over real sockets, with real backends and
//! real clients. Everything binds port 0 on loopback, so tests run in parallel.
//!
//! - [`Backend`]: an HTTP/1.1 server that answers with a JSON echo of what it
//!   received (method, target, version, headers, body length), plus a few behaviours
//!   selected by path (`/slow?ms=N`, `/stream?chunks=N`, `/status/N`) and WebSocket
//!   echo on `Upgrade: websocket`;
//! - [`TestRouter`]: the router library started in-process on a generated config, with
//!   its own temporary spool and state directories;
//! - [`raw`]: send exact bytes and read the raw answer, for malformed requests;
//! - [`events`]: routing-SPI event bodies pointing at local backends;
//! - [`activemq`], [`rabbitmq`]: real brokers on private ports.

pub mod activemq;
pub mod attack;
pub mod backend;
pub mod broker_api;
pub mod events;
pub mod h3client;
pub mod hapair;
pub mod netns;
pub mod openssl_ca;
pub mod pebble;
pub mod pki;
pub mod portproxy;
pub mod probe;
pub mod process;
pub mod prometheus;
pub mod rabbitmq;
pub mod raw;
pub mod router;
pub mod tlsclient;

pub use backend::{Backend, Echo, Refusing};
pub use router::TestRouter;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh temporary directory, unique per call.
pub fn tempdir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    static CLEANUP: std::sync::Once = std::sync::Once::new();
    // Every directory made here goes when the test process exits, passed or failed
    // (routers restarted over one root need it to outlive each router, so no guard
    // per router). `E2E_KEEP=1` keeps them for a post-mortem.
    CLEANUP.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function with no captured state.
        unsafe {
            libc::atexit(remove_tempdirs);
        }
    });
    let dir = std::env::temp_dir().join(format!(
        "router-e2e-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tempdir");
    dir
}

/// Removes this process's `router-e2e-*-PID-N` directories (see [`tempdir`]).
extern "C" fn remove_tempdirs() {
    if std::env::var_os("E2E_KEEP").is_some() {
        return;
    }
    let marker = format!("-{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("router-e2e-") && name.contains(&marker) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// The workspace's fixtures folder.
/// A port free right now on every address of `ip`'s family (bound on the wildcard,
/// then released): only for programs that cannot report the port they bound
/// (ActiveMQ, RabbitMQ, haproxy, a port written into a file before the program
/// starts). Our own binaries bind port 0 and report it. The one copy of this.
///
/// The wildcard, not `ip`: a kernel asked for any port on one address may hand
/// out one that is bound on another address (Linux 6.18 here did, every time),
/// and a program that then binds the wildcard, as RabbitMQ's distribution port
/// check does, finds it taken.
///
/// Never the same port twice in one test process: a broker stopped and started
/// again on its ports (`broker_restart_mid_stream_loses_nothing`) frees them
/// for a moment, and the kernel handed one of them to a broker starting in a
/// test beside it, whose own connector then could not bind: its test found
/// the other broker's port open, then nothing once that test ended
/// ("publisher connects: Connection refused", run 56).
pub fn free_port(ip: std::net::IpAddr) -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let any: std::net::IpAddr = match ip {
        std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    loop {
        let port = std::net::TcpListener::bind((any, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if given.insert(port) {
            return port;
        }
    }
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/spi-events")
}

/// Polls `check` every 20 ms until it is true, panicking with `what` after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sum of the samples of `name` in a Prometheus text `page` whose labels
/// include every one of `labels` (a counter split by a label the caller does
/// not care about, e.g. `router_tls_handshakes_total{kind="full"}` over its
/// `group`s).
pub fn metric_sum(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            let has_all = labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            (n == name && has_all).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// The blocking tests' [`eventually`]: calls `check` every `every` until it
/// answers `Ok`, and returns its value; after `limit`, panics naming `what` and
/// the last `Err` (why it was not yet so: a status, a log's tail), so that a
/// timeout says what was seen, not only what was awaited.
pub fn wait_for<T>(
    what: &str,
    limit: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let start = std::time::Instant::now();
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) if start.elapsed() > limit => {
                panic!("timed out after {limit:?} waiting for {what}; last seen: {why}")
            }
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// [`wait_for`] for a plain condition.
pub fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    wait_for(what, limit, Duration::from_millis(20), || {
        check().then_some(()).ok_or_else(|| "not yet".to_string())
    })
}

/// The path of a binary built by this workspace (`router`, `echo-backend`), next to
/// the test executable's `deps/` folder.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace` first",
        path.display()
    );
    path
}

/// A plain `GET` of `url`: the status and the body as text; `(0, "")` when
/// nothing answered.
pub async fn http_get(url: &str) -> (u16, String) {
    use http_body_util::{BodyExt as _, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    let client: Client<HttpConnector, Empty<bytes::Bytes>> =
        Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
    let Ok(uri) = url.parse() else {
        return (0, String::new());
    };
    let Ok(resp) = client.get(uri).await else {
        return (0, String::new());
    };
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}
