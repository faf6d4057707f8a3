//! The admin listener: health, readiness, metrics and the routes API.

use e2e::{Backend, TestRouter, events};

#[tokio::test]
async fn health_readiness_and_unknown_paths() {
    let r = TestRouter::start("").await;
    assert_eq!(r.admin_get("/healthz").await, (200, "ok\n".into()));
    assert_eq!(r.admin_get("/readyz").await.0, 200);
    assert_eq!(r.admin_get("/nope").await.0, 404);
}

#[tokio::test]
async fn routes_api_lists_hosts_members_and_endpoints() {
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("MyApp", "demo", b.addr));
    r.drop_event(
        "02.yaml",
        &events::add_endpoint(
            "MyApp",
            "demo",
            "127.0.0.1:9".parse().expect("a"),
            "web_framework",
            "php-5.4",
        ),
    );
    r.drop_event(
        "03.yaml",
        &events::add_alias("MyApp", "demo", "www.example.net"),
    );
    r.wait_route("www.example.net").await;
    let (status, body) = r.admin_get("/routes").await;
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
    let app = &doc["apps"][0];
    assert_eq!(app["name"], "MyApp");
    assert_eq!(app["namespace"], "demo");
    let hosts: Vec<&str> = app["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .filter_map(|h| h.as_str())
        .collect();
    assert_eq!(
        hosts,
        [
            "ha-myapp-demo.example.com",
            "myapp-demo.example.com",
            "www.example.net"
        ]
    );
    assert_eq!(app["members"][0]["address"], b.addr.to_string());
    let eps = app["endpoints"].as_array().expect("endpoints");
    assert_eq!(eps.len(), 2);
    assert!(
        eps.iter()
            .any(|e| e["routed"] == false && e["types"][0] == "web_framework")
    );
}

#[tokio::test]
async fn metrics_count_requests_connections_and_routes() {
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route("ha-myapp-demo.example.com").await;
    let base2 = r
        .metric("router_http_requests_total{class=\"2xx\"}")
        .await
        .unwrap_or(0.0);
    let base4 = r
        .metric("router_http_requests_total{class=\"4xx\"}")
        .await
        .unwrap_or(0.0);
    for _ in 0..3 {
        assert_eq!(r.get("ha-myapp-demo.example.com", "/").await.0, 200);
    }
    assert_eq!(r.get("unknown.example.com", "/").await.0, 404);
    assert_eq!(
        r.metric("router_http_requests_total{class=\"2xx\"}").await,
        Some(base2 + 3.0)
    );
    assert_eq!(
        r.metric("router_http_requests_total{class=\"4xx\"}").await,
        Some(base4 + 1.0)
    );
    assert_eq!(r.metric("router_routes").await, Some(2.0));
    assert_eq!(r.metric("router_apps").await, Some(1.0));
    assert!(
        r.metric("router_connections_total{listener=\"http\"}")
            .await
            >= Some(4.0)
    );
    assert!(r.metric("router_http_request_duration_seconds_count").await >= Some(4.0));
    assert_eq!(
        r.metric("spi_events_total{action=\"add_public_endpoint\",outcome=\"applied\"}")
            .await,
        Some(1.0)
    );
    let (_, text) = r.admin_get("/metrics").await;
    assert!(
        text.contains("router_open_connections{listener=\"http\"}"),
        "{text}"
    );
    assert!(!text.contains("ha-myapp-demo"), "no per-host labels");
}

/// The admin listener has the client listeners' head timeout and its own connection
/// cap: an idle connection is closed at the deadline, and past the cap a new client
/// waits in the backlog until a slot frees (it is then served).
#[tokio::test]
async fn admin_connections_are_capped_and_idle_ones_time_out() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let r =
        TestRouter::start("limits:\n  header_read_timeout: 500ms\n  max_admin_connections: 1\n")
            .await;
    let mut idle = tokio::net::TcpStream::connect(r.admin)
        .await
        .expect("connect");
    // A second client, past the cap: not served while `idle` holds the only slot.
    let second = tokio::spawn({
        let addr = r.admin;
        async move {
            e2e::raw::exchange(
                addr,
                b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                Duration::from_secs(10),
            )
            .await
        }
    });
    let opened = Instant::now();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .expect("closed by the head timeout, not left open");
    assert!(
        matches!(n, Ok(0) | Err(_)) || buf.starts_with(b"HTTP/1.1 408"),
        "an idle admin connection ends: {n:?}"
    );
    assert!(
        opened.elapsed() >= Duration::from_millis(400),
        "not before the deadline"
    );
    let _ = idle.write_all(b"x").await;
    drop(idle);
    let resp = second.await.expect("join");
    assert_eq!(
        e2e::raw::status(&resp),
        Some(200),
        "served once the slot freed"
    );
}

