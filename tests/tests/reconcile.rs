//! Reconcile against a stand-in of the broker's REST API (built from the documented
//! answers in `fixtures/broker/`): a missing member, a stale member, a missing alias
//! and an app the broker no longer has are found, reported and counted; fixed on
//! demand through `router reconcile --apply` (the real binary, over the admin API),
//! persisted across a restart; fixed by the timer when `reconcile.apply` is on; a
//! malformed answer fixes nothing for that app; an app the router never heard of is
//! found in the broker's listing and routed.

use std::time::Duration;

use e2e::broker_api::BrokerApi;
use e2e::{Backend, TestRouter, events};

const HA: &str = "ha-myapp-demo.example.com";

fn members(routes: &serde_json::Value, app: &str) -> Vec<String> {
    let mut m: Vec<String> = routes["apps"]
        .as_array()
        .expect("apps")
        .iter()
        .filter(|a| a["name"] == app)
        .flat_map(|a| a["members"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["address"].as_str().map(str::to_string))
        .collect();
    m.sort();
    m
}

#[tokio::test]
async fn reconcile_reports_fixes_on_demand_persists_and_runs_on_its_timer() {
    let (b1, b2) = (Backend::start().await, Backend::start().await);
    let stale: std::net::SocketAddr = "127.0.0.1:9".parse().expect("addr");
    let broker = BrokerApi::start().await;
    let root = e2e::tempdir("reconcile");
    std::fs::create_dir_all(&root).expect("root");
    std::fs::write(root.join("broker.token"), "broker-secret\n").expect("token");
    std::fs::write(root.join("admin.token"), "admin-secret\n").expect("token");
    let extra = |interval: &str, apply: bool| {
        format!(
            "admin:\n  token_file: {r}/admin.token\n\
             reconcile:\n  url: {url}\n  interval: {interval}\n  apply: {apply}\n  timeout: 2s\n  token_file: {r}/broker.token\n",
            r = root.display(),
            url = broker.url()
        )
    };
    // Our state: myapp with b1 and a member the broker no longer has; an app the
    // broker deleted; an app whose answer will be malformed.
    let r = TestRouter::start_in(root.clone(), &extra("0s", false)).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b1.addr));
    r.drop_event(
        "02.yaml",
        &events::add_lb("myapp", "demo", stale).replace("000001", "000002"),
    );
    r.drop_event(
        "03.yaml",
        &events::add_lb("gone", "demo", b1.addr).replace("000001", "000003"),
    );
    r.drop_event(
        "04.yaml",
        &events::add_lb("weird", "demo", b2.addr).replace("000001", "000005"),
    );
    r.wait_route("ha-weird-demo.example.com").await;
    r.wait_route("ha-gone-demo.example.com").await;
    // The broker: myapp has b1 and b2 and an alias; gone is gone; weird is malformed.
    broker.set_app(
        "myapp",
        "demo",
        &["www.example.org"],
        &[
            ("5464c9f6e0b8cd5a6e000001", b1.addr),
            ("5464c9f6e0b8cd5a6e000004", b2.addr),
        ],
    );
    broker.set_app(
        "weird",
        "demo",
        &[],
        &[("5464c9f6e0b8cd5a6e000005", b2.addr)],
    );
    broker.set(
        "/broker/rest/domains/demo/applications/weird/gear_groups?include=endpoints",
        200,
        e2e::broker_api::fixture("gear_groups.json", &[])
            .replace("[{{GEARS}}]", r#"[{"id":"x","endpoints":[{"cartridge_name":"haproxy-1.4","external_address":"10.0.0.1","external_port":"99999"}]}]"#),
    );

    // A report (reconcile.apply is off): found, counted, nothing changed.
    let (s, _) = r.admin_call("POST", "/reconcile", "", None).await;
    assert_eq!(s, 401, "mutating call without the admin token");
    let (s, body) = r
        .admin_call("POST", "/reconcile", "", Some("admin-secret"))
        .await;
    assert_eq!(s, 200, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).expect("json");
    let kinds = |app: &str| -> Vec<String> {
        let mut k: Vec<String> = report["differences"][app]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|d| {
                        format!(
                            "{} {}",
                            d["kind"].as_str().unwrap_or(""),
                            d["what"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        k.sort();
        k
    };
    assert_eq!(
        kinds("myapp-demo"),
        [
            "missing_alias www.example.org".to_string(),
            format!("missing_member {}", b2.addr),
            format!("stale_member {stale}"),
        ]
    );
    assert_eq!(kinds("gone-demo"), ["stale_app ".to_string()]);
    assert!(
        report["errors"]["weird-demo"]
            .as_str()
            .is_some_and(|e| e.contains("external_port")),
        "{report}"
    );
    assert_eq!(report["applied"], 0);
    assert_eq!(
        r.metric("router_reconcile_differences_total{kind=\"missing_member\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        r.metric("router_reconcile_runs_total{result=\"error\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(r.get("www.example.org", "/").await.0, 404, "not applied");
    assert!(
        broker
            .authorizations
            .lock()
            .expect("lock")
            .iter()
            .all(|a| a == "Bearer broker-secret"),
        "the broker token is sent"
    );

    // `router reconcile --apply` (the real binary, through the admin API).
    let cli_cfg = root.join("cli.yaml");
    std::fs::write(
        &cli_cfg,
        format!(
            "cloud_domain: example.com\nstate_dir: {r}/unused\nlisten:\n  http: 127.0.0.1:0\n  admin: {admin}\nspi:\n  source: none\nadmin:\n  token_file: {r}/admin.token\n",
            r = root.display(),
            admin = r.admin
        ),
    )
    .expect("config");
    let out = tokio::process::Command::new(e2e::bin("router"))
        .arg("--config")
        .arg(&cli_cfg)
        .args(["reconcile", "--apply"])
        .output()
        .await
        .expect("router reconcile");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Exit 2: it fixed what it could, but one app's answer was malformed.
    assert_eq!(
        out.status.code(),
        Some(2),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let applied: serde_json::Value = serde_json::from_str(&stdout).expect("json report");
    assert_eq!(applied["applied"], 4, "{applied}");
    let fixed = async |r: &TestRouter| {
        assert_eq!(r.get("www.example.org", "/").await.0, 200);
        assert_eq!(r.get("ha-gone-demo.example.com", "/").await.0, 404);
        let routes: serde_json::Value =
            serde_json::from_str(&r.admin_get("/routes").await.1).expect("json");
        let mut want = vec![b1.addr.to_string(), b2.addr.to_string()];
        want.sort();
        assert_eq!(members(&routes, "myapp"), want);
        assert_eq!(
            members(&routes, "weird"),
            [b2.addr.to_string()],
            "untouched"
        );
    };
    fixed(&r).await;
    // Events still apply after the fix (the source was started again).
    r.drop_event(
        "05.yaml",
        &events::add_alias("myapp", "demo", "www.example.net"),
    );
    r.wait_route("www.example.net").await;

    // Persisted; and on the timer with reconcile.apply, without being asked.
    r.stop().await;
    let r = TestRouter::start_in(root.clone(), &extra("300ms", true)).await;
    r.wait_route(HA).await;
    fixed(&r).await;
    broker.set_app(
        "myapp",
        "demo",
        &["www.example.org", "www.example.net", "shop.example.org"],
        &[
            ("5464c9f6e0b8cd5a6e000001", b1.addr),
            ("5464c9f6e0b8cd5a6e000004", b2.addr),
        ],
    );
    e2e::eventually("fixed by the timer", Duration::from_secs(10), async || {
        r.get("shop.example.org", "/").await.0 == 200
    })
    .await;
    r.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}

/// An app created while the router was away, every event of it lost: the broker's
/// listing names it, one reconcile routes it (its gears and its alias), and a run
/// with `discover_max: 0` does not walk the listing.
#[tokio::test]
async fn an_app_whose_every_event_was_lost_is_routed_after_one_reconcile() {
    let b1 = Backend::start().await;
    let broker = BrokerApi::start().await;
    let root = e2e::tempdir("reconcile-discover");
    std::fs::create_dir_all(&root).expect("root");
    std::fs::write(root.join("admin.token"), "admin-secret\n").expect("token");
    let extra = |discover_max: usize| {
        format!(
            "admin:\n  token_file: {r}/admin.token\n\
             reconcile:\n  url: {url}\n  interval: 0s\n  timeout: 2s\n  discover_max: {discover_max}\n",
            r = root.display(),
            url = broker.url()
        )
    };
    // The router knows myapp; the broker has myapp and `lost`, which it never heard of.
    let r = TestRouter::start_in(root.clone(), &extra(1000)).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b1.addr));
    r.wait_route(HA).await;
    broker.set_app(
        "myapp",
        "demo",
        &[],
        &[("5464c9f6e0b8cd5a6e000001", b1.addr)],
    );
    broker.set_app(
        "lost",
        "other",
        &["lost.example.org"],
        &[("5464c9f6e0b8cd5a6e000009", b1.addr)],
    );
    let run = async |r: &TestRouter, apply: bool| -> serde_json::Value {
        let (s, body) = r
            .admin_call(
                "POST",
                &format!("/reconcile?apply={apply}"),
                "",
                Some("admin-secret"),
            )
            .await;
        assert_eq!(s, 200, "{body}");
        serde_json::from_str(&body).expect("json report")
    };
    // A report first: found, counted, not routed.
    let report = run(&r, false).await;
    assert_eq!(report["apps_listed"], 2, "{report}");
    assert_eq!(
        report["differences"]["lost-other"][0]["kind"], "missing_app",
        "{report}"
    );
    assert!(
        report["differences"].get("myapp-demo").is_none(),
        "{report}"
    );
    assert_eq!(
        r.metric("router_reconcile_differences_total{kind=\"missing_app\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(r.get("ha-lost-other.example.com", "/").await.0, 404);
    // One run with apply: routed under its own name and its alias.
    let report = run(&r, true).await;
    assert_eq!(report["applied"], 2, "an endpoint and an alias: {report}");
    assert_eq!(r.get("ha-lost-other.example.com", "/").await.0, 200);
    assert_eq!(r.get("lost.example.org", "/").await.0, 200);
    let report = run(&r, false).await;
    assert_eq!(
        report["differences"],
        serde_json::json!({}),
        "nothing left: {report}"
    );
    r.stop().await;

    // discover_max 0: the listing is not walked (a new app stays unknown).
    broker.set_app(
        "later",
        "other",
        &[],
        &[("5464c9f6e0b8cd5a6e00000a", b1.addr)],
    );
    let r = TestRouter::start_in(root.clone(), &extra(0)).await;
    r.wait_route("lost.example.org").await;
    let report = run(&r, true).await;
    assert_eq!(report["apps_listed"], 0, "{report}");
    assert!(
        report["differences"].get("later-other").is_none(),
        "{report}"
    );
    assert_eq!(r.get("ha-later-other.example.com", "/").await.0, 404);
    r.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}
