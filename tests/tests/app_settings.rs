//! Per-app settings through the admin API: cookie affinity with curl's
//! cookie jar, allow and deny lists by source address, maintenance, a per-app
//! response timeout, a rate limit under load, a bound on requests at once per
//! client, and the pair check. Real curl, real routers, real backends.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use e2e::{Backend, TestRouter, events};

const HOST: &str = "ha-shop-demo.example.com";
const TOKEN: &str = "settings-token";

/// A router with the admin token, app `shop-demo` on `members` backends.
async fn router_with(members: usize, extra: &str) -> (TestRouter, Vec<Backend>) {
    let root = e2e::tempdir("settings");
    std::fs::create_dir_all(&root).expect("root");
    let token = root.join("admin.token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    let r = TestRouter::start_in(
        root,
        &format!("admin:\n  token_file: {}\n{extra}", token.display()),
    )
    .await;
    let mut backends = Vec::new();
    for i in 0..members {
        let b = Backend::start().await;
        r.drop_event(
            &format!("{i:02}.yaml"),
            &events::add_lb("shop", "demo", b.addr),
        );
        backends.push(b);
    }
    for b in &backends {
        r.wait_member(b.addr).await;
        r.wait_health(b.addr, "up").await;
    }
    (r, backends)
}

async fn put(r: &TestRouter, settings: &str) -> (u16, String) {
    r.admin_call("PUT", "/apps/shop-demo/settings", settings, Some(TOKEN))
        .await
}

/// What curl got: status, response head, body.
struct Curl {
    status: u16,
    head: String,
    body: String,
}

impl Curl {
    fn header<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        self.headers(name).next()
    }

    fn headers<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.head.lines().filter_map(move |l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The `Set-Cookie` for cookie `name`, if the answer has one.
    fn sets(&self, name: &str) -> Option<String> {
        let prefix = format!("{name}=");
        self.headers("set-cookie")
            .find(|c| c.starts_with(&prefix))
            .map(str::to_owned)
    }

    /// The port of the backend that answered (the echo backend says it).
    fn port(&self) -> u64 {
        let v: serde_json::Value = serde_json::from_str(&self.body).expect("echo JSON");
        v["port"].as_u64().expect("port")
    }
}

