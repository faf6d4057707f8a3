//! One client key for every per-client count: a client rotating IPv6 addresses
//! inside its /64 is one client to an app's `rate_limit` and
//! `max_connections_per_client`, to `limits.max_connections_per_source` and to a
//! member's share, whether its address is the connection's or the one a trusted
//! proxy names in `X-Forwarded-For`; `limits.client_ipv6_prefix` changes the
//! grouping.
//!
//! The address tests run the router, its member and the clients in a network
//! namespace of their own (the test thread `unshare`s one: it goes with the
//! thread, also when the test fails), whose loopback holds 100 addresses of one
//! /64 and one of another. That needs root: without it they fail saying so.

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::{Backend, TestRouter, events};

const HOST: &str = "ha-shop-demo.example.com";
const TOKEN: &str = "client-key-token";
/// The /64 one client rotates in, and another client's.
const ROTATING: &str = "2001:db8:7:1::";
const OTHER: &str = "2001:db8:7:2::1";

/// Runs `test` on a thread of its own inside a new network namespace whose
/// loopback holds `ROTATING` 1 to 100 and `OTHER`.
fn in_own_namespace(test: impl AsyncFnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        // SAFETY: unshare(2) with a flag only changes this thread's namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            panic!(
                "this test needs root (CAP_SYS_ADMIN) to make a network namespace: {}; it cannot run here",
                std::io::Error::last_os_error()
            );
        }
        let mut batch = String::from("link set lo up\n");
        for n in 1..=100 {
            batch.push_str(&format!("addr add {ROTATING}{n:x}/128 dev lo nodad\n"));
        }
        batch.push_str(&format!("addr add {OTHER}/128 dev lo nodad\n"));
        let path = e2e::tempdir("client-key").join("ip.batch");
        std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
        std::fs::write(&path, batch).expect("batch");
        let out = Command::new("ip")
            .arg("-batch")
            .arg(&path)
            .output()
            .expect("ip (apt-get install iproute2)");
        assert!(
            out.status.success(),
            "ip -batch: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(test());
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e));
}

/// A router listening on `http` with the admin token and `extra`, app
/// `shop-demo` on one member with `settings`.
async fn router(http: &str, extra: &str, settings: &str) -> (TestRouter, Backend) {
    let token = e2e::tempdir("client-key-token").join("admin.token");
    std::fs::create_dir_all(token.parent().expect("dir")).expect("dir");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    let admin = format!("admin:\n  token_file: {}\n{extra}", token.display());
    let r = TestRouter::start_http_on(http, &admin).await;
    let b = Backend::start().await;
    r.drop_event("01.yaml", &events::add_lb("shop", "demo", b.addr));
    r.wait_member(b.addr).await;
    r.wait_health(b.addr, "up").await;
    let put = r
        .admin_call("PUT", "/apps/shop-demo/settings", settings, Some(TOKEN))
        .await;
    assert_eq!(put.0, 200, "{}", put.1);
    (r, b)
}

/// The router's HTTP port on ::1.
fn v6(r: &TestRouter) -> SocketAddr {
    SocketAddr::new(IpAddr::from([0, 0, 0, 0, 0, 0, 0, 1u16]), r.http.port())
}

/// One GET from `source` to `to` (with `extra` header lines); the status, 0 if
/// the connection closed without an answer.
async fn get_from(source: &str, to: SocketAddr, extra: &str) -> u16 {
    let req = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n{extra}Connection: close\r\n\r\n");
    let out = e2e::raw::exchange_from(source, to, req.as_bytes(), Duration::from_secs(10)).await;
    status(&out)
}

