//! HTTP/3 end to end: a real HTTP/3 client (aioquic, from PyPI, in the
//! virtualenv `tests/run.sh` makes: `target/h3-venv`) through the router's QUIC
//! listener, against the same requests over h2 (curl, ALPN h2): routed apps, an
//! alias with its own certificate (SNI), an unknown host (404), a name the
//! connection's certificate does not cover (421), members in rotation and one
//! rotated out, a request
//! body, `Alt-Svc` on HTTPS over TCP, the per-source connection cap, and Retry.

use std::path::{Path, PathBuf};

use e2e::backend::Echo;
use e2e::pki::{Leaf, Wildcard};
use e2e::{Backend, TestRouter, events};

const APP_HOST: &str = "ha-myapp-demo.example.com";
const ALIAS: &str = "www.shop.test";

/// The virtualenv's interpreter, where aioquic is.
fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/h3-venv/bin/python3");
    assert!(
        venv.exists(),
        "{} is missing: tests/run.sh makes it (python3 -m venv target/h3-venv && target/h3-venv/bin/pip install aioquic)",
        venv.display()
    );
    venv
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("h3/client.py")
}

/// One HTTP/3 connection with `sni`, the requests in turn: client.py's JSON.
async fn h3(
    addr: std::net::SocketAddr,
    sni: &str,
    ca: &Path,
    requests: serde_json::Value,
) -> serde_json::Value {
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new(python())
            .arg(script())
            .args(["get", &addr.to_string(), sni])
            .arg(ca)
            .arg(requests.to_string())
            .output(),
    )
    .await
    .expect("client.py ends")
    .expect("python3");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client.py: {e}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn get(authority: &str, path: &str) -> serde_json::Value {
    serde_json::json!({"method": "GET", "authority": authority, "path": path})
}

/// The same request over h2 (curl, ALPN h2): status and body.
async fn h2(https: std::net::SocketAddr, host: &str, path: &str, ca: &Path) -> (u16, String) {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "--http2", "-w", "\n%{http_code} %{http_version}"])
        .arg("--cacert")
        .arg(ca)
        .args(["--resolve", &format!("{host}:{}:127.0.0.1", https.port())])
        .arg(format!("https://{host}:{}{path}", https.port()))
        .output()
        .await
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, tail) = text.rsplit_once('\n').expect("curl's status line");
    let (code, version) = tail.split_once(' ').expect("code and version");
    assert_eq!(version, "2", "curl spoke h2");
    (code.parse().expect("status"), body.to_string())
}

fn status(v: &serde_json::Value) -> u64 {
    v["status"]
        .as_u64()
        .unwrap_or_else(|| panic!("no status: {v}"))
}

fn echo(v: &serde_json::Value) -> Echo {
    Echo::parse(v["body"].as_str().unwrap_or_default().as_bytes())
}

fn header<'a>(e: &'a Echo, name: &str) -> Option<&'a str> {
    e.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A router with HTTPS and HTTP/3, `myapp` on two members, the alias with its own
/// certificate.
async fn router(pki: &Wildcard, alias_leaf: &Leaf, extra: &str) -> (TestRouter, Backend, Backend) {
    let (b1, b2) = (Backend::start().await, Backend::start().await);
    let r = TestRouter::start_http3(
        pki.dir.join("router"),
        &format!("{}{extra}", pki.tls_section()),
    )
    .await;
    let mut all = vec![events::add_lb("myapp", "demo", b1.addr)];
    all.extend(events::app_with_alias_cert(
        "myapp", "demo", b2.addr, ALIAS, alias_leaf,
    ));
    for (i, e) in all.iter().enumerate() {
        r.drop_event(&format!("{i:02}.yaml"), e);
    }
    r.wait_spool_empty().await;
    r.wait_health(b1.addr, "up").await;
    r.wait_health(b2.addr, "up").await;
    (r, b1, b2)
}