/// A client that sends an admin request body slowly (or never) gets 408 at the head
/// deadline instead of keeping its admin connection.
#[tokio::test]
async fn a_silent_admin_body_gets_408_at_the_deadline() {
    let r = TestRouter::start("limits:\n  header_read_timeout: 1s\n").await;
    let req = format!(
        "POST /aliases/www.example.net/split HTTP/1.1\r\nHost: {}\r\nContent-Length: 40\r\n\r\n{{\"a-b\"",
        r.admin
    );
    let resp =
        e2e::raw::exchange(r.admin, req.as_bytes(), std::time::Duration::from_secs(10)).await;
    assert_eq!(
        e2e::raw::status(&resp),
        Some(408),
        "{}",
        String::from_utf8_lossy(&resp)
    );
}

/// One raw admin call with exactly these header lines; the status.
async fn admin_raw(r: &TestRouter, method: &str, path: &str, headers: &str) -> Option<u16> {
    let req = format!(
        "{method} {path} HTTP/1.1\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let out = e2e::raw::exchange(r.admin, req.as_bytes(), std::time::Duration::from_secs(5)).await;
    e2e::raw::status(&out)
}

/// Without a token (the default), a browser page's cross-site POST and a DNS
/// rebinding name are refused; scripts (no Origin) still work; refused attempts do
/// not push authorised actions out of the audit trail.
#[tokio::test]
async fn cross_site_calls_and_foreign_host_names_are_refused_without_a_token() {
    let (r, b) = TestRouter::with_backend("").await;
    let admin = r.admin;
    let member = b.addr;
    let rotate_out = format!("/backends/{member}/rotate-out?timeout=1s");
    let host = format!("Host: {admin}\r\n");
    // A cross-site form POST (what a page at evil.example makes a browser send).
    let evil = format!("{host}Origin: http://evil.example\r\n");
    assert_eq!(admin_raw(&r, "POST", &rotate_out, &evil).await, Some(403));
    let site = format!("{host}Sec-Fetch-Site: cross-site\r\n");
    assert_eq!(admin_raw(&r, "POST", &rotate_out, &site).await, Some(403));
    assert_eq!(
        r.backend_state(member).await.expect("member")["rotate"],
        "in"
    );
    // DNS rebinding: evil.example resolving to 127.0.0.1 carries its own name.
    let port = admin.port();
    let rebound = format!("Host: evil.example:{port}\r\n");
    assert_eq!(admin_raw(&r, "GET", "/routes", &rebound).await, Some(421));
    assert_eq!(
        admin_raw(&r, "POST", &rotate_out, &rebound).await,
        Some(421)
    );
    // Monitoring by any name still works (Prometheus scrapes by host name).
    assert_eq!(admin_raw(&r, "GET", "/metrics", &rebound).await, Some(200));
    // The status page's own POST (same origin) and a script's (no Origin) pass.
    let same = format!("{host}Origin: http://{admin}\r\n");
    let rotate_in = format!("/backends/{member}/rotate-in");
    assert_eq!(admin_raw(&r, "POST", &rotate_in, &same).await, Some(200));
    let local = format!("Host: localhost:{port}\r\n");
    assert_eq!(admin_raw(&r, "POST", &rotate_in, &local).await, Some(200));
    // 210 refused attempts: the two actions above stay in the trail.
    for _ in 0..210 {
        assert_eq!(admin_raw(&r, "POST", &rotate_out, &evil).await, Some(403));
    }
    let (_, audit) = r.admin_get("/audit").await;
    let audit: serde_json::Value = serde_json::from_str(&audit).expect("audit json");
    let actions = audit["actions"].as_array().expect("actions");
    assert_eq!(
        actions
            .iter()
            .filter(|a| a["action"] == "rotate-in")
            .count(),
        2,
        "{actions:?}"
    );
    assert!(actions.iter().all(|a| a["action"] != "refused"));
    let refused = audit["refused"].as_array().expect("refused");
    assert_eq!(refused.len(), 200, "a bounded ring of its own");
    assert_eq!(
        r.metric("router_admin_refused_total{reason=\"origin\"}")
            .await,
        Some(212.0)
    );
    assert_eq!(
        r.metric("router_admin_refused_total{reason=\"host\"}")
            .await,
        Some(2.0)
    );
    assert_eq!(
        r.backend_state(member).await.expect("member")["rotate"],
        "in"
    );
}