/// `curl -i` for HOST through the router's HTTP listener, from `from` (an address
/// on lo), with `extra` arguments (a cookie jar, a path).
async fn curl(r: &TestRouter, from: &str, path: &str, extra: &[&str]) -> Curl {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-i", "--max-time", "10", "--interface", from, "-H"])
        .arg(format!("Host: {HOST}"))
        .args(extra)
        .arg(format!("http://{}{path}", r.http))
        .output()
        .await
        .expect("curl runs (apt-get install curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status from curl: {text:?} {:?}", out.stderr));
    Curl {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

#[tokio::test]
async fn settings_are_checked_guarded_audited_and_survive_a_restart() {
    let (r, _b) = router_with(1, "").await;
    let path = "/apps/shop-demo/settings";
    let body = r#"{"max_connections_per_client": 8, "deny": ["192.0.2.0/24"]}"#;
    assert_eq!(r.admin_call("PUT", path, body, None).await.0, 401);
    let (s, text) = put(&r, r#"{"deny": ["192.0.2.0/33"]}"#).await;
    assert_eq!(s, 400, "{text}");
    assert!(text.starts_with("deny: "), "the field is named: {text}");
    let (s, text) = put(&r, r#"{"colour": "blue"}"#).await;
    assert_eq!(s, 400, "{text}");
    let (s, _) = r
        .admin_call("PUT", "/apps/nope-demo/settings", body, Some(TOKEN))
        .await;
    assert_eq!(s, 404, "an app not in the table");
    let (s, text) = put(&r, body).await;
    assert_eq!(s, 200, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(doc["effective"]["max_connections_per_client"], 8);
    let (_, routes) = r.admin_get("/routes").await;
    assert!(
        routes.contains("192.0.2.0/24"),
        "/routes shows them: {routes}"
    );
    let (_, audit) = r.admin_get("/audit").await;
    assert!(audit.contains("set-settings"), "{audit}");

    // A restart over the same state directory keeps them.
    let root = r.root.clone();
    r.stop().await;
    let r = TestRouter::start_in(
        root.clone(),
        &format!(
            "admin:\n  token_file: {}\n",
            root.join("admin.token").display()
        ),
    )
    .await;
    let (_, all) = r.admin_get("/apps/settings").await;
    let all: serde_json::Value = serde_json::from_str(&all).expect("json");
    assert_eq!(all["apps"]["shop-demo"]["deny"][0], "192.0.2.0/24");
    assert_eq!(all["affinity_key"].as_str().map(str::len), Some(16));
    let (s, _) = r.admin_call("DELETE", path, "", Some(TOKEN)).await;
    assert_eq!(s, 200);
    let (_, all) = r.admin_get("/apps/settings").await;
    assert!(!all.contains("shop-demo"), "{all}");
}

#[tokio::test]
async fn a_curl_cookie_jar_stays_on_one_member_and_moves_when_it_rotates_out() {
    let (r, backends) = router_with(3, "").await;
    let (s, text) = put(
        &r,
        r#"{"affinity": {"cookie": "shop_affinity", "max_age": "1h"}}"#,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let jar = r.root.join("cookies.txt");
    let jar = jar.to_str().expect("path");
    let jar_args = ["-c", jar, "-b", jar];
    let first = curl(&r, "127.0.0.1", "/", &jar_args).await;
    assert_eq!(first.status, 200);
    let cookie = first
        .sets("shop_affinity")
        .unwrap_or_else(|| panic!("the first answer sets the affinity cookie: {}", first.head));
    assert!(
        cookie.contains("Max-Age=3600") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let port = first.port();
    for b in &backends {
        assert!(
            !cookie.contains(&b.addr.to_string()),
            "the cookie hides the address"
        );
    }
    // Ten more with the jar: the same member, no new cookie.
    for _ in 0..10 {
        let c = curl(&r, "127.0.0.1", "/", &jar_args).await;
        assert_eq!((c.status, c.port()), (200, port));
        assert_eq!(c.sets("shop_affinity"), None, "{}", c.head);
    }
    // Without the jar, the balancer spreads new clients over the members.
    let mut ports = std::collections::BTreeSet::new();
    for _ in 0..30 {
        ports.insert(curl(&r, "127.0.0.1", "/", &[]).await.port());
    }
    assert!(ports.len() > 1, "new clients spread: {ports:?}");

    // Its member rotated out: the next request is served elsewhere (200, a new
    // cookie), and the client then stays there.
    let sticky = backends
        .iter()
        .find(|b| u64::from(b.addr.port()) == port)
        .expect("the member");
    let (s, _) = r
        .admin_call(
            "POST",
            &format!("/backends/{}/rotate-out?timeout=5s", sticky.addr),
            "",
            Some(TOKEN),
        )
        .await;
    assert_eq!(s, 200);
    let moved = curl(&r, "127.0.0.1", "/", &jar_args).await;
    assert_eq!(moved.status, 200);
    assert_ne!(moved.port(), port);
    assert!(
        moved.sets("shop_affinity").is_some_and(|c| c != cookie),
        "{}",
        moved.head
    );
    for _ in 0..5 {
        assert_eq!(
            curl(&r, "127.0.0.1", "/", &jar_args).await.port(),
            moved.port()
        );
    }
    assert!(r.metric("router_affinity_total{result=\"kept\"}").await >= Some(15.0));
    assert_eq!(
        r.metric("router_affinity_total{result=\"moved\"}").await,
        Some(1.0)
    );
}

#[tokio::test]
async fn allow_and_deny_lists_answer_403_by_source_address() {
    let (r, _b) = router_with(1, "").await;
    assert_eq!(put(&r, r#"{"deny": ["127.0.0.2"]}"#).await.0, 200);
    assert_eq!(curl(&r, "127.0.0.2", "/", &[]).await.status, 403);
    assert_eq!(curl(&r, "127.0.0.1", "/", &[]).await.status, 200);
    // Allow 127.0.0.0/31 (.0 and .1): .3 is refused, .1 served.
    assert_eq!(
        put(&r, r#"{"allow": ["127.0.0.0/31", "2001:db8::/32"]}"#)
            .await
            .0,
        200
    );
    assert_eq!(curl(&r, "127.0.0.3", "/", &[]).await.status, 403);
    assert_eq!(curl(&r, "127.0.0.1", "/", &[]).await.status, 200);
    assert_eq!(
        r.metric("router_app_requests_refused_total{app=\"shop-demo\",reason=\"address\"}")
            .await,
        Some(2.0)
    );
}

#[tokio::test]
async fn maintenance_answers_503_with_the_page_and_a_timeout_applies_per_app() {
    let (r, backends) = router_with(1, "").await;
    let page = "<h1>Back soon</h1>";
    let body = format!(r#"{{"maintenance": {{"retry_after": "2m", "page": "{page}"}}}}"#);
    assert_eq!(put(&r, &body).await.0, 200);
    let before = backends[0].proxied();
    let c = curl(&r, "127.0.0.1", "/", &[]).await;
    assert_eq!(c.status, 503);
    assert_eq!(c.header("retry-after"), Some("120"));
    assert!(
        c.header("content-type")
            .is_some_and(|t| t.starts_with("text/html"))
    );
    assert_eq!(c.body, page);
    assert_eq!(backends[0].proxied(), before, "the member was not asked");
    // Out of maintenance, with a response timeout of its own: a slow answer is 504.
    assert_eq!(put(&r, r#"{"response_timeout": "300ms"}"#).await.0, 200);
    assert_eq!(
        curl(&r, "127.0.0.1", "/slow?ms=3000", &[]).await.status,
        504
    );
    assert_eq!(curl(&r, "127.0.0.1", "/slow?ms=10", &[]).await.status, 200);
    // Without it, the configuration's (60 s) lets the slow answer through.
    let (s, _) = r
        .admin_call("DELETE", "/apps/shop-demo/settings", "", Some(TOKEN))
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        curl(&r, "127.0.0.1", "/slow?ms=1000", &[]).await.status,
        200
    );
}

#[tokio::test]
async fn a_rate_limit_answers_429_under_load_and_leaves_other_clients_alone() {
    let (r, _b) = router_with(1, "").await;
    let rate = 20.0;
    let burst = 10.0;
    assert_eq!(
        put(
            &r,
            r#"{"rate_limit": {"requests_per_second": 20, "burst": 10}}"#
        )
        .await
        .0,
        200
    );
    // Four keep-alive clients from 127.0.0.1 as fast as they can, 100 requests each.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let addr = r.http;
        tasks.push(tokio::spawn(async move { load(addr, 100).await }));
    }
    let (mut ok, mut limited, mut retry_after) = (0u32, 0u32, None);
    for t in tasks {
        let (o, l, ra) = t.await.expect("load");
        (ok, limited) = (ok + o, limited + l);
        retry_after = retry_after.or(ra);
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(ok + limited, 400, "every answer is 200 or 429");
    assert!(f64::from(ok) >= burst, "the burst passes: {ok}");
    assert!(
        f64::from(ok) <= burst + rate * elapsed + 1.0,
        "{ok} passed in {elapsed:.2} s at 20/s after a burst of 10"
    );
    assert!(limited > 0);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(
        r.metric("router_app_requests_refused_total{app=\"shop-demo\",reason=\"rate_limit\"}")
            .await,
        Some(f64::from(limited))
    );
    // Another client address has a bucket of its own.
    assert_eq!(curl(&r, "127.0.0.2", "/", &[]).await.status, 200);
}

/// `n` GETs on one keep-alive connection: (200s, 429s, a Retry-After seen).
async fn load(addr: SocketAddr, n: usize) -> (u32, u32, Option<String>) {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let (mut ok, mut limited, mut retry) = (0, 0, None);
    for _ in 0..n {
        let req = http::Request::get(format!("http://{addr}/"))
            .header("host", HOST)
            .body(Empty::new())
            .expect("request");
        let resp = client.request(req).await.expect("answer");
        match resp.status().as_u16() {
            200 => ok += 1,
            429 => {
                limited += 1;
                retry = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
            }
            s => panic!("unexpected {s}"),
        }
        let _ = resp.into_body().collect().await;
    }
    (ok, limited, retry)
}

#[tokio::test]
async fn requests_at_once_per_client_are_bounded_with_429() {
    let (r, backends) = router_with(1, "").await;
    assert_eq!(put(&r, r#"{"max_connections_per_client": 2}"#).await.0, 200);
    let mut slow = Vec::new();
    for _ in 0..2 {
        let req =
            format!("GET /slow?ms=5000 HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
        let addr = r.http;
        slow.push(tokio::spawn(async move {
            e2e::raw::exchange(addr, req.as_bytes(), Duration::from_secs(20)).await
        }));
    }
    let member = backends[0].addr;
    e2e::eventually("2 in flight", Duration::from_secs(10), async || {
        r.backend_state(member)
            .await
            .and_then(|s| s["in_flight"].as_u64())
            == Some(2)
    })
    .await;
    let third = curl(&r, "127.0.0.1", "/", &[]).await;
    assert_eq!(third.status, 429, "{}", third.head);
    assert_eq!(
        curl(&r, "127.0.0.2", "/", &[]).await.status,
        200,
        "another client"
    );
    for s in slow {
        assert_eq!(e2e::raw::status(&s.await.expect("slow")), Some(200));
    }
    assert_eq!(
        curl(&r, "127.0.0.1", "/", &[]).await.status,
        200,
        "room again"
    );
}

/// A router configuration file naming `admin` (what the CLI reads).
fn cli_config(dir: &Path, admin: SocketAddr) -> std::path::PathBuf {
    let f = dir.join("cli.yaml");
    std::fs::write(
        &f,
        format!(
            "cloud_domain: example.com\nstate_dir: {}\nlisten: {{ http: 127.0.0.1:0, admin: {admin} }}\nspi: {{ source: none }}\nadmin:\n  token_file: {}\n",
            dir.join("cli-state").display(),
            dir.join("admin.token").display()
        ),
    )
    .expect("config");
    f
}

#[tokio::test]
async fn check_pair_reports_settings_and_keys_that_differ() {
    let key = e2e::tempdir("pair-key");
    std::fs::create_dir_all(&key).expect("dir");
    std::fs::write(key.join("affinity.key"), [9u8; 32]).expect("key");
    let shared = format!(
        "affinity_key_file: {}\n",
        key.join("affinity.key").display()
    );
    let (a, _ba) = router_with(1, &shared).await;
    let (b, _bb) = router_with(1, &shared).await;
    let (c, _bc) = router_with(1, "").await;
    let settings = r#"{"affinity": {}, "rate_limit": {"requests_per_second": 50}}"#;
    for r in [&a, &b, &c] {
        assert_eq!(put(r, settings).await.0, 200);
    }
    let config = cli_config(&a.root, a.admin);
    let check = |peer: SocketAddr| {
        let config = config.clone();
        async move {
            let out = tokio::process::Command::new(e2e::bin("router"))
                .arg("--config")
                .arg(&config)
                .args(["check-pair", &peer.to_string()])
                .output()
                .await
                .expect("router check-pair");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        }
    };
    let (code, text) = check(b.admin).await;
    assert_eq!(code, Some(0), "{text}");
    // The third router has its own key: its cookies would not be honoured.
    let (code, text) = check(c.admin).await;
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("affinity_key"), "{text}");
    // Settings that differ are named by app.
    assert_eq!(put(&b, r#"{"affinity": {}}"#).await.0, 200);
    let (code, text) = check(b.admin).await;
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("shop-demo"), "{text}");
    // `router settings` shows and sets through the same API.
    let out = tokio::process::Command::new(e2e::bin("router"))
        .arg("--config")
        .arg(&config)
        .args(["settings", "shop-demo"])
        .output()
        .await
        .expect("router settings");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("requests_per_second"));
}

#[tokio::test]
async fn a_member_that_goes_down_moves_its_clients_and_a_split_keeps_them() {
    let fast =
        "health:\n  interval: 200ms\n  timeout: 150ms\n  jitter: 20ms\n  fall: 2\n  rise: 2\n";
    let (r, backends) = router_with(2, fast).await;
    assert_eq!(put(&r, r#"{"affinity": {}}"#).await.0, 200);
    let jar = r.root.join("jar.txt");
    let jar = jar.to_str().expect("path");
    let jar_args = ["-c", jar, "-b", jar];
    let first = curl(&r, "127.0.0.1", "/", &jar_args).await;
    assert!(first.sets("route_affinity").is_some(), "{}", first.head);
    let port = first.port();
    // Its member fails its checks: health takes it down, the client moves (200).
    let (down, other): (Vec<&Backend>, Vec<&Backend>) = backends
        .iter()
        .partition(|b| u64::from(b.addr.port()) == port);
    down[0].force_status(503);
    r.wait_health(down[0].addr, "down").await;
    let moved = curl(&r, "127.0.0.1", "/", &jar_args).await;
    assert_eq!(
        (moved.status, moved.port()),
        (200, u64::from(other[0].addr.port()))
    );
    assert!(moved.sets("route_affinity").is_some(), "{}", moved.head);

    // Blue/green: the alias split 50/50 between this app and a second one; a client
    // with a cookie for a member of either stays on it, whatever the weights pick.
    let green = Backend::start().await;
    r.drop_event("10.yaml", &events::add_lb("green", "demo", green.addr));
    r.drop_event(
        "11.yaml",
        &events::add_alias("shop", "demo", "www.shop.test"),
    );
    r.wait_route("www.shop.test").await;
    r.wait_health(green.addr, "up").await;
    let green_put = r
        .admin_call(
            "PUT",
            "/apps/green-demo/settings",
            r#"{"affinity": {}}"#,
            Some(TOKEN),
        )
        .await;
    assert_eq!(green_put.0, 200);
    let (s, text) = r
        .admin_call(
            "POST",
            "/aliases/www.shop.test/split",
            r#"{"shop-demo": 50, "green-demo": 50}"#,
            Some(TOKEN),
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let alias = |jar_args: Vec<String>| {
        let http = r.http;
        async move {
            let out = tokio::process::Command::new("curl")
                .args(["-s", "--max-time", "10", "-H", "Host: www.shop.test"])
                .args(&jar_args)
                .arg(format!("http://{http}/"))
                .output()
                .await
                .expect("curl");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("echo JSON");
            v["port"].as_u64().expect("port")
        }
    };
    // Without a cookie the split spreads requests over both apps.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..20 {
        seen.insert(alias(vec![]).await);
    }
    assert_eq!(seen.len(), 2, "the split shares the name: {seen:?}");
    // With the jar (a cookie for shop-demo's live member): always that member.
    let args: Vec<String> = jar_args.iter().map(|s| s.to_string()).collect();
    for _ in 0..20 {
        assert_eq!(alias(args.clone()).await, u64::from(other[0].addr.port()));
    }
}

#[tokio::test]
async fn https_affinity_cookies_are_secure_same_site_and_partitioned() {
    let pki = e2e::pki::Wildcard::new("settings-tls");
    let (dir, ca_file) = (&pki.dir, &pki.ca_file);
    let tls = format!(
        "{}app_defaults:\n  affinity:\n    same_site: None\n    partitioned: true\n",
        pki.tls_section()
    );
    let b = Backend::start().await;
    let r = TestRouter::start_https(dir.join("router"), &tls).await;
    r.drop_event("01.yaml", &events::add_lb("shop", "demo", b.addr));
    r.wait_member(b.addr).await;
    let https = r.https.expect("https");
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-i", "--cacert"])
        .arg(ca_file)
        .arg("--resolve")
        .arg(format!("{HOST}:{}:127.0.0.1", https.port()))
        .arg(format!("https://{HOST}:{}/", https.port()))
        .output()
        .await
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout);
    let cookie = text
        .lines()
        .find(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie: route_affinity=")
        })
        .unwrap_or_else(|| panic!("no affinity cookie (app_defaults): {text}"));
    assert!(
        cookie
            .trim_end()
            .ends_with("; Secure; SameSite=None; Partitioned"),
        "{cookie}"
    );
    // Plain HTTP gets no SameSite=None (browsers refuse it without Secure).
    let plain = curl(&r, "127.0.0.1", "/", &[]).await;
    let plain = plain.sets("route_affinity").expect("cookie");
    assert!(
        !plain.contains("Secure") && !plain.contains("SameSite"),
        "{plain}"
    );
}

#[tokio::test]
async fn app_defaults_change_on_sighup_and_a_bad_one_is_refused_by_line() {
    use e2e::process::{RouterProcess, spool_config, spool_router};
    let b = Backend::start().await;
    let dir = e2e::tempdir("settings-reload");
    std::fs::create_dir_all(&dir).expect("dir");
    let cfg = spool_router(
        &dir,
        &events::add_lb("shop", "demo", b.addr),
        &spool_config(&dir, "127.0.0.1:0", true, ""),
    );
    let mut router = RouterProcess::start(&cfg).await;
    e2e::eventually("routed", Duration::from_secs(10), async || {
        router.status(HOST, "/").await == Some(200)
    })
    .await;
    let deny = "app_defaults:\n  deny: [127.0.0.0/8]\n";
    std::fs::write(&cfg, spool_config(&dir, "127.0.0.1:0", true, deny)).expect("config");
    router.signal("HUP");
    let done = router.log_line("configuration reloaded").await;
    assert!(
        !done.to_string().contains("app_defaults"),
        "live, no restart: {done}"
    );
    assert_eq!(router.status(HOST, "/").await, Some(403));
    // A bad CIDR: refused with the file, line and field; the running one stays.
    let bad = "app_defaults:\n  deny: [127.0.0.0/99]\n";
    std::fs::write(&cfg, spool_config(&dir, "127.0.0.1:0", true, bad)).expect("config");
    router.signal("HUP");
    let refused = router.log_line("reload refused").await;
    let text = refused.to_string();
    assert!(text.contains("router.yaml:9: app_defaults.deny"), "{text}");
    assert_eq!(router.status(HOST, "/").await, Some(403));
}
