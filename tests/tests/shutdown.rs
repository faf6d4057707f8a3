//! Graceful shutdown of the in-process router.

use std::time::Duration;

use e2e::{Backend, TestRouter, events};

const HA: &str = "ha-myapp-demo.example.com";

/// A router with one member, and a request to it that takes `ms` to answer, already
/// in flight when this returns.
async fn router_with_slow_request(
    config: &str,
    ms: u64,
) -> (TestRouter, Backend, tokio::task::JoinHandle<Vec<u8>>) {
    let b = Backend::start().await;
    let r = TestRouter::start(config).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let addr = r.http;
    let slow = tokio::spawn(async move {
        e2e::raw::exchange(
            addr,
            format!("GET /slow?ms={ms} HTTP/1.1\r\nHost: {HA}\r\n\r\n").as_bytes(),
            Duration::from_secs(60),
        )
        .await
    });
    // Let the request reach the member (wait_route made the first hit).
    e2e::eventually("request in flight", Duration::from_secs(10), async || {
        b.hits() >= 2
    })
    .await;
    (r, b, slow)
}

#[tokio::test]
async fn in_flight_request_finishes_and_readiness_drops() {
    let (mut r, _b, slow) = router_with_slow_request("shutdown_grace: 10s\n", 1000).await;
    let stopped = r.begin_stop();
    // Readiness drops at once (keepalived moves the VIP) while the admin API stays up.
    e2e::eventually("not ready", Duration::from_secs(5), async || {
        r.admin_get("/readyz").await.0 == 503
    })
    .await;
    let resp = slow.await.expect("join");
    assert_eq!(
        e2e::raw::status(&resp),
        Some(200),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    // The keep-alive connection is closed after the in-flight response.
    let head = String::from_utf8_lossy(&resp).to_ascii_lowercase();
    assert!(head.contains("connection: close"), "{head}");
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("router stopped after draining")
        .expect("join");
    assert!(
        tokio::net::TcpStream::connect(r.http).await.is_err(),
        "listener closed"
    );
}

#[tokio::test]
async fn grace_period_bounds_the_drain() {
    let (mut r, _b, slow) = router_with_slow_request("shutdown_grace: 300ms\n", 30000).await;
    let stopped = r.begin_stop();
    // Far less than the member's 30 s: the grace period, not the request, decides.
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("router stopped once the grace period ended")
        .expect("join");
    slow.abort();
}

/// keepalived's handover sends SIGUSR1 to whatever router its pid file names,
/// one still starting included (the HA soak saw one killed so): SIGHUP, SIGUSR1
/// and SIGUSR2 are held from `main`'s first line (seen in the process's
/// `SigBlk` mask; before `main`, the loader's few microseconds, no process can
/// hold them) until their handlers are in, and then taken: the real binary,
/// signalled from then on while it starts, starts and stays.
#[tokio::test]
async fn a_router_signalled_while_it_starts_starts() {
    let dir = e2e::tempdir("signalled-start");
    std::fs::create_dir_all(&dir).expect("dir");
    let config = e2e::process::spool_config(&dir, "127.0.0.1:0", false, "");
    let event = events::add_lb("app", "ns", "127.0.0.1:9".parse().expect("addr"));
    let cfg = e2e::process::spool_router(&dir, &event, &config);
    // HUP (bit 0), USR1 (bit 9), USR2 (bit 11) in the main thread's mask.
    let held = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                let hex = s
                    .lines()
                    .find_map(|l| l.strip_prefix("SigBlk:"))?
                    .trim()
                    .to_string();
                u64::from_str_radix(&hex, 16).ok()
            })
            .is_some_and(|mask| mask & 0xa01 == 0xa01)
    };
    // The held window is the start's first milliseconds: a look every 100 µs
    // can miss it on a loaded host, so a start that was not caught in it is
    // stopped and made again (at most 20 times).
    let spawn = || {
        let child = std::process::Command::new(e2e::bin("router"))
            .arg("--config")
            .arg(&cfg)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("router");
        Reaped(child)
    };
    let mut caught = None;
    let mut ended = Vec::new();
    for _ in 0..20 {
        let mut child = spawn();
        let pid = child.0.id().to_string();
        let mut seen = false;
        for _ in 0..5000 {
            if held(&pid) {
                seen = true;
                break;
            }
            if let Some(status) = child.0.try_wait().expect("wait") {
                ended.push(status);
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        if seen {
            caught = Some((child, pid));
            break;
        }
    }
    let Some((mut child, pid)) = caught else {
        panic!(
            "SIGHUP, SIGUSR1 and SIGUSR2 never seen held in 20 starts (starts that ended by themselves: {ended:?})"
        );
    };
    let mut sent = 0;
    for _ in 0..100 {
        for sig in ["-USR1", "-HUP"] {
            let ok = std::process::Command::new("kill")
                .args([sig, &pid])
                .status();
            sent += usize::from(ok.is_ok_and(|s| s.success()));
        }
        if let Some(status) = child.0.try_wait().expect("wait") {
            panic!("the router ended while starting ({status}) after {sent} signals");
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.0.try_wait().expect("wait").is_none(),
        "the router ended after {sent} signals while starting"
    );
    assert!(
        !held(&pid),
        "the signals are taken once the handlers are in"
    );
}

/// A child process killed (by its PID) and reaped when dropped: also when
/// the test fails while it runs (one such router outlived a failed run).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An h2 connection with a stream in flight when the router stops: told
/// GOAWAY, its stream still answered in full, then closed (the own h2
/// server, `request/connection/h2/`).
#[tokio::test]
async fn an_h2_stream_in_flight_is_answered_then_its_connection_closed() {
    use http_body_util::{BodyExt as _, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let b = Backend::start().await;
    let mut r = TestRouter::start("shutdown_grace: 10s\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let req = http::Request::get(format!("http://{HA}/slow?ms=1000"))
        .body(Empty::<bytes::Bytes>::new())
        .expect("request");
    let slow = tokio::spawn(send.send_request(req));
    e2e::eventually("request in flight", Duration::from_secs(10), async || {
        b.hits() >= 2
    })
    .await;
    let stopped = r.begin_stop();
    let resp = slow
        .await
        .expect("join")
        .expect("the stream in flight is answered");
    assert_eq!(resp.status(), 200);
    resp.into_body()
        .collect()
        .await
        .expect("its whole body after the GOAWAY");
    let ended = tokio::time::timeout(Duration::from_secs(10), conn)
        .await
        .expect("the connection closed once its last stream was done")
        .expect("join");
    assert!(ended.is_ok(), "closed cleanly: {ended:?}");
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("router stopped after draining")
        .expect("join");
}
