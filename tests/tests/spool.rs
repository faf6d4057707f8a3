//! The spool source end to end: event files in, routes served, files settled.

use std::time::Duration;

use e2e::{Backend, TestRouter, events};

const HA: &str = "ha-myapp-demo.example.com";

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn both_ruby_dialects_route_to_the_member() {
    for fixture in [
        "03-add_public_endpoint-load_balancer.yaml",
        "30-ruby2x-add_public_endpoint-load_balancer.yaml",
    ] {
        let b = Backend::start().await;
        let r = TestRouter::start("").await;
        r.drop_event(
            fixture,
            &events::fixture_at(fixture, "10.0.0.11:38032", b.addr),
        );
        r.wait_route(HA).await;
        let (status, _) = r.get(HA, "/").await;
        assert_eq!(status, 200, "{fixture}");
        assert!(b.hits() >= 1, "{fixture}");
        assert_eq!(names(&r.spool.join("done")), [fixture]);
    }
}

#[tokio::test]
async fn malformed_files_are_parked_and_the_router_goes_on() {
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    let fx = e2e::fixtures();
    for bad in [
        "92-synthetic-malformed-truncated.yaml",
        "93-synthetic-missing-public_port.yaml",
        "91-synthetic-unknown-action.yaml",
    ] {
        let body = std::fs::read_to_string(fx.join(bad)).expect("fixture");
        r.drop_event(bad, &body);
    }
    r.drop_event("99-good.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_spool_empty().await;
    assert_eq!(
        names(&r.spool.join("failed")),
        [
            "92-synthetic-malformed-truncated.yaml",
            "92-synthetic-malformed-truncated.yaml.reason",
            "93-synthetic-missing-public_port.yaml",
            "93-synthetic-missing-public_port.yaml.reason",
        ]
    );
    // Unknown actions are ignored, not failures.
    assert_eq!(
        names(&r.spool.join("done")),
        ["91-synthetic-unknown-action.yaml", "99-good.yaml"]
    );
    assert_eq!(r.get(HA, "/").await.0, 200);
    assert_eq!(r.metric("spi_dead_letters_total").await, Some(2.0));
    assert_eq!(
        r.metric("spi_events_total{action=\"other\",outcome=\"ignored\"}")
            .await,
        Some(1.0)
    );
    // A later good file is still applied: the source never stalls.
    r.drop_event(
        "100-alias.yaml",
        &events::add_alias("myapp", "demo", "shop.example.org"),
    );
    r.wait_route("shop.example.org").await;
}

#[tokio::test]
async fn removal_and_gear_move_update_the_live_table() {
    let old = Backend::start().await;
    let new = Backend::start().await;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", old.addr));
    r.wait_route(HA).await;
    // Move: add the new node, then remove the old one.
    r.drop_event("02.yaml", &events::add_lb("myapp", "demo", new.addr));
    r.drop_event(
        "03.yaml",
        &events::remove_endpoint("myapp", "demo", old.addr),
    );
    r.wait_spool_empty().await;
    let before = old.hits();
    for _ in 0..10 {
        assert_eq!(r.get(HA, "/").await.0, 200);
    }
    assert_eq!(old.hits(), before, "removed member gets no new requests");
    assert!(new.hits() >= 10);
    // Delete the app: 404 again.
    r.drop_event(
        "04.yaml",
        "---\n:action: :delete_application\n:app_name: myapp\n:namespace: demo\n:scalable: true\n:ha: false\n",
    );
    e2e::eventually("app gone", Duration::from_secs(10), async || {
        r.get(HA, "/").await.0 == 404
    })
    .await;
}

#[tokio::test]
async fn restart_serves_saved_routes_at_once() {
    let b = Backend::start().await;
    let root = e2e::tempdir("restart");
    let r = TestRouter::start_in(root.clone(), "").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    r.stop().await;
    // No event is replayed: the route comes from state_dir alone, before any scan.
    let r = TestRouter::start_in(root, "").await;
    assert_eq!(r.get(HA, "/").await.0, 200);
}
