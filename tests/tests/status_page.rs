//! The status page in a real browser: headless Chromium (Debian's `chromium`) loads
//! `GET /` from a running router, runs its script, and the test reads the rendered
//! DOM (not the HTML source): apps, members with health and rotate state, a health
//! transition with its reason, certificates with days left, the event source with a
//! dead letter, the audit log, the filter, and rotate buttons only behind a token.
//! A screenshot is saved under the test's directory.

use std::path::Path;
use std::time::Duration;
use tokio::process::Command;

use e2e::pki::{Ca, write_leaf};
use e2e::{Backend, TestRouter, events};

const SHOP: &str = "ha-shop-demo.example.com";
const ALIAS: &str = "www.shop.test";

/// Runs headless Chromium on `url` with `args` (the flags this machine needs: no
/// sandbox as root, no background networking); returns stdout. Asynchronous: the
/// router under test runs on this test's runtime.
async fn chromium(profile: &Path, url: &str, args: &[&str]) -> String {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("chromium finishes within 60 s")
        .expect("chromium runs (Debian package chromium; tests/run.sh installs it)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn the_status_page_renders_live_state_in_chromium() {
    let root = e2e::tempdir("status-page");
    std::fs::create_dir_all(&root).expect("root");
    let ca = Ca::new("Status CA");
    let (cert, key) = write_leaf(&root, "wildcard", &ca.leaf(&["*.example.com"]));
    let alias_leaf = ca.leaf(&[ALIAS]);
    std::fs::write(root.join("admin.token"), "page-token\n").expect("token");
    let config = format!(
        "tls:\n  default_cert: {}\n  default_key: {}\n\
         admin:\n  token_file: {}\n\
         health:\n  interval: 200ms\n  timeout: 150ms\n  jitter: 0s\n  fall: 2\n  rise: 1\n",
        cert.display(),
        key.display(),
        root.join("admin.token").display()
    );
    let (b1, b2, b3) = (
        Backend::start().await,
        Backend::start().await,
        Backend::start().await,
    );
    let r = TestRouter::start_https(root.clone(), &config).await;
    r.drop_event("01.yaml", &events::add_lb("shop", "demo", b1.addr));
    r.drop_event(
        "02.yaml",
        &events::add_lb("shop", "demo", b2.addr).replace("000001", "000002"),
    );
    r.drop_event("03.yaml", &events::add_alias("shop", "demo", ALIAS));
    r.drop_event(
        "04.yaml",
        &events::add_ssl(
            "shop",
            "demo",
            ALIAS,
            &alias_leaf.cert_pem,
            &alias_leaf.key_pem,
            None,
        ),
    );
    r.drop_event(
        "05.yaml",
        &events::add_lb("blog", "demo", b3.addr).replace("000001", "000003"),
    );
    r.drop_event("06.yaml", "---\n:action: [not, yaml\n");
    r.wait_route(ALIAS).await;
    r.wait_route("ha-blog-demo.example.com").await;
    r.wait_health(b1.addr, "up").await;
    r.wait_health(b2.addr, "up").await;
    assert!(r.get_n(SHOP, 40).await.iter().all(|s| *s == 200));
    // An operator action (audited) and a member that fails its checks.
    let (s, _) = r
        .admin_call(
            "POST",
            &format!("/backends/{}/rotate-out?timeout=1s", b2.addr),
            "",
            Some("page-token"),
        )
        .await;
    assert_eq!(s, 200);
    b3.force_status(503);
    r.wait_health(b3.addr, "down").await;
    // Per-app settings, one of them refusing a request.
    let (s, _) = r
        .admin_call(
            "PUT",
            "/apps/blog-demo/settings",
            r#"{"affinity": {}, "deny": ["127.0.0.0/8"]}"#,
            Some("page-token"),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(r.get("ha-blog-demo.example.com", "/").await.0, 403);

    let admin = format!("http://{}/", r.admin);
    let profile = root.join("chromium");
    let dom = chromium(&profile, &admin, &["--dump-dom"]).await;
    for (what, needle) in [
        ("rendered by the script", "data-rendered=\"".to_string()),
        ("the app", "data-app=\"shop-demo\"".to_string()),
        ("the other app", "data-app=\"blog-demo\"".to_string()),
        ("a member row", format!("data-member=\"{}\"", b1.addr)),
        ("the alias", format!(">{ALIAS}<")),
        (
            "the alias certificate",
            format!("data-certificate=\"{ALIAS}\""),
        ),
        (
            "the default certificate",
            "data-certificate=\"default\"".to_string(),
        ),
        ("the audit log", "data-audit=\"rotate-out\"".to_string()),
        (
            "the health transition's reason",
            "checks failed in a row: status".to_string(),
        ),
        (
            "rotate buttons behind the token",
            "data-rotate=\"in\"".to_string(),
        ),
        ("the event source", ">spool<".to_string()),
        (
            "the app's settings",
            "data-settings=\"blog-demo\"".to_string(),
        ),
        ("its deny list", ">deny 127.0.0.0/8<".to_string()),
        ("its refusals", ">1 refused<".to_string()),
        (
            "the app's traffic",
            "data-traffic=\"shop-demo\"".to_string(),
        ),
        ("its rates", "req/s · 5xx 0.0 % · p50".to_string()),
    ] {
        assert!(
            dom.contains(&needle),
            "{what}: {needle} not in the rendered page:\n{dom}"
        );
    }
    // The rotated-out member's row says so; the failing one is down.
    let row = |addr: std::net::SocketAddr| -> String {
        let start = dom.find(&format!("data-member=\"{addr}\"")).expect("row");
        dom[start..start + dom[start..].find("</tr>").expect("row end")].to_string()
    };
    assert!(row(b2.addr).contains(">out<"), "{}", row(b2.addr));
    assert!(row(b1.addr).contains(">up<"), "{}", row(b1.addr));
    assert!(row(b3.addr).contains(">down<"), "{}", row(b3.addr));
    // The dead letter is listed with its reason (not the "none" row).
    let dead = &dom[dom.find("id=\"dead-letters\"").expect("table")..];
    let dead = &dead[..dead.find("</table>").expect("end")];
    assert!(dead.contains("06") && !dead.contains(">none<"), "{dead}");

    // The filter (from the address, as a bookmark would carry it).
    let filtered = chromium(&profile, &format!("{admin}#filter=blog"), &["--dump-dom"]).await;
    assert!(filtered.contains("data-app=\"blog-demo\""));
    assert!(!filtered.contains("data-app=\"shop-demo\""), "filtered out");

    // A screenshot for the README and for whoever reads this test's output.
    let shot = root.join("status.png");
    chromium(
        &profile,
        &admin,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1400,1200",
        ],
    )
    .await;
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    println!("status page screenshot: {}", shot.display());
    // `STATUS_PAGE_SCREENSHOT=docs/status-page.png` keeps a copy (the README's).
    if let Ok(keep) = std::env::var("STATUS_PAGE_SCREENSHOT") {
        std::fs::copy(&shot, keep).expect("copy the screenshot");
    }
    r.stop().await;

    // Without admin.token_file: no buttons.
    let open = TestRouter::start("").await;
    let dom = chromium(
        &profile,
        &format!("http://{}/", open.admin),
        &["--dump-dom"],
    )
    .await;
    assert!(dom.contains("data-rendered=\"") && !dom.contains("data-rotate="));
    open.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}

/// A page on another origin (127.0.0.2) that Chromium opens posts a form to the
/// admin listener's rotate-out, as a malicious site in an operator's browser would;
/// and a rebound name (evil.example → 127.0.0.1) tries to read the routes. Without
/// a token, both are refused by the router (the refusals are counted, so the
/// requests did arrive) and the member stays in.
#[tokio::test]
async fn a_cross_site_page_in_chromium_cannot_rotate_members_nor_read_routes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("shop", "demo", b.addr));
    r.wait_route(SHOP).await;
    let target = format!(
        "http://{}/backends/{}/rotate-out?timeout=1s",
        r.admin, b.addr
    );
    let page = format!(
        "<html><body><form id=f method=POST action=\"{target}\"></form>\
         <script>document.getElementById('f').submit()</script></body></html>"
    );
    let evil = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind");
    let evil_url = format!("http://{}/", evil.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = evil.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    page.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(page.as_bytes()).await;
            });
        }
    });
    let root = e2e::tempdir("csrf");
    let profile = root.join("chromium");
    chromium(&profile, &evil_url, &["--dump-dom"]).await;
    assert_eq!(
        r.metric("router_admin_refused_total{reason=\"origin\"}")
            .await,
        Some(1.0),
        "the form's POST reached the router and was refused"
    );
    assert_eq!(
        r.backend_state(b.addr).await.expect("member")["rotate"],
        "in"
    );
    let rebound = format!("http://evil.example:{}/routes", r.admin.port());
    let dom = chromium(
        &profile,
        &rebound,
        &[
            "--dump-dom",
            "--host-resolver-rules=MAP evil.example 127.0.0.1",
        ],
    )
    .await;
    assert!(dom.contains("421") && !dom.contains(SHOP), "{dom}");
    r.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}