#[tokio::test]
async fn http3_answers_as_h2_does_for_apps_aliases_unknown_hosts_and_rotation() {
    let pki = Wildcard::new("h3");
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    // Round robin: with the default (two random choices) four requests in turn all
    // reach one member one time in eight (found in CI).
    let (r, b1, b2) = router(&pki, &alias_leaf, "upstream:\n  balance: round_robin\n").await;
    let (udp, https) = (r.http3.expect("http3 listener"), r.https.expect("https"));
    let ca = &pki.ca_file;

    // The app, four times on one connection: both members answer (round robin),
    // with the headers a member gets over h2.
    let v = h3(
        udp,
        APP_HOST,
        ca,
        serde_json::json!([
            get(APP_HOST, "/a?x=1"),
            get(APP_HOST, "/b"),
            get(APP_HOST, "/c"),
            get(APP_HOST, "/d")
        ]),
    )
    .await;
    let answers = v.as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(answers.len(), 4, "{v}");
    let mut ports = std::collections::BTreeSet::new();
    for a in answers {
        assert_eq!(status(a), 200, "{a}");
        let e = echo(a);
        ports.insert(e.port);
        assert_eq!(header(&e, "x-forwarded-proto"), Some("https"), "{e:?}");
        assert_eq!(header(&e, "host"), Some(APP_HOST), "Host from :authority");
        assert_eq!(header(&e, "x-forwarded-for"), Some("127.0.0.1"));
    }
    assert_eq!(echo(&answers[0]).target, "/a?x=1");
    // On a failure, what else could have steered every request to one member (a
    // retry on the other, a health change, an upstream error) is shown.
    let why = if ports.len() == 2 {
        String::new()
    } else {
        let (_, text) = r.admin_get("/metrics").await;
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| {
                ["retr", "health", "upstream_error", "eject"]
                    .iter()
                    .any(|k| l.contains(k))
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        ports,
        [b1.addr.port(), b2.addr.port()].into_iter().collect(),
        "both members in rotation; the router's counts:\n{why}"
    );
    let (code, body) = h2(https, APP_HOST, "/a?x=1", ca).await;
    assert_eq!(code, 200);
    let over_h2 = Echo::parse(body.as_bytes());
    assert_eq!(over_h2.target, echo(&answers[0]).target);
    assert_eq!(header(&over_h2, "x-forwarded-proto"), Some("https"));

    // The alias, SNI = the alias: its own certificate verifies (client.py checks
    // the chain and the name against the CA), and it routes to the app.
    let v = h3(udp, ALIAS, ca, serde_json::json!([get(ALIAS, "/alias")])).await;
    assert_eq!(status(&v[0]), 200, "{v}");
    assert_eq!(header(&echo(&v[0]), "host"), Some(ALIAS));
    assert_eq!(h2(https, ALIAS, "/alias", ca).await.0, 200);

    // An unknown host under the wildcard: 404 over both.
    let unknown = "nothing-here.example.com";
    let v = h3(udp, unknown, ca, serde_json::json!([get(unknown, "/")])).await;
    assert_eq!(status(&v[0]), 404, "{v}");
    assert_eq!(h2(https, unknown, "/", ca).await.0, 404);

    // The alias asked for on a connection that presented the wildcard: 421, as h2.
    let v = h3(udp, APP_HOST, ca, serde_json::json!([get(ALIAS, "/")])).await;
    assert_eq!(status(&v[0]), 421, "{v}");

    // A request body reaches the member whole: one that streams, and one small
    // enough to arrive with its head (the router's first look at the stream
    // finds it, then the stream's end).
    let body = "x".repeat(100_000);
    let v = h3(
        udp,
        APP_HOST,
        ca,
        serde_json::json!([
            {"method": "POST", "authority": APP_HOST, "path": "/up", "body": body},
            {"method": "POST", "authority": APP_HOST, "path": "/small", "body": "hello"}
        ]),
    )
    .await;
    assert_eq!(status(&v[0]), 200, "{v}");
    assert_eq!(echo(&v[0]).body_len, 100_000);
    assert_eq!(status(&v[1]), 200, "{v}");
    assert_eq!(echo(&v[1]).body_len, 5, "{v}");

    // A member rotated out by the operator gets no HTTP/3 request either.
    let (code, text) = r
        .admin_post(&format!("/backends/{}/rotate-out", b1.addr))
        .await;
    assert_eq!(code, 200, "{text}");
    let v = h3(
        udp,
        APP_HOST,
        ca,
        serde_json::json!([
            get(APP_HOST, "/1"),
            get(APP_HOST, "/2"),
            get(APP_HOST, "/3")
        ]),
    )
    .await;
    for a in v.as_array().unwrap_or_else(|| panic!("{v}")) {
        assert_eq!(status(a), 200, "{a}");
        assert_eq!(echo(a).port, b2.addr.port(), "only the member in rotation");
    }

    // Counted under their protocol.
    let h3_requests = r
        .metric("router_http_requests_by_protocol_total{protocol=\"h3\"}")
        .await
        .unwrap_or(0.0);
    assert_eq!(
        h3_requests, 12.0,
        "4 to the app, the alias, the unknown host, the 421, the two uploads, 3 after the rotation"
    );
    assert!(
        r.metric("router_http3_handshakes_total{result=\"ok\"}")
            .await
            >= Some(5.0),
        "five HTTP/3 connections"
    );
}

#[tokio::test]
async fn each_request_stream_is_held_to_the_rules_and_the_connection_goes_on() {
    let pki = Wildcard::new("h3-rules");
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, _b1, _b2) = router(&pki, &alias_leaf, "limits:\n  max_header_bytes: 8192\n").await;
    let (udp, ca) = (r.http3.expect("http3 listener"), &pki.ca_file);
    let post = |extra: serde_json::Value| {
        let mut r = serde_json::json!({"method": "POST", "authority": APP_HOST, "path": "/p", "body": "hello"});
        for (k, v) in extra.as_object().expect("an object") {
            r[k] = v.clone();
        }
        r
    };
    // One connection: a stream the router refuses ends that stream only.
    let big = "v".repeat(9000);
    let v = h3(
        udp,
        APP_HOST,
        ca,
        serde_json::json!([
            get(APP_HOST, "/first"),
            {"method": "GET", "authority": APP_HOST, "path": "/", "headers": [["X-Upper", "1"]]},
            {"method": "GET", "authority": APP_HOST, "path": "/", "headers": [["connection", "close"]]},
            {"method": "GET", "authority": APP_HOST, "path": "/", "headers": [["x-big", big]]},
            post(serde_json::json!({"content_length": 3})),
            post(serde_json::json!({"pieces": 5, "trailers": [["x-checksum", "abc"]]})),
            {"method": "GET", "authority": APP_HOST, "path": "/", "headers": [["content-length", "+0"]]},
            {"method": "GET", "authority": APP_HOST, "path": "/", "headers": [["content-length", "0"], ["content-length", "1"]]},
            get(APP_HOST, "/last")
        ]),
    )
    .await;
    let a = v.as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(a.len(), 9, "{v}");
    assert_eq!(status(&a[0]), 200, "{v}");
    // H3_MESSAGE_ERROR (RFC 9114 §4.1.2): an uppercase name, a connection-specific field.
    assert_eq!(a[1]["reset"], 0x10e, "uppercase field name: {}", a[1]);
    assert_eq!(a[2]["reset"], 0x10e, "connection-specific field: {}", a[2]);
    assert_eq!(
        status(&a[3]),
        431,
        "a head past limits.max_header_bytes: {}",
        a[3]
    );
    // A body longer than its Content-Length never reaches the member as sent:
    // the member would read the rest as another request.
    assert_eq!(
        status(&a[4]),
        400,
        "a body past its Content-Length: {}",
        a[4]
    );
    assert_eq!(
        status(&a[5]),
        200,
        "a body in five DATA frames, then trailers: {}",
        a[5]
    );
    assert_eq!(echo(&a[5]).body_len, 5, "{}", a[5]);
    // Content-Length by the one rule of the HTTP/1.1 and h2 paths: a sign,
    // or values that differ, make the request malformed.
    assert_eq!(a[6]["reset"], 0x10e, "a signed content-length: {}", a[6]);
    assert_eq!(a[7]["reset"], 0x10e, "differing content-lengths: {}", a[7]);
    assert_eq!(status(&a[8]), 200, "the connection still serves: {v}");
}

