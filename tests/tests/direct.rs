//! Direct routing (`endpoint_types: [web_framework]`): requests go
//! straight to the web_framework gears, and each endpoint's Mappings apply.

use e2e::router::TestRouter;
use e2e::{Backend, Echo, events};

const HOST: &str = "ha-myapp-demo.example.com";

/// Fixture 02 or 04 at `b`, with its `/health` mapping sent to `backend`.
fn web(fixture: &str, from: &str, b: &Backend, backend: &str) -> String {
    events::fixture_at(fixture, from, b.addr).replace(
        "- frontend: /health\n  backend: ''",
        &format!("- frontend: /health\n  backend: '{backend}'"),
    )
}

#[tokio::test]
async fn web_framework_members_get_their_mappings_applied() {
    let (b1, b2) = (Backend::start().await, Backend::start().await);
    // Round robin: the eight requests below reach both gears by design (with
    // the default p2c and no load, all eight went to one gear once in 128 runs).
    let r =
        TestRouter::start("endpoint_types: [web_framework]\nupstream:\n  balance: round_robin\n")
            .await;
    r.drop_event(
        "01.yaml",
        &web(
            "02-add_public_endpoint-web_framework.yaml",
            "10.0.0.11:38031",
            &b1,
            "/configuration/health",
        ),
    );
    r.drop_event(
        "02.yaml",
        &web(
            "04-add_public_endpoint-web_framework-gear2.yaml",
            "10.0.0.12:38036",
            &b2,
            "/configuration/health",
        ),
    );
    r.wait_spool_empty().await;
    r.wait_route(HOST).await;
    // New members take requests once their first check passed (`health.gate_new`):
    // both, before the eight that must reach both.
    r.wait_health(b1.addr, "up").await;
    r.wait_health(b2.addr, "up").await;
    let mut targets = Vec::new();
    for (path, want) in [
        ("/health", "/configuration/health"),
        ("/health/db?verbose=1", "/configuration/health/db?verbose=1"),
        ("/healthy", "/healthy"),
        ("/index.php?a=1", "/index.php?a=1"),
    ] {
        for _ in 0..2 {
            let (status, body) = r.get(HOST, path).await;
            assert_eq!(status, 200, "{path}");
            let echo = Echo::parse(&body);
            assert_eq!(echo.target, want, "{path}");
            assert_eq!(echo.header("host"), Some(HOST), "Host is never rewritten");
            targets.push(echo.target);
        }
    }
    assert_eq!(targets.len(), 8);
    assert!(b1.proxied() > 0 && b2.proxied() > 0, "both gears served");

    // The fixtures as they are: `/health` to `''` (the gear's root).
    let b3 = Backend::start().await;
    let r2 = TestRouter::start("endpoint_types: [web_framework]\n").await;
    r2.drop_event(
        "01.yaml",
        &events::fixture_at(
            "02-add_public_endpoint-web_framework.yaml",
            "10.0.0.11:38031",
            b3.addr,
        ),
    );
    r2.wait_route(HOST).await;
    let (_, body) = r2.get(HOST, "/health").await;
    assert_eq!(Echo::parse(&body).target, "/");
}

/// A load balancer's mappings are the node's own file mappings: never applied, so
/// the default router keeps routing "without rewriting Host or path".
#[tokio::test]
async fn load_balancer_mappings_are_not_applied() {
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    let lb = events::add_lb("myapp", "demo", b.addr).replace(
        ":mappings:\n- frontend: ''\n  backend: ''\n",
        ":mappings:\n- frontend: ''\n  backend: ''\n- frontend: /health\n  backend: /configuration/health\n",
    );
    assert!(lb.contains("/configuration/health"));
    r.drop_event("01.yaml", &lb);
    r.wait_route(HOST).await;
    let (status, body) = r.get(HOST, "/health").await;
    assert_eq!(status, 200);
    assert_eq!(Echo::parse(&body).target, "/health");
}