fn status(out: &[u8]) -> u16 {
    std::str::from_utf8(out)
        .ok()
        .and_then(|s| s.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// 200s and 429s of `n` GETs, each from the next address of `ROTATING`; the
/// seconds they took.
async fn rotate(to: SocketAddr, n: u32) -> (u32, u32, f64) {
    let start = Instant::now();
    let (mut ok, mut limited) = (0, 0);
    for i in 1..=n {
        match get_from(&format!("{ROTATING}{i:x}"), to, "").await {
            200 => ok += 1,
            429 => limited += 1,
            s => panic!("request {i}: status {s}"),
        }
    }
    (ok, limited, start.elapsed().as_secs_f64())
}

#[test]
fn addresses_of_one_64_share_one_rate_limit_bucket() {
    in_own_namespace(async || {
        let limit = r#"{"rate_limit": {"requests_per_second": 10, "burst": 10}}"#;
        let (r, _b) = router("\"[::]:0\"", "", limit).await;
        let (ok, limited, secs) = rotate(v6(&r), 100).await;
        assert_eq!(ok + limited, 100);
        assert!(ok >= 10, "the burst passes: {ok}");
        assert!(
            f64::from(ok) <= 10.0 + 10.0 * secs + 1.0,
            "{ok} of 100 requests from one /64 served in {secs:.2} s at 10/s after a burst of 10"
        );
        assert_eq!(
            r.metric("router_app_requests_refused_total{app=\"shop-demo\",reason=\"rate_limit\"}")
                .await,
            Some(f64::from(limited))
        );
        // Another /64 is another client, with a bucket of its own.
        assert_eq!(get_from(OTHER, v6(&r), "").await, 200);
    });
}

#[test]
fn a_128_prefix_counts_each_address_apart() {
    in_own_namespace(async || {
        let limit = r#"{"rate_limit": {"requests_per_second": 1, "burst": 1}}"#;
        let extra = "limits:\n  client_ipv6_prefix: 128\n";
        let (r, _b) = router("\"[::]:0\"", extra, limit).await;
        let (ok, limited, _) = rotate(v6(&r), 20).await;
        assert_eq!((ok, limited), (20, 0), "each address its own bucket");
        assert_eq!(get_from(&format!("{ROTATING}1"), v6(&r), "").await, 429);
    });
}

#[test]
fn addresses_of_one_64_share_one_connection_cap() {
    in_own_namespace(async || {
        let extra = "limits:\n  max_connections_per_source: 3\n";
        let (r, _b) = router("\"[::]:0\"", extra, "{}").await;
        let to = v6(&r);
        // Three idle connections from three addresses of the /64.
        let mut held = Vec::new();
        for n in 1..=3 {
            let source: IpAddr = format!("{ROTATING}{n}").parse().expect("ip");
            let socket = tokio::net::TcpSocket::new_v6().expect("socket");
            socket.bind(SocketAddr::new(source, 0)).expect("bind");
            held.push(socket.connect(to).await.expect("connect"));
        }
        e2e::eventually("3 open", Duration::from_secs(10), async || {
            r.metric("router_open_connections{listener=\"http\"}").await == Some(3.0)
        })
        .await;
        // A fourth address of the same /64 is closed at once, unanswered.
        assert_eq!(get_from(&format!("{ROTATING}4"), to, "").await, 0);
        assert_eq!(
            r.metric("router_connections_refused_total{listener=\"http\",reason=\"source_limit\"}")
                .await,
            Some(1.0)
        );
        assert_eq!(get_from(OTHER, to, "").await, 200, "another /64 is served");
        drop(held);
    });
}

/// Behind a proxy `forwarded.trusted` names, the client is the one its
/// `X-Forwarded-For` names, keyed the same way (no namespace needed).
#[tokio::test]
async fn forwarded_clients_of_one_64_share_one_bucket() {
    let limit = r#"{"rate_limit": {"requests_per_second": 5, "burst": 5}}"#;
    let extra = "forwarded:\n  trusted: [127.0.0.1/32]\n";
    let (r, _b) = router("127.0.0.1:0", extra, limit).await;
    let start = Instant::now();
    let (mut ok, mut limited) = (0u32, 0u32);
    for i in 1..=40 {
        let xff = format!("X-Forwarded-For: {ROTATING}{i:x}\r\n");
        match get_from("127.0.0.1", r.http, &xff).await {
            200 => ok += 1,
            429 => limited += 1,
            s => panic!("request {i}: status {s}"),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert!(ok >= 5, "the burst passes: {ok}");
    assert!(
        f64::from(ok) <= 5.0 + 5.0 * secs + 1.0,
        "{ok} of 40 served in {secs:.2} s at 5/s after a burst of 5"
    );
    assert_eq!(ok + limited, 40);
    let other = format!("X-Forwarded-For: {OTHER}\r\n");
    assert_eq!(get_from("127.0.0.1", r.http, &other).await, 200);
}
