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
