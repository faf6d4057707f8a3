//! Traffic per app as operators see it: a real Prometheus scraping the read-only
//! metrics listener, the per-app series and their bound, and the admin API's
//! per-app figures.

use std::time::Duration;

use e2e::prometheus::Prometheus;
use e2e::{Backend, TestRouter, events, eventually};

const APPS: [&str; 3] = ["one", "two", "three"];

fn host(app: &str) -> String {
    format!("ha-{app}-demo.example.com")
}

/// A router whose metrics listener faces the network (all addresses) while
/// its admin listener stays on loopback, with three apps on one backend.
async fn three_apps(extra: &str) -> (TestRouter, Backend) {
    let b = Backend::start().await;
    let r = TestRouter::start_listening("  metrics: 0.0.0.0:0\n", extra).await;
    for (i, app) in APPS.iter().enumerate() {
        r.drop_event(
            &format!("{i:02}.yaml"),
            &events::add_lb(app, "demo", b.addr),
        );
    }
    for app in APPS {
        r.wait_route(&host(app)).await;
    }
    (r, b)
}

#[tokio::test]
async fn prometheus_sees_the_failing_app_and_the_sums_add_up() {
    let (r, _b) = three_apps("metrics:\n  max_apps: 10\n").await;
    let metrics = r.metrics.expect("listen.metrics is set");
    assert!(metrics.ip().is_unspecified(), "bound on every address");
    assert!(
        r.admin.ip().is_loopback(),
        "the admin API stays on loopback"
    );
    let scrape = format!("127.0.0.1:{}", metrics.port())
        .parse()
        .expect("addr");
    // A request each, then a scrape: each app gets series of its own.
    for app in APPS {
        assert_eq!(r.get(&host(app), "/").await.0, 200);
    }
    let prom = Prometheus::start(&[scrape]).await;
    eventually("three apps exported", Duration::from_secs(30), async || {
        prom.query("router_app_requests_total{class=\"2xx\",app=~\".*-demo\"}")
            .await
            .len()
            == 3
    })
    .await;
    for _ in 0..20 {
        assert_eq!(r.get(&host("one"), "/status/500").await.0, 500);
        for app in APPS {
            assert_eq!(r.get(&host(app), "/").await.0, 200);
        }
    }
    let five_xx = "sum by (app) (increase(router_app_requests_total{class=\"5xx\"}[1m]))";
    eventually("one's 5xx seen", Duration::from_secs(30), async || {
        prom.query(five_xx)
            .await
            .iter()
            .any(|(m, v)| m["app"] == "one-demo" && *v > 0.0)
    })
    .await;
    for (m, v) in prom.query(five_xx).await {
        if m["app"] != "one-demo" {
            assert_eq!(v, 0.0, "{m}: no 5xx");
        }
    }
    // Same scrape, same instant: every request is in exactly one app's series.
    let diff = prom
        .query("sum(router_app_requests_total) - sum(router_http_requests_total)")
        .await;
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert_eq!(diff[0].1, 0.0, "per-app sums equal the global counter");
    let count = prom
        .query("sum(router_app_request_duration_seconds_count) - sum(router_http_requests_total)")
        .await;
    assert_eq!(count[0].1, 0.0, "every request timed once");
    // The admin API's figures for the failing app.
    let (status, body) = r.admin_get("/apps/one-demo/stats").await;
    assert_eq!(status, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(stats["totals"]["classes"][4], 20, "{stats}");
    let ratio = stats["error_ratio"]
        .as_f64()
        .expect("requests in the window");
    assert!(ratio > 0.3 && ratio < 0.6, "20 of 41: {ratio}");
    assert!(stats["p99_seconds"].as_f64().is_some(), "{stats}");
    assert_eq!(r.admin_get("/apps/nope-demo/stats").await.0, 404);
    // An app deleted: its series go, what they counted moves to `_other`, and
    // the sums still add up.
    r.drop_event(
        "10.yaml",
        "---\n:action: :delete_application\n:app_name: two\n:namespace: demo\n",
    );
    eventually("two's series gone", Duration::from_secs(20), async || {
        let text = r.admin_get("/metrics").await.1;
        !text.contains("app=\"two-demo\"")
    })
    .await;
    let text = r.admin_get("/metrics").await.1;
    let sum = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        sum("router_app_requests_total{"),
        sum("router_http_requests_total{")
    );
    assert_eq!(r.admin_get("/apps/two-demo/stats").await.0, 404);
}