/// The response head of a GET to the app over h2 (curl), lower-cased.
async fn h2_head(r: &TestRouter, ca: &Path) -> String {
    let port = r.https.expect("https").port();
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-D", "-", "--http2", "--cacert"])
        .arg(ca)
        .args(["--resolve", &format!("{APP_HOST}:{port}:127.0.0.1")])
        .arg(format!("https://{APP_HOST}:{port}/"))
        .output()
        .await
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).to_lowercase()
}

#[tokio::test]
async fn https_over_tcp_announces_http3_with_alt_svc_unless_turned_off() {
    let pki = Wildcard::new("h3-altsvc");
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, _b1, _b2) = router(&pki, &alias_leaf, "").await;
    let port = r.http3.expect("http3").port();
    let head = h2_head(&r, &pki.ca_file).await;
    assert!(
        head.contains(&format!("alt-svc: h3=\":{port}\"; ma=86400")),
        "{head}"
    );
    // Plain HTTP does not announce it.
    let plain = e2e::raw::exchange(
        r.http,
        format!("GET / HTTP/1.1\r\nHost: {APP_HOST}\r\nConnection: close\r\n\r\n").as_bytes(),
        std::time::Duration::from_secs(5),
    )
    .await;
    let plain = String::from_utf8_lossy(&plain).to_lowercase();
    assert!(plain.starts_with("http/1.1 200"), "{plain}");
    assert!(!plain.contains("alt-svc"), "{plain}");
    r.stop().await;

    let pki = Wildcard::new("h3-altsvc-off");
    let (r, _b1, _b2) = router(&pki, &alias_leaf, "http3:\n  alt_svc: false\n").await;
    let head = h2_head(&r, &pki.ca_file).await;
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(!head.contains("alt-svc"), "{head}");
}

