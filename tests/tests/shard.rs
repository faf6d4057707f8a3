//! Sharding (`spi.shard`): two routers with complementary rules fed
//! the same event stream each serve exactly their apps; changing a rule
//! re-evaluates the saved state.

use e2e::router::TestRouter;
use e2e::{Backend, events};

fn host(app: &str, ns: &str) -> String {
    format!("ha-{app}-{ns}.example.com")
}

fn hash_rule(index: u32) -> String {
    format!(
        "spi:\n  source: spool\n  spool:\n    path: SPOOL\n    interval: 20ms\n  shard:\n    hash: {{count: 2, index: {index}}}\n"
    )
}

/// A router on `root` with `shard` as its `spi` section (SPOOL → its spool).
async fn router(root: std::path::PathBuf, spi: &str) -> TestRouter {
    let spi = spi.replace("SPOOL", &root.join("spool").display().to_string());
    TestRouter::start_with_spi(root, &spi, "").await
}

#[tokio::test]
async fn complementary_shards_serve_exactly_their_apps() {
    let b = Backend::start().await;
    let apps: Vec<(String, String)> = (0..12)
        .map(|i| {
            (
                format!("app{i}"),
                if i % 3 == 0 {
                    "billing".into()
                } else {
                    format!("team{i}")
                },
            )
        })
        .collect();
    let (root_a, root_b) = (e2e::tempdir("shard-a"), e2e::tempdir("shard-b"));
    let a = router(root_a.clone(), &hash_rule(0)).await;
    let bb = router(root_b, &hash_rule(1)).await;
    // The same stream to both, as two queues fed by one virtual topic would.
    for (i, (app, ns)) in apps.iter().enumerate() {
        for r in [&a, &bb] {
            r.drop_event(&format!("{i:02}.yaml"), &events::add_lb(app, ns, b.addr));
        }
    }
    a.wait_spool_empty().await;
    bb.wait_spool_empty().await;
    let mut owned_by_a = Vec::new();
    for (app, ns) in &apps {
        let (sa, sb) = (
            a.get(&host(app, ns), "/").await.0,
            bb.get(&host(app, ns), "/").await.0,
        );
        assert!(
            (sa, sb) == (200, 404) || (sa, sb) == (404, 200),
            "{app}-{ns}: exactly one router serves it, got {sa} and {sb}"
        );
        if sa == 200 {
            owned_by_a.push((app.clone(), ns.clone()));
        }
    }
    assert!(
        !owned_by_a.is_empty() && owned_by_a.len() < apps.len(),
        "both shards hold apps: {owned_by_a:?}"
    );
    let other = a
        .metric("spi_events_total{action=\"add_public_endpoint\",outcome=\"other_shard\"}")
        .await;
    assert_eq!(other, Some((apps.len() - owned_by_a.len()) as f64));

    // The rule changes (a namespace list on top of the hash): on restart, saved
    // apps outside it are dropped, and stay dropped when the rule is lifted again.
    a.stop().await;
    let narrowed = hash_rule(0).replace("  shard:\n", "  shard:\n    namespaces: [billing]\n");
    let a = router(root_a.clone(), &narrowed).await;
    for (app, ns) in &owned_by_a {
        let want = if ns == "billing" { 200 } else { 404 };
        assert_eq!(a.get(&host(app, ns), "/").await.0, want, "{app}-{ns}");
    }
    a.stop().await;
    let a = router(root_a, &hash_rule(0)).await;
    for (app, ns) in &owned_by_a {
        let want = if ns == "billing" { 200 } else { 404 };
        assert_eq!(
            a.get(&host(app, ns), "/").await.0,
            want,
            "{app}-{ns}: the drop was saved"
        );
    }
}

#[tokio::test]
async fn a_hash_index_outside_the_count_is_refused_at_start() {
    let yaml = "cloud_domain: example.com\nstate_dir: /tmp/x\nlisten:\n  http: 127.0.0.1:0\n\
                spi:\n  source: none\n  shard:\n    hash: {count: 2, index: 2}\n";
    let err = router::config::Config::parse(yaml, "router.yaml").expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("router.yaml:") && text.contains("spi.shard.hash"),
        "{text}"
    );
}
