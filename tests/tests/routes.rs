//! Routes as OpenShift operators write them, through the real path: an app's
//! HSTS, header actions (request and response, with variables), plain-HTTP
//! policy (none, redirect, allow) and request body limit, put through the
//! admin API and in force at once over HTTP/1.1 and h2 (curl) and HTTP/3
//! (aioquic); the router-wide actions of `app_defaults` on the router's own
//! 404; inputs that must be refused answered 400 naming the field, the app's
//! settings left as they were. Real curl, a real HTTP/3 client, a member that
//! reports what it received.

use std::path::{Path, PathBuf};

use e2e::backend::Echo;
use e2e::pki::Wildcard;
use e2e::{Backend, TestRouter, events};

const HOST: &str = "ha-myapp-demo.example.com";
const TOKEN: &str = "routes-token";

/// What curl got: status, the response head (lower-case names), the body.
struct Got {
    status: u16,
    head: Vec<(String, String)>,
    body: String,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.head
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// curl against `url` for HOST (`--resolve`d to the router), with `args`.
async fn curl(url_port: (&str, u16), path: &str, ca: &Path, args: &[&str]) -> Got {
    let (scheme, port) = url_port;
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{HOST}:{port}:127.0.0.1")])
        .args(args)
        .arg(format!("{scheme}://{HOST}:{port}{path}"))
        .output()
        .await
        .expect("curl runs (apt-get install curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no status from curl {path} {args:?} ({}): {text:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let head = lines
        .filter_map(|l| {
            let (n, v) = l.split_once(':')?;
            Some((n.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    Got {
        status,
        head,
        body: body.to_string(),
    }
}

fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/h3-venv/bin/python3");
    assert!(
        venv.exists(),
        "{} is missing: tests/run.sh makes it",
        venv.display()
    );
    venv
}

/// One HTTP/3 connection, the requests in turn: client.py's JSON.
async fn h3(
    addr: std::net::SocketAddr,
    ca: &Path,
    requests: serde_json::Value,
) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("h3/client.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .args(["get", &addr.to_string(), HOST])
        .arg(ca)
        .arg(requests.to_string())
        .output()
        .await
        .expect("python3");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client.py: {e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A router with HTTPS and HTTP/3, the admin token, `app_defaults`' response
/// action, and `myapp-demo` on one echo member.
async fn router() -> (TestRouter, Backend, Wildcard) {
    let pki = Wildcard::new("routes");
    let root = pki.dir.join("router");
    std::fs::create_dir_all(&root).expect("root");
    let token = root.join("admin.token");
    std::fs::write(&token, TOKEN).expect("token");
    let extra = format!(
        "{}admin:\n  token_file: {}\napp_defaults:\n  headers:\n    response:\n      - set: {{name: X-Router, value: \"edge %{{request_id}}\"}}\n",
        pki.tls_section(),
        token.display()
    );
    let r = TestRouter::start_http3(root, &extra).await;
    let b = Backend::start().await;
    r.drop_event("00.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_member(b.addr).await;
    r.wait_health(b.addr, "up").await;
    (r, b, pki)
}

async fn put(r: &TestRouter, body: &str) -> (u16, String) {
    r.admin_call("PUT", "/apps/myapp-demo/settings", body, Some(TOKEN))
        .await
}

const SETTINGS: &str = r#"{
  "hsts": {"max_age": "365d", "include_subdomains": true},
  "headers": {
    "request": [
      {"set": {"name": "X-Tenant", "value": "%{app} via %{host}"}},
      {"set": {"name": "X-Client", "value": "%{client_ip} sni=%{sni}"}},
      {"delete": "User-Agent"}
    ],
    "response": [
      {"set": {"name": "X-Frame-Options", "value": "DENY"}},
      {"delete": "Content-Type"}
    ]
  },
  "plain_http": "none",
  "max_request_body_bytes": 100000
}"#;

/// The member's view and the client's of one request over HTTPS.
fn check_https(over: &str, status: u16, head: &dyn Fn(&str) -> Option<String>, echo: &Echo) {
    assert_eq!(status, 200, "{over}");
    assert_eq!(
        head("strict-transport-security").as_deref(),
        Some("max-age=31536000; includeSubDomains"),
        "{over}: HSTS"
    );
    assert_eq!(head("x-frame-options").as_deref(), Some("DENY"), "{over}");
    assert_eq!(head("content-type"), None, "{over}: the member's deleted");
    assert!(
        head("x-router").is_some_and(|v| v.starts_with("edge ")),
        "{over}: app_defaults' action after the app's"
    );
    assert_eq!(
        echo.header("x-tenant"),
        Some(format!("myapp-demo via {HOST}").as_str()),
        "{over}: {echo:?}"
    );
    assert_eq!(
        echo.header("x-client"),
        Some(format!("127.0.0.1 sni={HOST}").as_str()),
        "{over}"
    );
    assert_eq!(
        echo.header("user-agent"),
        None,
        "{over}: deleted before the member"
    );
}

#[tokio::test]
async fn hsts_header_actions_plain_http_policy_and_body_limit_apply_on_every_protocol() {
    let (r, backend, pki) = router().await;
    let (https, udp) = (r.https.expect("https"), r.http3.expect("http3"));
    let ca = &pki.ca_file;
    let (s, text) = put(&r, SETTINGS).await;
    assert_eq!(s, 200, "{text}");

    // 1. HTTPS over HTTP/1.1 and h2 (curl), and HTTP/3.
    for version in ["--http1.1", "--http2"] {
        let got = curl(
            ("https", https.port()),
            "/x",
            ca,
            &[version, "-A", "curl-test", "-H", "X-Tenant: forged"],
        )
        .await;
        let echo = Echo::parse(got.body.as_bytes());
        assert_eq!(
            echo.all("x-tenant").len(),
            1,
            "{version}: a set field replaces the client's: {echo:?}"
        );
        check_https(
            version,
            got.status,
            &|n| got.header(n).map(str::to_string),
            &echo,
        );
    }
    let v = h3(
        udp,
        ca,
        serde_json::json!([{"method": "GET", "authority": HOST, "path": "/x",
                            "headers": [["user-agent", "h3-test"]]}]),
    )
    .await;
    let head = |n: &str| v[0]["headers"][n][0].as_str().map(str::to_string);
    let status = v[0]["status"].as_u64().unwrap_or(0) as u16;
    let echo = Echo::parse(v[0]["body"].as_str().unwrap_or_default().as_bytes());
    check_https("HTTP/3", status, &head, &echo);

    // 2. Plain HTTP: none (403, the member never reached), redirect (301 for
    // GET, 308 for POST, to https with the path and query), allow (served,
    // no HSTS over plain HTTP).
    let hits = backend.hits();
    let got = curl(("http", r.http.port()), "/p?q=1", ca, &[]).await;
    assert_eq!(got.status, 403, "plain_http none: {}", got.body);
    assert!(got.body.contains("HTTPS only"), "{}", got.body);
    assert!(
        got.header("x-router").is_some(),
        "the router's own answer before the app's member carries app_defaults' actions"
    );
    assert_eq!(
        backend.hits(),
        hits,
        "the member was reached over plain HTTP"
    );
    let (s, text) = put(&r, r#"{"plain_http": "redirect"}"#).await;
    assert_eq!(s, 200, "{text}");
    let got = curl(("http", r.http.port()), "/p?q=1", ca, &[]).await;
    assert_eq!(got.status, 301);
    assert_eq!(
        got.header("location"),
        Some(format!("https://{HOST}:{}/p?q=1", https.port()).as_str())
    );
    let got = curl(("http", r.http.port()), "/p", ca, &["-d", "x=1"]).await;
    assert_eq!(got.status, 308, "a POST keeps its method");
    let (s, text) = put(&r, r#"{"plain_http": "allow", "hsts": {"max_age": "1d"}}"#).await;
    assert_eq!(s, 200, "{text}");
    let got = curl(("http", r.http.port()), "/p", ca, &[]).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.header("strict-transport-security"),
        None,
        "never on plain HTTP"
    );
    let got = curl(("https", https.port()), "/p", ca, &[]).await;
    assert_eq!(
        got.header("strict-transport-security"),
        Some("max-age=86400")
    );

    // 3. The body limit: declared over it (HTTP/1.1, h2, HTTP/3) is 413 before
    // the member sees a byte; chunked over it within the read-ahead too; one
    // that streams past it after the read-ahead is cut (413: the member never
    // answered a whole body).
    let (s, text) = put(&r, r#"{"max_request_body_bytes": 1000}"#).await;
    assert_eq!(s, 200, "{text}");
    let body = "x".repeat(2000);
    let hits = backend.hits();
    for args in [
        vec!["--http1.1", "--data-binary", body.as_str()],
        vec![
            "--http1.1",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            body.as_str(),
        ],
    ] {
        let got = curl(("https", https.port()), "/up", ca, &args).await;
        assert_eq!(got.status, 413, "{args:?}: {}", got.body);
    }
    // h2 with nghttp: the 413, then the rest of the upload stopped with
    // RST_STREAM NO_ERROR (RFC 9113 §8.1), never an error code. (Debian 12's
    // curl 7.88 reports such a reset as error 92 whenever it lands before its
    // own upload ended.)
    let upload = pki.dir.join("2000.txt");
    std::fs::write(&upload, &body).expect("write");
    let out = tokio::process::Command::new("nghttp")
        .args(["-v", "-d"])
        .arg(&upload)
        .arg(format!("https://127.0.0.1:{}/up", https.port()))
        .args(["-H", &format!(":authority: {HOST}")])
        .output()
        .await
        .expect("nghttp (apt-get install nghttp2-client)");
    let frames = String::from_utf8_lossy(&out.stdout);
    assert!(frames.contains(":status: 413"), "h2: {frames}");
    let lines: Vec<&str> = frames.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("recv RST_STREAM") {
            let code = lines.get(i + 1).copied().unwrap_or_default();
            assert!(
                code.contains("NO_ERROR"),
                "h2 reset with an error: {line} {code}"
            );
        }
    }
    let v = h3(
        udp,
        ca,
        serde_json::json!([{"method": "POST", "authority": HOST, "path": "/up", "body": body}]),
    )
    .await;
    assert_eq!(v[0]["status"], 413, "HTTP/3: {v}");
    assert_eq!(backend.hits(), hits, "a member saw a body over the limit");
    let small = curl(
        ("https", https.port()),
        "/up",
        ca,
        &["--data-binary", "small"],
    )
    .await;
    assert_eq!(small.status, 200, "a body under the limit");
    let (s, text) = put(&r, r#"{"max_request_body_bytes": 100000}"#).await;
    assert_eq!(s, 200, "{text}");
    let big = "y".repeat(300_000);
    let file = pki.dir.join("big.txt");
    std::fs::write(&file, &big).expect("write");
    let at = format!("@{}", file.display());
    let got = curl(
        ("https", https.port()),
        "/up",
        ca,
        &[
            "--http1.1",
            "-H",
            "Transfer-Encoding: chunked",
            "--data-binary",
            &at,
        ],
    )
    .await;
    assert_eq!(got.status, 413, "streamed past the limit: {}", got.body);
    let refused = r
        .metric_sum(
            "router_app_requests_refused_total",
            &[("app", "myapp-demo"), ("reason", "body_too_large")],
        )
        .await;
    assert_eq!(
        refused, 4.0,
        "bodies over the limit refused before the member, counted (HTTP/1.1, chunked, h2, HTTP/3)"
    );
    let cut = r
        .metric_sum(
            "router_upstream_errors_total",
            &[("kind", "client_body_too_large")],
        )
        .await;
    assert_eq!(cut, 1.0, "the streamed body's cut counted");
    let plain = r
        .metric_sum(
            "router_app_requests_refused_total",
            &[("reason", "plain_http")],
        )
        .await;
    assert_eq!(plain, 1.0, "the plain-HTTP refusal counted");

    // 4. The router-wide action on the router's own 404 (no app).
    let got = curl(
        ("https", https.port()),
        "/",
        ca,
        &["-H", "Host: nobody.example.com"],
    )
    .await;
    assert_eq!(got.status, 404);
    assert!(
        got.header("x-router")
            .is_some_and(|v| v.starts_with("edge ")),
        "{:?}",
        got.head
    );

    // 5. Refused inputs name their field and change nothing.
    let (_, before) = r
        .admin_call("GET", "/apps/myapp-demo/settings", "", Some(TOKEN))
        .await;
    for (body, field) in [
        (
            r#"{"headers": {"request": [{"set": {"name": "Host", "value": "x"}}]}}"#,
            "headers.request[0]",
        ),
        (
            r#"{"headers": {"request": [{"delete": "X-Forwarded-For"}]}}"#,
            "headers.request[0]",
        ),
        (
            r#"{"headers": {"response": [{"set": {"name": "Transfer-Encoding", "value": "x"}}]}}"#,
            "headers.response[0]",
        ),
        (
            r#"{"headers": {"response": [{"set": {"name": "X-A", "value": "%{nope}"}}]}}"#,
            "headers.response[0]",
        ),
        (r#"{"hsts": {"max_age": "1000d"}}"#, "hsts.max_age"),
        (r#"{"plain_http": "sometimes"}"#, "plain_http"),
    ] {
        let (s, text) = put(&r, body).await;
        assert_eq!(s, 400, "{body}: {text}");
        assert!(text.contains(field), "{body}: the field is named: {text}");
    }
    let (_, after) = r
        .admin_call("GET", "/apps/myapp-demo/settings", "", Some(TOKEN))
        .await;
    assert_eq!(before, after, "a refused PUT changed the settings");
}

/// `add_alias` for a wildcard, quoted as Ruby's YAML writes a scalar that
/// starts with `*` (unquoted it would be a YAML alias).
fn add_wildcard(app: &str, ns: &str, alias: &str) -> String {
    format!("---\n:action: :add_alias\n:app_name: {app}\n:namespace: {ns}\n:alias: \"{alias}\"\n")
}

/// `add_ssl` for a wildcard alias, quoted likewise.
fn add_wildcard_ssl(app: &str, ns: &str, alias: &str, leaf: &e2e::pki::Leaf) -> String {
    events::add_ssl(app, ns, "ALIAS", &leaf.cert_pem, &leaf.key_pem, None)
        .replace(":alias: ALIAS", &format!(":alias: \"{alias}\""))
}

/// curl over HTTPS to `name` (SNI and Host), verifying against `ca`: status,
/// the member's port (the echo backend says it), and the certificate's subject.
async fn https_to(https: std::net::SocketAddr, name: &str, ca: &Path) -> (u16, u64, String) {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-v", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{name}:{}:127.0.0.1", https.port())])
        .args(["-w", "\n%{http_code}"])
        .arg(format!("https://{name}:{}/", https.port()))
        .output()
        .await
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let port = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["port"].as_u64())
        .unwrap_or(0);
    let err = String::from_utf8_lossy(&out.stderr);
    let subject = err
        .lines()
        .find_map(|l| l.split_once("subject: ").map(|(_, s)| s.to_string()))
        .unwrap_or_default();
    (code.trim().parse().unwrap_or(0), port, subject)
}

#[tokio::test]
async fn wildcard_aliases_route_one_label_deep_behind_their_switch_with_their_certificate() {
    let pki = Wildcard::new("wild");
    let wild_leaf = pki.ca.leaf(&["*.customer.test"]);
    let exact_leaf = pki.ca.leaf(&["www.customer.test"]);
    let (wild, exact) = (Backend::start().await, Backend::start().await);
    let all = [
        events::add_lb("wild", "demo", wild.addr),
        add_wildcard("wild", "demo", "*.customer.test"),
        add_wildcard_ssl("wild", "demo", "*.customer.test", &wild_leaf),
        events::add_lb("exact", "demo", exact.addr),
        events::add_alias("exact", "demo", "www.customer.test"),
        events::add_ssl(
            "exact",
            "demo",
            "www.customer.test",
            &exact_leaf.cert_pem,
            &exact_leaf.key_pem,
            None,
        ),
    ];
    for (switch, dir) in [(false, "off"), (true, "on")] {
        let root = pki.dir.join(dir);
        let extra = format!("{}wildcard_aliases: {switch}\n", pki.tls_section());
        let r = TestRouter::start_https(root, &extra).await;
        for (i, e) in all.iter().enumerate() {
            r.drop_event(&format!("{i:02}.yaml"), e);
        }
        r.wait_spool_empty().await;
        r.wait_health(wild.addr, "up").await;
        r.wait_health(exact.addr, "up").await;
        let https = r.https.expect("https");
        let ca = &pki.ca_file;
        let (code, port, _) = https_to(https, "www.customer.test", ca).await;
        assert_eq!(
            (code, port),
            (200, u64::from(exact.addr.port())),
            "an exact alias (switch {switch})"
        );
        let (code, port, subject) = https_to(https, "a.customer.test", ca).await;
        if !switch {
            assert_eq!(
                code, 404,
                "a wildcard alias is not routed with its switch off"
            );
            continue;
        }
        assert_eq!(
            (code, port),
            (200, u64::from(wild.addr.port())),
            "under the wildcard"
        );
        assert!(
            subject.contains("customer.test"),
            "served the wildcard's certificate: {subject:?}"
        );
        // One label deep only, and never the bare domain.
        for name in ["a.b.customer.test", "customer.test"] {
            let got = curl(
                ("http", r.http.port()),
                "/",
                ca,
                &["-H", &format!("Host: {name}")],
            )
            .await;
            assert_eq!(got.status, 404, "{name}");
        }
        // Exact names win over the wildcard, over plain HTTP too.
        let got = curl(
            ("http", r.http.port()),
            "/",
            ca,
            &["-H", "Host: www.customer.test"],
        )
        .await;
        assert_eq!(Echo::parse(got.body.as_bytes()).port, exact.addr.port());
        let got = curl(
            ("http", r.http.port()),
            "/",
            ca,
            &["-H", "Host: Other.Customer.TEST"],
        )
        .await;
        assert_eq!(Echo::parse(got.body.as_bytes()).port, wild.addr.port());
    }
}

#[tokio::test]
async fn an_apps_own_balancer_hashes_its_key_consistently_or_takes_turns() {
    let root = e2e::tempdir("balance");
    std::fs::create_dir_all(&root).expect("root");
    let token = root.join("admin.token");
    std::fs::write(&token, TOKEN).expect("token");
    let r = TestRouter::start_in(
        root,
        &format!("admin:\n  token_file: {}\n", token.display()),
    )
    .await;
    let mut members = Vec::new();
    for i in 0..3 {
        let b = Backend::start().await;
        r.drop_event(
            &format!("{i:02}.yaml"),
            &events::add_lb("myapp", "demo", b.addr),
        );
        members.push(b);
    }
    for b in &members {
        r.wait_member(b.addr).await;
        r.wait_health(b.addr, "up").await;
    }
    let ca = Path::new("/dev/null");
    let port_of = |got: Got| {
        assert_eq!(got.status, 200, "{}", got.body);
        Echo::parse(got.body.as_bytes()).port
    };
    let http = ("http", r.http.port());

    // A header: one user always reaches one member, over HTTP/1.1 and h2 (prior
    // knowledge); many users spread over all three.
    let (s, text) = put(&r, r#"{"balance": {"header": "X-User"}}"#).await;
    assert_eq!(s, 200, "{text}");
    let mut alice = std::collections::BTreeSet::new();
    for args in [["--http1.1"; 1], ["--http2-prior-knowledge"; 1]] {
        for _ in 0..4 {
            let got = curl(http, "/", ca, &[args[0], "-H", "X-User: alice"]).await;
            alice.insert(port_of(got));
        }
    }
    assert_eq!(alice.len(), 1, "alice reached {alice:?}");
    let mut spread = std::collections::BTreeSet::new();
    for i in 0..30 {
        let got = curl(http, "/", ca, &["-H", &format!("X-User: user-{i}")]).await;
        spread.insert(port_of(got));
    }
    assert_eq!(spread.len(), 3, "30 users over three members: {spread:?}");
    // A member rotated out moves its own users only: alice stays where she
    // was when hers is not the one rotated out.
    let alice_port = *alice.iter().next().expect("alice");
    let other = members
        .iter()
        .find(|b| b.addr.port() != alice_port)
        .expect("another member");
    let (s, text) = r
        .admin_call(
            "POST",
            &format!("/backends/{}/rotate-out", other.addr),
            "",
            Some(TOKEN),
        )
        .await;
    assert_eq!(s, 200, "{text}");
    let got = curl(http, "/", ca, &["-H", "X-User: alice"]).await;
    assert_eq!(
        port_of(got),
        alice_port,
        "alice moved when another member left"
    );
    let (s, _) = r
        .admin_call(
            "POST",
            &format!("/backends/{}/rotate-in", other.addr),
            "",
            Some(TOKEN),
        )
        .await;
    assert_eq!(s, 200);

    // A cookie, and the source address (two client addresses on lo).
    let (s, text) = put(&r, r#"{"balance": {"cookie": "sid"}}"#).await;
    assert_eq!(s, 200, "{text}");
    let by_cookie: std::collections::BTreeSet<u16> = futures_util::future::join_all(
        (0..5).map(|_| curl(http, "/", ca, &["-H", "Cookie: a=1; sid=s-42; b=2"])),
    )
    .await
    .into_iter()
    .map(port_of)
    .collect();
    assert_eq!(by_cookie.len(), 1, "one session, one member: {by_cookie:?}");
    let (s, text) = put(&r, r#"{"balance": "source"}"#).await;
    assert_eq!(s, 200, "{text}");
    for from in ["127.0.0.1", "127.0.0.2"] {
        let mut ports = std::collections::BTreeSet::new();
        for _ in 0..5 {
            ports.insert(port_of(curl(http, "/", ca, &["--interface", from]).await));
        }
        assert_eq!(ports.len(), 1, "{from} reached {ports:?}");
    }

    // Round robin for this app alone: six requests, two on each member.
    let (s, text) = put(&r, r#"{"balance": "round_robin"}"#).await;
    assert_eq!(s, 200, "{text}");
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..6 {
        *counts
            .entry(port_of(curl(http, "/", ca, &[]).await))
            .or_insert(0) += 1;
    }
    assert_eq!(
        counts.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{counts:?}"
    );
    // Refused: a bad name, an unknown balancer.
    for (body, field) in [
        (r#"{"balance": {"header": "bad name"}}"#, "balance.header"),
        (r#"{"balance": {"cookie": "a;b"}}"#, "balance.cookie"),
        (r#"{"balance": "fastest"}"#, "balance"),
    ] {
        let (s, text) = put(&r, body).await;
        assert_eq!(s, 400, "{body}: {text}");
        assert!(text.starts_with(field), "{body}: {text}");
    }
}

#[tokio::test]
async fn a_hosts_path_prefixes_go_to_other_apps_rewritten_longest_first() {
    let (r, web, pki) = router().await;
    let (api, v2) = (Backend::start().await, Backend::start().await);
    r.drop_event("10.yaml", &events::add_lb("api", "demo", api.addr));
    r.drop_event("11.yaml", &events::add_lb("v2", "demo", v2.addr));
    r.wait_health(api.addr, "up").await;
    r.wait_health(v2.addr, "up").await;
    let ca = &pki.ca_file;
    let path = format!("/aliases/{HOST}/paths");
    let rules = r#"{"/api": {"app": "api-demo", "rewrite": "/"},
                    "/api/v2": {"app": "v2-demo", "rewrite": "/version2"}}"#;
    let (s, text) = r.admin_call("POST", &path, rules, Some(TOKEN)).await;
    assert_eq!(s, 200, "{text}");
    let https = ("https", r.https.expect("https").port());
    // Over HTTP/1.1, h2 and plain HTTP: which app, and the target it got.
    for (request, app, target) in [
        ("/api/users?x=1", api.addr.port(), "/users?x=1"),
        ("/api", api.addr.port(), "/"),
        ("/api/v2/items", v2.addr.port(), "/version2/items"),
        ("/apix", web.addr.port(), "/apix"),
        ("/", web.addr.port(), "/"),
    ] {
        for (url, args) in [
            (https, "--http1.1"),
            (https, "--http2"),
            (("http", r.http.port()), "--http1.1"),
        ] {
            let got = curl(url, request, ca, &[args]).await;
            assert_eq!(got.status, 200, "{request} {args}: {}", got.body);
            let echo = Echo::parse(got.body.as_bytes());
            assert_eq!(
                (echo.port, echo.target.as_str()),
                (app, target),
                "{request} over {args} {}",
                url.0
            );
        }
    }
    // HTTP/3: the same rule.
    let v = h3(
        r.http3.expect("http3"),
        ca,
        serde_json::json!([{"method": "GET", "authority": HOST, "path": "/api/v2/x"}]),
    )
    .await;
    let echo = Echo::parse(v[0]["body"].as_str().unwrap_or_default().as_bytes());
    assert_eq!(
        (echo.port, echo.target.as_str()),
        (v2.addr.port(), "/version2/x"),
        "{v}"
    );
    // Shown in /routes, audited; bad rules refused with the table unchanged.
    let (_, routes) = r.admin_get("/routes").await;
    assert!(routes.contains("\"/api/v2\""), "{routes}");
    let (_, audit) = r.admin_call("GET", "/audit", "", Some(TOKEN)).await;
    assert!(audit.contains("\"paths\""), "{audit}");
    for bad in [
        r#"{"api": {"app": "api-demo"}}"#,
        r#"{"/a": {"app": "nohyphen"}}"#,
        r#"{"/a": {"app": "api-demo", "rewrite": "x"}}"#,
        r#"{"/a": {"app": "missing-demo"}}"#,
        r#"{}"#,
    ] {
        let (s, text) = r.admin_call("POST", &path, bad, Some(TOKEN)).await;
        assert!(s == 400 || s == 404, "{bad}: {s} {text}");
    }
    let got = curl(https, "/api/users", ca, &[]).await;
    assert_eq!(
        Echo::parse(got.body.as_bytes()).port,
        api.addr.port(),
        "a refused POST changed the rules"
    );
    // Removed: the name's own app takes every path again.
    let (s, text) = r.admin_call("DELETE", &path, "", Some(TOKEN)).await;
    assert_eq!(s, 200, "{text}");
    let got = curl(https, "/api/users", ca, &[]).await;
    assert_eq!(Echo::parse(got.body.as_bytes()).port, web.addr.port());
}

/// curl over plain HTTP to `http` for `host`: status, head, body.
async fn plain(http: std::net::SocketAddr, host: &str) -> Got {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "10", "-H"])
        .arg(format!("Host: {host}"))
        .arg(format!("http://{http}/x"))
        .output()
        .await
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Got {
        status,
        head: lines
            .filter_map(|l| {
                let (n, v) = l.split_once(':')?;
                Some((n.trim().to_ascii_lowercase(), v.trim().to_string()))
            })
            .collect(),
        body: body.to_string(),
    }
}

#[tokio::test]
async fn error_pages_are_the_operators_the_apps_first_with_the_request_id_and_reload() {
    let dir = e2e::tempdir("pages");
    let pages = dir.join("pages");
    std::fs::create_dir_all(&pages).expect("pages");
    std::fs::write(
        pages.join("404.html"),
        "<h1>Nothing here</h1><p>quote %{request_id}</p>",
    )
    .expect("404");
    std::fs::write(pages.join("502.html"), "<h1>Router: bad gateway</h1>").expect("502");
    std::fs::write(pages.join("503.html"), "<h1>Router: unavailable</h1>").expect("503");
    let b = Backend::start().await;
    let extra = format!("error_pages: {}\n", pages.display());
    let config = e2e::process::spool_config(&dir, "127.0.0.1:0", true, &extra);
    let first = events::add_lb("myapp", "demo", b.addr);
    let cfg = e2e::process::spool_router(&dir, &first, &config);
    // An app whose member refuses connections: 502 or 503, never its member's.
    let dead = "127.0.0.1:1".parse().expect("addr");
    std::fs::write(
        dir.join("spool/02.yaml"),
        events::add_lb("dead", "demo", dead),
    )
    .expect("event");
    let mut r = e2e::process::RouterProcess::start(&cfg).await;
    let dead_host = "ha-dead-demo.example.com";
    e2e::eventually(
        "both apps routed",
        std::time::Duration::from_secs(10),
        async || {
            plain(r.http, dead_host).await.status != 404 && plain(r.http, HOST).await.status == 200
        },
    )
    .await;

    // 1. The router's page for an unknown host, naming the request's ID.
    let got = plain(r.http, "nobody.example.com").await;
    assert_eq!(got.status, 404);
    assert_eq!(got.header("content-type"), Some("text/html; charset=utf-8"));
    let id = got
        .header("x-request-id")
        .expect("X-Request-Id")
        .to_string();
    assert_eq!(got.body, format!("<h1>Nothing here</h1><p>quote {id}</p>"));

    // 2. The dead app: the router's page, then the app's own once it has one.
    let got = plain(r.http, dead_host).await;
    assert!(
        got.body.starts_with("<h1>Router: "),
        "{} {}",
        got.status,
        got.body
    );
    let admin = r.admin.expect("admin");
    let put = |body: &'static str| {
        let url = format!("http://{admin}/apps/dead-demo/settings");
        async move {
            let out = tokio::process::Command::new("curl")
                .args([
                    "-s",
                    "-X",
                    "PUT",
                    "-w",
                    "\n%{http_code}",
                    "--data-binary",
                    body,
                    &url,
                ])
                .output()
                .await
                .expect("curl");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
            (code.parse::<u16>().unwrap_or(0), body.to_string())
        }
    };
    let (s, text) = put(r#"{"error_pages": {"502": "<h1>dead app %{request_id}</h1>", "503": "<h1>dead app %{request_id}</h1>"}}"#).await;
    assert_eq!(s, 200, "{text}");
    let got = plain(r.http, dead_host).await;
    let id = got.header("x-request-id").expect("id").to_string();
    assert_eq!(
        got.body,
        format!("<h1>dead app {id}</h1>"),
        "{}",
        got.status
    );
    // An app's page is for its members' answers only, and bounded.
    let (s, text) = put(r#"{"error_pages": {"404": "<h1>mine</h1>"}}"#).await;
    assert_eq!(s, 400, "{text}");
    assert!(text.starts_with("error_pages.404"), "{text}");
    let big: &'static str = Box::leak(
        format!(
            r#"{{"error_pages": {{"503": "{}"}}}}"#,
            "x".repeat(70 * 1024)
        )
        .into_boxed_str(),
    );
    let (s, text) = put(big).await;
    assert!(s == 400 || s == 413, "{s} {text}");

    // 3. A reload reads the pages again; a page too large refuses the reload
    // (naming its file) and the pages in force stay.
    std::fs::write(pages.join("404.html"), "<h1>Moved on</h1>").expect("404");
    r.signal("HUP");
    r.log_line("configuration reloaded").await;
    assert_eq!(
        plain(r.http, "nobody.example.com").await.body,
        "<h1>Moved on</h1>"
    );
    std::fs::write(pages.join("404.html"), vec![b'x'; 65 * 1024]).expect("404");
    r.signal("HUP");
    let refused = r.log_line("reload refused").await;
    assert!(refused.to_string().contains("404.html"), "{refused}");
    assert_eq!(
        plain(r.http, "nobody.example.com").await.body,
        "<h1>Moved on</h1>"
    );
}

#[tokio::test]
async fn the_required_hsts_policy_refuses_settings_that_break_it_and_testssl_sees_hsts() {
    let pki = Wildcard::new("hsts");
    let root = pki.dir.join("router");
    std::fs::create_dir_all(&root).expect("root");
    let token = root.join("admin.token");
    std::fs::write(&token, TOKEN).expect("token");
    let extra = format!(
        "{}admin:\n  token_file: {}\nhsts_required:\n  - domains: [\"*.example.com\"]\n    min_max_age: 1d\n    include_subdomains: required\n",
        pki.tls_section(),
        token.display()
    );
    let r = TestRouter::start_https(root, &extra).await;
    let b = Backend::start().await;
    r.drop_event("00.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_health(b.addr, "up").await;
    for (body, why) in [
        (r#"{"max_connections_per_client": 5}"#, "HSTS is required"),
        (
            r#"{"hsts": {"max_age": "1h", "include_subdomains": true}}"#,
            "max_age is at least 86400s",
        ),
        (
            r#"{"hsts": {"max_age": "365d"}}"#,
            "include_subdomains is required",
        ),
    ] {
        let (s, text) = put(&r, body).await;
        assert_eq!(s, 400, "{body}: {text}");
        assert!(
            text.starts_with("hsts: ") && text.contains("hsts_required[0]") && text.contains(why),
            "{body}: {text}"
        );
    }
    let (_, settings) = r
        .admin_call("GET", "/apps/myapp-demo/settings", "", Some(TOKEN))
        .await;
    assert!(
        settings.contains("\"own\": null") || settings.contains("\"own\":null"),
        "{settings}"
    );
    let (s, text) = put(
        &r,
        r#"{"hsts": {"max_age": "365d", "include_subdomains": true, "preload": true}}"#,
    )
    .await;
    assert_eq!(s, 200, "{text}");

    // testssl.sh (Debian's) reads the header as a browser would.
    let https = r.https.expect("https");
    let out = tokio::process::Command::new("testssl")
        .args([
            "--headers",
            "--quiet",
            "--color",
            "0",
            "--ip",
            "127.0.0.1",
            "--add-ca",
        ])
        .arg(&pki.ca_file)
        .arg(format!("https://{HOST}:{}/", https.port()))
        .output()
        .await
        .expect("testssl (apt-get install testssl.sh)");
    let report = String::from_utf8_lossy(&out.stdout);
    let line = report
        .lines()
        .find(|l| l.contains("Strict Transport Security"))
        .unwrap_or_else(|| panic!("no HSTS line from testssl: {report}"));
    assert!(line.contains("365 days"), "{line}");
    assert!(!line.contains("not offered"), "{line}");
    assert!(
        report.contains("includeSubDomains") && report.contains("preload"),
        "{report}"
    );
}

/// A body over the app's limit is answered 413 while the client is still
/// sending it; the router's close lingers (reads and drops the rest for up to
/// a second), so the client's writes meet no reset and it reads the answer and
/// a clean end, over plain HTTP and over TLS. Without it, curl failed once in
/// run 46 with "Send failure: Broken pipe" and no status (the test above, over
/// HTTPS).
#[tokio::test]
async fn a_client_still_sending_a_refused_body_reads_the_answer_and_a_clean_end() {
    let (r, _b, pki) = router().await;
    let (s, text) = put(
        &r,
        r#"{"max_request_body_bytes": 1000, "plain_http": "allow"}"#,
    )
    .await;
    assert_eq!(s, 200, "{text}");
    let plain = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    refused_while_sending("plain HTTP", plain).await;
    let ca = std::fs::read_to_string(&pki.ca_file).expect("CA");
    let config = e2e::tlsclient::client_config(&ca, &[b"http/1.1"]);
    let https = r.https.expect("HTTPS");
    let tls = e2e::tlsclient::connect(https, HOST, &config)
        .await
        .expect("TLS");
    refused_while_sending("HTTPS", tls).await;
}

/// Half a megabyte of a chunked body (more than the router reads before it
/// answers and gives up on the body), the 413 read, then 128 KiB more, then the
/// client's end: every write goes through and the end is clean (all of it
/// within what a lingering close drops, `LINGER_BYTES`).
async fn refused_while_sending<S>(over: &str, mut c: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!("POST /up HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: chunked\r\n\r\n");
    let chunk = format!("4000\r\n{}\r\n", "x".repeat(0x4000));
    c.write_all(head.as_bytes()).await.expect("head");
    for _ in 0..32 {
        c.write_all(chunk.as_bytes())
            .await
            .expect("a chunk before the answer");
    }
    c.flush().await.expect("flush");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = c.read(&mut buf).await.expect("the answer's head");
        assert!(
            n > 0,
            "{over}: closed before answering: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with("HTTP/1.1 413"), "{over}: {text}");
    for i in 0..8 {
        let wrote = async {
            c.write_all(chunk.as_bytes()).await?;
            c.flush().await
        };
        wrote.await.unwrap_or_else(|e| {
            panic!("{over}: write {i} after the answer met {e}: the close did not linger")
        });
    }
    let _ = c.shutdown().await;
    let mut rest = Vec::new();
    let end = c.read_to_end(&mut rest).await;
    assert!(
        end.is_ok(),
        "{over}: the connection was reset under the client ({end:?}): the close did not linger"
    );
}
