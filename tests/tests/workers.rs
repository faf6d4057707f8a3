//! Per-core workers (`worker_threads` > 1, the default model): client connections
//! are spread over single-threaded runtimes, each on its own thread, and the
//! member connections they use stay within the member's slots, through real
//! sockets, the in-process router and the router binary.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2e::process::{RouterProcess, spool_config, spool_router};
use e2e::{TestRouter, events, raw};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HA: &str = "ha-myapp-demo.example.com";

/// Sends one keep-alive GET on `s` and reads its whole response (the router's
/// answers here carry a `content-length`).
async fn get(s: &mut TcpStream) -> u16 {
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {HA}\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("a response within 10 s")
            .expect("read");
        assert!(n > 0, "closed before a whole response");
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no content-length in {head}"));
            if got.len() >= end + 4 + len {
                return raw::status(&got).expect("status");
            }
        }
    }
}

/// A member that answers every request after `delay` on keep-alive connections
/// and records the most connections it ever had open at once.
async fn counting_member(delay: Duration) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let open = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let seen = peak.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let now = open.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let open = open.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        tokio::time::sleep(delay).await;
                        if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen)
}

async fn router_on(member: SocketAddr, extra: &str) -> TestRouter {
    let r = TestRouter::start(&format!("health:\n  checks: false\n{extra}")).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", member));
    r.wait_route(HA).await;
    r
}

#[tokio::test]
async fn connections_go_to_the_least_loaded_worker_and_share_idle_member_connections() {
    let (member, _) = counting_member(Duration::ZERO).await;
    let r = router_on(member, "worker_threads: 2\n").await;
    // Two clients held open at once: one on each worker.
    let mut a = TcpStream::connect(r.http).await.expect("connect");
    assert_eq!(get(&mut a).await, 200);
    let mut b = TcpStream::connect(r.http).await.expect("connect");
    assert_eq!(get(&mut b).await, 200);
    for w in ["0", "1"] {
        let sample = format!("router_worker_connections{{worker=\"{w}\"}}");
        assert_eq!(r.metric(&sample).await, Some(1.0), "{sample}");
    }
    // One request at a time, alternating between the two workers: the member
    // connection opened by the first is idle whenever the other needs one, so it is
    // borrowed rather than a second one opened (per-worker lists without borrowing
    // opened two; closing the other's to open one's own opened one per request).
    for _ in 0..10 {
        assert_eq!(get(&mut a).await, 200);
        assert_eq!(get(&mut b).await, 200);
    }
    assert_eq!(
        r.metric("router_upstream_connections_opened_total").await,
        Some(1.0),
        "one member connection serves both workers' sequential requests"
    );
    drop((a, b));
    e2e::eventually(
        "connections counted off their workers",
        Duration::from_secs(5),
        async || {
            r.metric("router_worker_connections{worker=\"0\"}").await == Some(0.0)
                && r.metric("router_worker_connections{worker=\"1\"}").await == Some(0.0)
        },
    )
    .await;
}

#[tokio::test]
async fn a_member_never_sees_more_connections_than_its_slots_across_workers() {
    // Slow answers, so that requests overlap; 16 clients on 2 workers, 3 slots.
    let (member, peak) = counting_member(Duration::from_millis(20)).await;
    let r = router_on(
        member,
        "worker_threads: 2\nupstream:\n  max_connections_per_backend: 3\n  queue_timeout: 10s\n",
    )
    .await;
    let http = r.http;
    let clients: Vec<_> = (0..16)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = TcpStream::connect(http).await.expect("connect");
                let mut statuses = Vec::new();
                for _ in 0..5 {
                    statuses.push(get(&mut s).await);
                }
                statuses
            })
        })
        .collect();
    for c in clients {
        assert_eq!(c.await.expect("client"), vec![200; 5]);
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        (1..=3).contains(&peak),
        "the member saw {peak} connections at once; its slots are 3"
    );
    // A connection is opened only when no worker has an idle one: never more
    // than the slots, however the 80 requests were spread.
    let opened = r.metric("router_upstream_connections_opened_total").await;
    assert!(
        opened.is_some_and(|n| (1.0..=3.0).contains(&n)),
        "member connections opened: {opened:?}"
    );
}

#[tokio::test]
async fn the_binary_runs_one_thread_per_worker_or_the_work_stealing_runtime() {
    let (member, _) = counting_member(Duration::ZERO).await;
    for (extra, workers) in [
        ("worker_threads: 2\n", 2),
        ("worker_threads: 2\nwork_stealing: true\n", 0),
    ] {
        let dir = e2e::tempdir("workers");
        let cfg = spool_router(
            &dir,
            &events::add_lb("myapp", "demo", member),
            &spool_config(&dir, "127.0.0.1:0", false, extra),
        );
        let p = RouterProcess::start(&cfg).await;
        e2e::eventually("the route", Duration::from_secs(10), async || {
            p.status(HA, "/").await == Some(200)
        })
        .await;
        let names: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", p.pid()))
            .expect("tasks")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|n| n.trim().to_owned())
            .collect();
        let on_workers = names
            .iter()
            .filter(|n| n.starts_with("router-worker-"))
            .count();
        assert_eq!(on_workers, workers, "{extra}: threads {names:?}");
        // Served either way, a request per connection.
        for _ in 0..4 {
            assert_eq!(p.status(HA, "/").await, Some(200), "{extra}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