#[tokio::test]
async fn a_source_at_its_share_is_refused_and_retry_validates_addresses() {
    let pki = Wildcard::new("h3-bounds");
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    // Every handshake proves its address first (Retry), and one source may hold
    // one connection.
    let extra = "http3:\n  retry_above_handshakes: 0\nlimits:\n  max_connections_per_source: 1\n";
    let (r, _b1, _b2) = router(&pki, &alias_leaf, extra).await;
    let udp = r.http3.expect("http3");
    let one_get = async || {
        h3(
            udp,
            APP_HOST,
            &pki.ca_file,
            serde_json::json!([get(APP_HOST, "/")]),
        )
        .await
    };
    let v = one_get().await;
    assert_eq!(status(&v[0]), 200, "served after a Retry: {v}");
    assert!(
        r.metric("router_http3_handshakes_total{result=\"retry\"}")
            .await
            >= Some(1.0),
        "the client was asked to validate its address"
    );
    // Hold one connection open (a GET on it every 200 ms), then a second one from
    // the same address is refused.
    let holder = tokio::process::Command::new(python())
        .arg(script())
        .args(["loop", &udp.to_string(), APP_HOST])
        .arg(&pki.ca_file)
        .args([APP_HOST, "/", "200", "30"])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("client.py loop");
    e2e::eventually(
        "one HTTP/3 connection open",
        std::time::Duration::from_secs(10),
        async || r.metric("router_open_connections{listener=\"h3\"}").await == Some(1.0),
    )
    .await;
    let v = one_get().await;
    assert!(v["error"].is_string(), "refused: {v}");
    assert!(
        r.metric("router_connections_refused_total{listener=\"h3\",reason=\"source_limit\"}")
            .await
            >= Some(1.0)
    );
    drop(holder);
}