#[tokio::test]
async fn the_metrics_listener_reads_and_changes_nothing() {
    let (r, b) = three_apps("").await;
    let m = r.metrics.expect("listen.metrics");
    let base = format!("http://127.0.0.1:{}", m.port());
    let (status, text) = e2e::http_get(&format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    assert!(text.contains("router_http_requests_total"), "{text}");
    assert_eq!(e2e::http_get(&format!("{base}/healthz")).await.0, 200);
    assert_eq!(e2e::http_get(&format!("{base}/readyz")).await.0, 200);
    for path in [
        "/routes",
        "/backends",
        "/status",
        "/audit",
        "/apps/settings",
    ] {
        assert_eq!(
            e2e::http_get(&format!("{base}{path}")).await.0,
            404,
            "{path}"
        );
    }
    // A rotate-out through it: refused, and the member still takes requests.
    let rotate = format!(
        "POST /backends/{}/rotate-out HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        b.addr
    );
    let answer = e2e::raw::exchange(m, rotate.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(e2e::raw::status(&answer), Some(404));
    let post =
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let answer = e2e::raw::exchange(m, post.as_bytes(), Duration::from_secs(5)).await;
    assert_eq!(e2e::raw::status(&answer), Some(405));
    let state = r.backend_state(b.addr).await.expect("member");
    assert_eq!(state["rotate"], "in");
    assert_eq!(r.get(&host("one"), "/").await.0, 200);
}

#[tokio::test]
async fn three_thousand_apps_export_max_apps_and_other_exactly() {
    let b = Backend::start().await;
    let r = TestRouter::start("metrics:\n  max_apps: 50\n").await;
    const N: usize = 3000;
    for i in 0..N {
        r.drop_event(
            &format!("{i:05}.yaml"),
            &events::add_lb(&format!("a{i}"), "ns", b.addr),
        );
    }
    eventually("3000 apps", Duration::from_secs(120), async || {
        r.metric("router_apps").await == Some(N as f64)
    })
    .await;
    let before = requests(&r).await;
    for i in 0..N {
        assert_eq!(r.get(&format!("ha-a{i}-ns.example.com"), "/").await.0, 200);
    }
    let text = r.admin_get("/metrics").await.1;
    let apps: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("router_app_requests_total{"))
        .filter_map(|l| l.split("app=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(apps.len(), 51, "50 apps and _other: {}", apps.len());
    assert!(apps.contains("_other"));
    let per_app: f64 = text
        .lines()
        .filter(|l| l.starts_with("router_app_requests_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    let total: f64 = text
        .lines()
        .filter(|l| l.starts_with("router_http_requests_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(per_app, total, "_other carries the rest, exactly");
    assert!(total >= before + N as f64);
}

async fn requests(r: &TestRouter) -> f64 {
    let text = r.admin_get("/metrics").await.1;
    text.lines()
        .filter(|l| l.starts_with("router_http_requests_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Facing the network, one client holds at most a quarter of the listener's
/// connections (here 1 of 4): its second is closed at once and counted, while
/// another client is served.
#[tokio::test]
async fn one_client_holds_at_most_its_share_of_the_metrics_listener() {
    let r = TestRouter::start_listening(
        "  metrics: 0.0.0.0:0\n",
        "limits:\n  max_admin_connections: 4\n",
    )
    .await;
    let m = r.metrics.expect("listen.metrics");
    let at = std::net::SocketAddr::from(([127, 0, 0, 1], m.port()));
    // An idle connection holds the client's one share.
    let held = tokio::net::TcpStream::connect(at).await.expect("connect");
    let refused = "router_connections_refused_total{listener=\"metrics\",reason=\"source_limit\"}";
    let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    eventually(
        "the second connection refused",
        Duration::from_secs(10),
        async || {
            let answer = e2e::raw::exchange(at, get, Duration::from_secs(5)).await;
            e2e::raw::status(&answer).is_none() && r.metric(refused).await >= Some(1.0)
        },
    )
    .await;
    // Another client (another address) is served meanwhile.
    let other = e2e::raw::exchange_from("127.0.0.2", at, get, Duration::from_secs(5)).await;
    assert_eq!(e2e::raw::status(&other), Some(200));
    drop(held);
}
