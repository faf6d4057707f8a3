//! HTTPS through real TLS clients (rustls, curl, openssl s_client) with rcgen
//! certificates and the fixtures' certificates.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use e2e::pki::{Ca, Leaf, write_leaf};
use e2e::router::TestRouter;
use e2e::tlsclient::{client_config, connect, der_of, get, http1, peer_leaf, run};
use e2e::{Backend, Echo, events};

const HA: &str = "ha-myapp-demo.example.com";
const ALIAS: &str = "www.shop.test";

/// A CA, the `*.example.com` default certificate written to files, and the
/// configuration that serves it.
struct Pki {
    ca: Ca,
    wildcard: Leaf,
    dir: PathBuf,
    ca_file: PathBuf,
}

impl Pki {
    fn new() -> Pki {
        let dir = e2e::tempdir("pki");
        let ca = Ca::new("Router Test CA");
        let wildcard = ca.leaf(&["*.example.com"]);
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &ca.pem).expect("write CA");
        Pki {
            ca,
            wildcard,
            dir,
            ca_file,
        }
    }

    fn tls_section(&self, extra: &str) -> String {
        let (c, k) = write_leaf(&self.dir, "wildcard", &self.wildcard);
        format!(
            "tls:\n  default_cert: {}\n  default_key: {}\n{extra}",
            c.display(),
            k.display()
        )
    }
}

/// The events for one app with `backend` as its member and the alias with
/// `alias_leaf` as its certificate.
fn alias_events(backend: &Backend, alias_leaf: &Leaf) -> [String; 3] {
    events::app_with_alias_cert("myapp", "demo", backend.addr, ALIAS, alias_leaf)
}

/// A router with HTTPS, one app with a backend, and the alias `www.shop.test` with
/// `alias_leaf` as its certificate.
async fn router_with_alias(pki: &Pki, alias_leaf: &Leaf, extra: &str) -> (TestRouter, Backend) {
    let backend = Backend::start().await;
    let r = TestRouter::start_https(e2e::tempdir("tls"), &pki.tls_section(extra)).await;
    for (i, e) in alias_events(&backend, alias_leaf).iter().enumerate() {
        r.drop_event(&format!("0{i}.yaml"), e);
    }
    r.wait_spool_empty().await;
    r.wait_route(ALIAS).await;
    e2e::eventually(
        "alias certificate loaded",
        Duration::from_secs(5),
        async || r.metric("router_tls_certificates").await == Some(1.0),
    )
    .await;
    assert_no_key_kept(&r.spool.join("done"), &alias_leaf.key_pem);
    (r, backend)
}

/// The spool's processed copies (`done/`) keep the events, not the private key
/// they carried: a key rests only in the router's own 0600 state.
fn assert_no_key_kept(done: &Path, key_pem: &str) {
    let secret: Vec<&str> = key_pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 16)
        .collect();
    assert!(!secret.is_empty());
    let mut ssl = 0;
    for e in std::fs::read_dir(done).expect("done/") {
        let text = std::fs::read_to_string(e.expect("entry").path()).expect("read");
        for line in &secret {
            assert!(
                !text.contains(line),
                "a private key stayed in done/: {text}"
            );
        }
        ssl += usize::from(text.contains("add_ssl") && text.contains("[redacted]"));
    }
    assert_eq!(ssl, 1, "the add_ssl event is kept, redacted");
}

/// `openssl s_client -servername NAME`, verified against `ca`: its output, once
/// it says the verification passed.
async fn s_client_verified(addr: &str, name: &str, ca: &str) -> String {
    let args = [
        "s_client",
        "-connect",
        addr,
        "-servername",
        name,
        "-CAfile",
        ca,
    ];
    let (_, out) = run("openssl", &[&args[..], &["-verify_return_error"]].concat()).await;
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
    out
}

/// An h2 connection made for `name` (SNI), trusting `ca_pem`.
async fn h2_for(
    addr: std::net::SocketAddr,
    name: &str,
    ca_pem: &str,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>> {
    let config = client_config(ca_pem, &[b"h2"]);
    let s = connect(addr, name, &config).await.expect("h2 handshake");
    let (h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(s),
    )
    .await
    .expect("h2");
    tokio::spawn(conn);
    h2
}

fn https(r: &TestRouter) -> std::net::SocketAddr {
    r.https.expect("https listener")
}

#[tokio::test]
async fn sni_picks_the_alias_certificate_the_wildcard_or_the_default() {
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, _b) = router_with_alias(&pki, &alias_leaf, "").await;
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);

    let s = connect(https(&r), ALIAS, &config)
        .await
        .expect("alias handshake");
    assert_eq!(
        peer_leaf(&s),
        der_of(&alias_leaf.cert_pem),
        "the alias's own"
    );
    let s = connect(https(&r), HA, &config).await.expect("HA handshake");
    assert_eq!(
        peer_leaf(&s),
        der_of(&pki.wildcard.cert_pem),
        "the wildcard"
    );
    // Upper case SNI is the same name.
    let s = connect(https(&r), "WWW.Shop.Test", &config)
        .await
        .expect("mixed case");
    assert_eq!(peer_leaf(&s), der_of(&alias_leaf.cert_pem));

    // No SNI at all: openssl s_client -noservername gets the default.
    let addr = https(&r).to_string();
    let (_, out) = run(
        "openssl",
        &["s_client", "-connect", &addr, "-noservername", "-showcerts"],
    )
    .await;
    assert!(
        out.contains("CN = *.example.com") || out.contains("CN=*.example.com"),
        "{out}"
    );
    // With -servername: the alias, verified against our CA.
    let ca = pki.ca_file.display().to_string();
    let out = s_client_verified(&addr, ALIAS, &ca).await;
    assert!(
        out.contains(&format!("CN = {ALIAS}")) || out.contains(&format!("CN={ALIAS}")),
        "{out}"
    );

    assert!(
        r.metric_sum("router_tls_handshakes_total", &[("kind", "full")])
            .await
            >= 4.0
    );
    let expiry = r
        .metric(&format!(
            "router_tls_certificate_expiry_timestamp_seconds{{alias=\"{ALIAS}\"}}"
        ))
        .await
        .expect("expiry gauge");
    assert!(expiry > 1.7e9, "{expiry}");
}

#[tokio::test]
async fn curl_gets_h2_and_http1_by_alpn_with_forwarded_proto_https() {
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, _b) = router_with_alias(&pki, &alias_leaf, "").await;
    let port = https(&r).port();
    let resolve = format!("{ALIAS}:{port}:127.0.0.1");
    let url = format!("https://{ALIAS}:{port}/hello?x=1");
    let ca = pki.ca_file.display().to_string();
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let (ok, out) = run(
            "curl",
            &[
                "-sS",
                flag,
                "--cacert",
                &ca,
                "--resolve",
                &resolve,
                "-w",
                "\n%{http_version}",
                &url,
            ],
        )
        .await;
        assert!(ok, "{out}");
        let (body, got) = out.rsplit_once('\n').expect("version line");
        assert_eq!(got, version, "{flag}");
        let echo = Echo::parse(body.as_bytes());
        assert_eq!(echo.target, "/hello?x=1");
        assert_eq!(echo.header("x-forwarded-proto"), Some("https"));
        assert_eq!(
            echo.header("x-forwarded-port"),
            Some(port.to_string().as_str())
        );
        assert_eq!(
            echo.header("host"),
            Some(format!("{ALIAS}:{port}").as_str())
        );
    }
    // A plain HTTP request on the TLS port is a handshake failure, counted.
    let _ = e2e::raw::exchange(
        https(&r),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    e2e::eventually("failure counted", Duration::from_secs(5), async || {
        r.metric("router_tls_handshake_failures_total{reason=\"protocol\"}")
            .await
            >= Some(1.0)
    })
    .await;
}

#[tokio::test]
async fn certificates_change_live_without_a_gap_and_open_connections_stay() {
    let pki = Pki::new();
    let first = pki.ca.leaf(&[ALIAS]);
    let (r, _b) = router_with_alias(&pki, &first, "  replace_grace: 2s\n").await;
    let r = Arc::new(r);
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);
    // A connection opened with the first certificate.
    let open = connect(https(&r), ALIAS, &config).await.expect("handshake");
    assert_eq!(peer_leaf(&open), der_of(&first.cert_pem));
    let mut open = http1(open).await;
    assert_eq!(get(&mut open, ALIAS, "/").await.0, 200);

    // Handshakes in a loop while the broker replaces the certificate.
    let second = pki.ca.leaf(&[ALIAS]);
    let watcher = {
        let (r, config) = (r.clone(), config.clone());
        let (a, b) = (der_of(&first.cert_pem), der_of(&second.cert_pem));
        tokio::spawn(async move {
            let mut seen_second = 0;
            for _ in 0..400 {
                let s = connect(https(&r), ALIAS, &config)
                    .await
                    .expect("every handshake succeeds");
                let leaf = peer_leaf(&s);
                assert!(
                    leaf == a || leaf == b,
                    "never the default (wildcard) certificate"
                );
                if leaf == b {
                    seen_second += 1;
                    if seen_second > 5 {
                        return true;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            false
        })
    };
    r.drop_event("04.yaml", &events::remove_ssl("myapp", "demo", ALIAS));
    // The removal is applied (the app lists no certificate) and yet the alias is
    // still served its own certificate: the replacement grace, exercised.
    e2e::eventually("remove_ssl applied", Duration::from_secs(10), async || {
        let (_, routes) = r.admin_get("/routes").await;
        let doc: serde_json::Value = serde_json::from_str(&routes).expect("json");
        doc["apps"][0]["certificates"]
            .as_array()
            .is_some_and(Vec::is_empty)
    })
    .await;
    let during = connect(https(&r), ALIAS, &config)
        .await
        .expect("served during the grace");
    assert_eq!(
        peer_leaf(&during),
        der_of(&first.cert_pem),
        "the removed certificate is kept for replace_grace"
    );
    r.drop_event(
        "05.yaml",
        &events::add_ssl(
            "myapp",
            "demo",
            ALIAS,
            &second.cert_pem,
            &second.key_pem,
            None,
        ),
    );
    assert!(
        watcher.await.expect("join"),
        "the new certificate took over"
    );
    // The old connection still works.
    assert_eq!(get(&mut open, ALIAS, "/").await.0, 200);

    // Removal alone: after the grace, the default certificate (which does not cover
    // the alias: a strict client refuses it).
    r.drop_event("06.yaml", &events::remove_ssl("myapp", "demo", ALIAS));
    e2e::eventually("certificate gone", Duration::from_secs(10), async || {
        r.metric("router_tls_certificates").await == Some(0.0)
    })
    .await;
    assert!(
        connect(https(&r), ALIAS, &config).await.is_err(),
        "wildcard does not cover it"
    );
    assert_eq!(get(&mut open, ALIAS, "/").await.0, 200, "still open");
}

/// Writes a fixture's body with the app renamed to ours.
fn fixture(name: &str) -> String {
    std::fs::read_to_string(e2e::fixtures().join(name)).expect("fixture")
}

#[tokio::test]
async fn fixture_certificates_with_a_pass_phrase_and_bad_keys_keep_the_previous() {
    let pki = Pki::new();
    let backend = Backend::start().await;
    let r = TestRouter::start_https(e2e::tempdir("tls"), &pki.tls_section("")).await;
    r.drop_event("00.yaml", &events::add_lb("myapp", "demo", backend.addr));
    for f in [
        "01-create_application.yaml",
        "09-add_alias-secure.yaml",
        "10-add_ssl-pass_phrase.yaml",
    ] {
        r.drop_event(f, &fixture(f));
    }
    r.wait_spool_empty().await;
    e2e::eventually("fixture 10 loaded", Duration::from_secs(5), async || {
        r.metric("router_tls_certificates").await == Some(1.0)
    })
    .await;
    let test_ca = e2e::fixtures().join("test-ca.crt").display().to_string();
    let addr = https(&r).to_string();
    let verify = async |name: &str| {
        run(
            "openssl",
            &[
                "s_client",
                "-connect",
                &addr,
                "-servername",
                name,
                "-CAfile",
                &test_ca,
                "-verify_return_error",
            ],
        )
        .await
    };
    let (_, out) = verify("secure.example.net").await;
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");

    // Each bad key is rejected with its reason; the fixture's certificate stays.
    let good = fixture("10-add_ssl-pass_phrase.yaml");
    let other = pki.ca.leaf(&["secure.example.net"]);
    let dsa = dsa_key_pem(&pki.dir).await;
    let cases = [
        (
            "wrong_pass_phrase",
            good.replace("correct-horse-battery", "battery-staple"),
        ),
        (
            "key_mismatch",
            events::add_ssl(
                "myapp",
                "demo",
                "secure.example.net",
                &other.cert_pem,
                &pki.wildcard.key_pem,
                None,
            ),
        ),
        (
            "unsupported_key",
            events::add_ssl(
                "myapp",
                "demo",
                "secure.example.net",
                &other.cert_pem,
                &dsa,
                None,
            ),
        ),
    ];
    for (i, (reason, body)) in cases.iter().enumerate() {
        r.drop_event(&format!("2{i}.yaml"), body);
        let sample = format!("router_tls_certificate_errors_total{{reason=\"{reason}\"}}");
        e2e::eventually(reason, Duration::from_secs(5), async || {
            r.metric(&sample).await == Some(1.0)
        })
        .await;
        let (_, out) = verify("secure.example.net").await;
        assert!(
            out.contains("Verify return code: 0 (ok)"),
            "{reason}: previous kept: {out}"
        );
    }
}

async fn dsa_key_pem(dir: &Path) -> String {
    let params = dir.join("dsa.params");
    let key = dir.join("dsa.key");
    let p = params.display().to_string();
    let k = key.display().to_string();
    assert!(run("openssl", &["dsaparam", "-out", &p, "2048"]).await.0);
    assert!(run("openssl", &["gendsa", "-out", &k, &p]).await.0);
    let (ok, pem) = run("openssl", &["dsa", "-in", &k]).await;
    assert!(ok, "{pem}");
    pem.lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn sessions_resume_on_the_other_router_with_the_shared_ticket_key() {
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let key_file = pki.dir.join("ticket.key");
    std::fs::write(&key_file, [42u8; 48]).expect("ticket key");
    // Two router processes (the binary), as the two hosts of the pair.
    let (a, _ba) = router_process(&pki, &alias_leaf, &key_file).await;
    let (b, _bb) = router_process(&pki, &alias_leaf, &key_file).await;
    let (a_https, b_https) = (a.https.expect("A https"), b.https.expect("B https"));

    // TLS 1.3, rustls client: a ticket from A resumes on B.
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);
    let s = connect(a_https, ALIAS, &config).await.expect("A");
    let mut s = http1(s).await;
    assert_eq!(
        get(&mut s, ALIAS, "/").await.0,
        200,
        "reads the tickets too"
    );
    let resumed = connect(b_https, ALIAS, &config).await.expect("B");
    assert_eq!(
        resumed.get_ref().1.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed),
        "resumed on the other router"
    );
    // Counted once B has read the client's Finished, which may come after the
    // client considers the handshake done.
    e2e::eventually(
        "B counted the resumption",
        Duration::from_secs(5),
        async || {
            b.metric_sum("router_tls_handshakes_total", &[("kind", "resumed")])
                .await
                == 1.0
        },
    )
    .await;

    // TLS 1.2, openssl s_client: the session saved from A is reused on B.
    let sess = pki.dir.join("sess.pem").display().to_string();
    let ca = pki.ca_file.display().to_string();
    let (a_addr, b_addr) = (a_https.to_string(), b_https.to_string());
    let out = s_client_tls12(&a_addr, &ca, "-sess_out", &sess).await;
    assert!(out.contains("New, TLSv1.2"), "{out}");
    let out = s_client_tls12(&b_addr, &ca, "-sess_in", &sess).await;
    assert!(out.contains("Reused, TLSv1.2"), "{out}");

    // A router with another secret cannot resume them.
    let other_key = pki.dir.join("other.key");
    std::fs::write(&other_key, [7u8; 48]).expect("key");
    let (c, _bc) = router_with_alias(
        &pki,
        &alias_leaf,
        &format!("  session_ticket_key_file: {}\n", other_key.display()),
    )
    .await;
    let out = s_client_tls12(&https(&c).to_string(), &ca, "-sess_in", &sess).await;
    assert!(out.contains("New, TLSv1.2"), "{out}");
}

/// The `router` binary with HTTPS, the shared ticket key, one app with a backend
/// and the alias with its certificate (events in its spool before it starts).
async fn router_process(
    pki: &Pki,
    alias_leaf: &Leaf,
    ticket_key: &Path,
) -> (e2e::process::RouterProcess, Backend) {
    let backend = Backend::start().await;
    let root = e2e::tempdir("tls-process");
    let spool = root.join("spool");
    std::fs::create_dir_all(&spool).expect("spool");
    let events = alias_events(&backend, alias_leaf);
    for (i, e) in events.iter().enumerate() {
        std::fs::write(spool.join(format!("0{i}.yaml")), e).expect("event");
    }
    let config = root.join("router.yaml");
    std::fs::write(
        &config,
        format!(
            "cloud_domain: example.com\nstate_dir: {root}/state\n\
             listen:\n  http: 127.0.0.1:0\n  https: 127.0.0.1:0\n  admin: 127.0.0.1:0\n\
             {tls}  session_ticket_key_file: {key}\n\
             spi:\n  source: spool\n  spool:\n    path: {spool}\n    interval: 20ms\n\
             health:\n  checks: false\naccess_log:\n  format: json\n",
            root = root.display(),
            tls = pki.tls_section(""),
            key = ticket_key.display(),
            spool = spool.display(),
        ),
    )
    .expect("config");
    let p = e2e::process::RouterProcess::start(&config).await;
    e2e::eventually(
        "alias certificate loaded",
        Duration::from_secs(10),
        async || p.metric("router_tls_certificates").await == Some(1.0),
    )
    .await;
    (p, backend)
}

/// `openssl s_client -tls1_2` to the alias, saving (`-sess_out`) or offering
/// (`-sess_in`) a session.
async fn s_client_tls12(addr: &str, ca: &str, sess_flag: &str, sess: &str) -> String {
    let args = [
        "s_client",
        "-tls1_2",
        "-connect",
        addr,
        "-servername",
        ALIAS,
        "-CAfile",
        ca,
        sess_flag,
        sess,
    ];
    run("openssl", &args).await.1
}

#[tokio::test]
async fn websocket_over_tls() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, _b) = router_with_alias(&pki, &alias_leaf, "").await;
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);
    let stream = connect(https(&r), ALIAS, &config).await.expect("handshake");
    let (mut ws, resp) = tokio_tungstenite::client_async(format!("wss://{ALIAS}/chat"), stream)
        .await
        .expect("upgrade over TLS");
    assert_eq!(resp.status(), 101);
    ws.send(Message::text("over tls")).await.expect("send");
    let back = ws.next().await.expect("message").expect("ok");
    assert_eq!(back.into_text().expect("text").as_str(), "over tls");
}

#[tokio::test]
async fn re_encrypts_to_tls_members_with_sni_and_verification() {
    let pki = Pki::new();
    // The gear's certificate names the app's host, signed by our CA.
    let gear_leaf = pki.ca.leaf(&[HA, "myapp-demo.example.com"]);
    let (gear, snis) = Backend::start_tls(&gear_leaf).await;
    let ca = pki.ca_file.display();
    let extra = format!("upstream:\n  tls:\n    ca_file: {ca}\nhealth:\n  checks: false\n");
    let r = TestRouter::start(&extra).await;
    r.drop_event("01.yaml", &events::add_tls_lb("myapp", "demo", gear.addr));
    r.wait_member(gear.addr).await;
    let (status, body) = r.get(HA, "/secure").await;
    assert_eq!(status, 200, "{body:?}");
    assert_eq!(Echo::parse(&body).target, "/secure");
    assert_eq!(
        snis.lock().expect("snis").as_slice(),
        [HA],
        "SNI is the request's host"
    );
    // Kept alive for the same host.
    assert_eq!(r.get(HA, "/again").await.0, 200);
    assert_eq!(
        r.metric("router_upstream_connections_opened_total").await,
        Some(1.0)
    );

    // A gear whose certificate our CA did not sign: refused (502), counted.
    let rogue_ca = Ca::new("Rogue CA");
    let (rogue, _) = Backend::start_tls(&rogue_ca.leaf(&[HA])).await;
    let r2 = TestRouter::start(&extra).await;
    r2.drop_event("01.yaml", &events::add_tls_lb("myapp", "demo", rogue.addr));
    r2.wait_member(rogue.addr).await;
    assert_eq!(r2.get(HA, "/").await.0, 502);
    assert_eq!(
        r2.metric("router_upstream_errors_total{kind=\"tls\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(rogue.proxied(), 0);
    // Verification off (explicit): encrypted, not authenticated.
    let r3 =
        TestRouter::start("upstream:\n  tls:\n    verify: false\nhealth:\n  checks: false\n").await;
    r3.drop_event("01.yaml", &events::add_tls_lb("myapp", "demo", rogue.addr));
    r3.wait_member(rogue.addr).await;
    assert_eq!(r3.get(HA, "/").await.0, 200);
}

#[tokio::test]
async fn plain_http_redirects_to_https_for_hosts_with_a_certificate() {
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, _b) = router_with_alias(&pki, &alias_leaf, "  redirect_http: true\n").await;
    // An alias without a certificate is served over plain HTTP as before.
    r.drop_event(
        "09.yaml",
        &events::add_alias("myapp", "demo", "plain.shop.test"),
    );
    r.wait_route("plain.shop.test").await;
    let port = https(&r).port();

    let ask = async |method: &str, host: &str| {
        let req = format!(
            "{method} /a/b?c=d HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let raw = e2e::raw::exchange(r.http, req.as_bytes(), Duration::from_secs(5)).await;
        String::from_utf8_lossy(&raw).into_owned()
    };
    let get = ask("GET", ALIAS).await;
    assert!(get.starts_with("HTTP/1.1 301"), "{get}");
    assert!(
        get.to_ascii_lowercase()
            .contains(&format!("location: https://{ALIAS}:{port}/a/b?c=d")),
        "{get}"
    );
    let post = ask("POST", ALIAS).await;
    assert!(post.starts_with("HTTP/1.1 308"), "{post}");
    // The HA name is covered by the wildcard default certificate.
    assert!(ask("GET", HA).await.starts_with("HTTP/1.1 301"));
    let plain = ask("GET", "plain.shop.test").await;
    assert!(plain.starts_with("HTTP/1.1 200"), "{plain}");
}

/// Without a default certificate, a name we hold no certificate for fails its
/// handshake and is counted as `no_certificate` (decided from the ClientHello's
/// name, not from an error text); an alias with its own certificate still works.
#[tokio::test]
async fn a_name_without_a_certificate_is_counted_as_no_certificate() {
    let pki = Pki::new();
    let backend = Backend::start().await;
    let leaf = pki.ca.leaf(&[ALIAS]);
    let r = TestRouter::start_https(e2e::tempdir("tls-nocert"), "").await;
    for (i, e) in alias_events(&backend, &leaf).iter().enumerate() {
        r.drop_event(&format!("{i:02}.yaml"), e);
    }
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);
    e2e::eventually("alias served", Duration::from_secs(10), async || {
        connect(https(&r), ALIAS, &config).await.is_ok()
    })
    .await;
    // (Handshakes for the alias before its certificate arrived were misses too.)
    let no_cert = "router_tls_handshake_failures_total{reason=\"no_certificate\"}";
    let before = r.metric(no_cert).await.unwrap_or(0.0);
    assert!(
        connect(https(&r), "unknown.example.org", &config)
            .await
            .is_err()
    );
    e2e::eventually("miss counted", Duration::from_secs(5), async || {
        r.metric(no_cert).await == Some(before + 1.0)
    })
    .await;
    assert_eq!(
        r.metric("router_tls_handshake_failures_total{reason=\"other\"}")
            .await
            .unwrap_or(0.0),
        0.0,
        "counted once, under its reason"
    );
}

/// After a restart the alias certificates come from the saved state, unparsed: each
/// is loaded on the first handshake that names its alias (the client gets the
/// alias's own certificate), its expiry gauge is filled in the background, and one
/// whose key never loaded (refused on arrival, kept in the state as the broker sent
/// it) gets the default certificate and is counted when first asked for.
#[tokio::test]
async fn restored_alias_certificates_load_on_their_first_handshake() {
    const BAD: &str = "bad.shop.test";
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, backend) = router_with_alias(&pki, &alias_leaf, "").await;
    // Another alias whose key is not its certificate's: refused on arrival.
    let other = pki.ca.leaf(&[BAD]);
    r.drop_event("10.yaml", &events::add_alias("myapp", "demo", BAD));
    r.drop_event(
        "11.yaml",
        &events::add_ssl(
            "myapp",
            "demo",
            BAD,
            &other.cert_pem,
            &alias_leaf.key_pem,
            None,
        ),
    );
    r.wait_spool_empty().await;
    r.wait_route(BAD).await;
    assert_eq!(
        r.metric("router_tls_certificate_errors_total{reason=\"key_mismatch\"}")
            .await,
        Some(1.0)
    );
    let root = r.root.clone();
    r.stop().await;

    let r = TestRouter::start_https(root, &pki.tls_section("")).await;
    r.wait_route(ALIAS).await;
    let expiry = format!("router_tls_certificate_expiry_timestamp_seconds{{alias=\"{ALIAS}\"}}");
    e2e::eventually(
        "the restored certificate's expiry gauge",
        Duration::from_secs(5),
        async || r.metric(&expiry).await.is_some_and(|v| v > 0.0),
    )
    .await;
    assert_eq!(
        r.metric("router_tls_certificate_errors_total{reason=\"key_mismatch\"}")
            .await
            .unwrap_or(0.0),
        0.0,
        "nothing parsed yet"
    );
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);
    let s = connect(https(&r), ALIAS, &config)
        .await
        .expect("alias handshake");
    assert_eq!(
        peer_leaf(&s),
        der_of(&alias_leaf.cert_pem),
        "the alias's own"
    );
    let mut s = http1(s).await;
    assert_eq!(get(&mut s, ALIAS, "/").await.0, 200);
    // The bad one: the default certificate, and the refusal counted now.
    let addr = https(&r).to_string();
    let (_, out) = run(
        "openssl",
        &["s_client", "-connect", &addr, "-servername", BAD],
    )
    .await;
    assert!(
        out.contains("CN = *.example.com") || out.contains("CN=*.example.com"),
        "{out}"
    );
    assert_eq!(
        r.metric("router_tls_certificate_errors_total{reason=\"key_mismatch\"}")
            .await,
        Some(1.0)
    );
    drop(backend);
}

/// 421 Misdirected Request (RFC 9110 §15.5.20): a connection serves requests only
/// for names that would get the certificate it presented. A connection made for
/// the HA name (the wildcard) that carries a request for an alias with its own
/// certificate, as a browser coalescing h2 connections would send, gets 421 and
/// stays usable; so does the converse over HTTP/1.1.
#[tokio::test]
async fn a_request_for_a_name_with_another_certificate_is_misdirected() {
    use http_body_util::Empty;
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    let (r, _b) = router_with_alias(&pki, &alias_leaf, "").await;

    // h2 made for the HA name, then a request for the alias on it.
    let mut h2 = h2_for(https(&r), HA, &pki.ca.pem).await;
    let status = async |h2: &mut hyper::client::conn::http2::SendRequest<Empty<bytes::Bytes>>,
                        host: &str| {
        let req = http::Request::get(format!("https://{host}/"))
            .body(Empty::new())
            .expect("request");
        h2.send_request(req)
            .await
            .expect("response")
            .status()
            .as_u16()
    };
    assert_eq!(status(&mut h2, HA).await, 200);
    assert_eq!(
        status(&mut h2, ALIAS).await,
        421,
        "the alias has its own certificate"
    );
    assert_eq!(
        status(&mut h2, HA).await,
        200,
        "the connection stays usable"
    );
    assert_eq!(
        status(&mut h2, "other-demo.example.com").await,
        404,
        "same wildcard"
    );

    // HTTP/1.1 made for the alias, then a request for the HA name.
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);
    let s = connect(https(&r), ALIAS, &config).await.expect("handshake");
    let mut s = http1(s).await;
    assert_eq!(get(&mut s, ALIAS, "/").await.0, 200);
    assert_eq!(get(&mut s, HA, "/").await.0, 421);
    assert_eq!(
        r.metric("router_http_requests_total{class=\"4xx\"}").await,
        Some(3.0),
        "two 421 and the 404"
    );
}

const GEAR: &str = "ha-gear-demo.example.com";

/// `add_public_endpoint` of a load balancer whose gear terminates TLS itself (the
/// "SNI proxy" protocol `tls`, without `https`/`wss`).
fn add_passthrough_lb(app: &str, addr: std::net::SocketAddr) -> String {
    events::add_lb(app, "demo", addr)
        .replace(":protocols:\n- http\n- ws\n", ":protocols:\n- tls\n")
        // One gear per member: the same gear id at a new address would be a move.
        .replace(
            "5464c9f6e0b8cd5a6e000001",
            &format!("5464c9f6e0b8cd5a6e{:06}", addr.port()),
        )
}

/// Writes its first write in two pieces, 40 ms apart, so that a ClientHello reaches
/// the router in two TCP segments.
struct SplitFirstWrite {
    inner: tokio::net::TcpStream,
    state: u8,
    pause: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl tokio::io::AsyncRead for SplitFirstWrite {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for SplitFirstWrite {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        let this = &mut *self;
        match this.state {
            0 => {
                let n = buf.len().min(7);
                let r = std::pin::Pin::new(&mut this.inner).poll_write(cx, &buf[..n]);
                if matches!(r, Poll::Ready(Ok(_))) {
                    this.state = 1;
                    this.pause = Some(Box::pin(tokio::time::sleep(Duration::from_millis(40))));
                }
                r
            }
            1 => {
                if let Some(p) = this.pause.as_mut()
                    && std::future::Future::poll(p.as_mut(), cx).is_pending()
                {
                    return Poll::Pending;
                }
                this.state = 2;
                std::pin::Pin::new(&mut this.inner).poll_write(cx, buf)
            }
            _ => std::pin::Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A handshake for `name` whose ClientHello goes out in two TCP segments; the
/// certificate the server presented.
async fn split_handshake(
    addr: std::net::SocketAddr,
    name: &'static str,
    config: &Arc<rustls::ClientConfig>,
) -> Vec<u8> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let split = SplitFirstWrite {
        inner: tcp,
        state: 0,
        pause: None,
    };
    let server = rustls::pki_types::ServerName::try_from(name).expect("name");
    let s = tokio_rustls::TlsConnector::from(config.clone())
        .connect(server, split)
        .await
        .expect("handshake with a split ClientHello");
    s.get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default()
}

/// SNI passthrough: on the one HTTPS port, a name whose gear
/// terminates TLS (protocol `tls`) is relayed untouched, so clients see the gear's
/// own certificate (from another CA, with a key the router never had); a name the
/// router terminates still gets the router's certificate; a ClientHello in two TCP
/// segments and a client without SNI get the same answers; an h2 connection made
/// for a terminated name that carries a request for the passthrough name gets 421.
#[tokio::test]
async fn tls_passthrough_relays_to_the_gear_that_holds_the_key() {
    let pki = Pki::new();
    let alias_leaf = pki.ca.leaf(&[ALIAS]);
    // Round robin: four connections in a row go to both gears, whatever the dice.
    let (r, _b) = router_with_alias(&pki, &alias_leaf, "upstream:\n  balance: round_robin\n").await;
    let gear_ca = Ca::new("Gear CA");
    let gear_leaf = gear_ca.leaf(&[GEAR]);
    let (gear, _) = Backend::start_tls(&gear_leaf).await;
    let (gear2, _) = Backend::start_tls(&gear_leaf).await;
    r.drop_event("10.yaml", &add_passthrough_lb("gear", gear.addr));
    r.drop_event("11.yaml", &add_passthrough_lb("gear", gear2.addr));
    r.wait_spool_empty().await;
    // New members take connections once their first check passed
    // (`health.gate_new`): both, before the four that must reach both.
    r.wait_health(gear.addr, "up").await;
    r.wait_health(gear2.addr, "up").await;

    // The gear's own certificate, verified against the gear's CA.
    let gear_config = client_config(&gear_ca.pem, &[b"http/1.1"]);
    for _ in 0..4 {
        let s = connect(https(&r), GEAR, &gear_config)
            .await
            .expect("handshake with the gear through the router");
        assert_eq!(peer_leaf(&s), der_of(&gear_leaf.cert_pem));
        let mut h = http1(s).await;
        let (status, body) = get(&mut h, GEAR, "/hello").await;
        assert_eq!(status, 200);
        let echo = Echo::parse(&body);
        assert_eq!(echo.target, "/hello", "bytes relayed untouched");
        assert!(
            echo.header("x-forwarded-for").is_none(),
            "the router never saw the request"
        );
    }
    assert_eq!(gear.hits() + gear2.hits(), 4);
    assert!(
        gear.hits() > 0 && gear2.hits() > 0,
        "balanced over both: {} and {}",
        gear.hits(),
        gear2.hits()
    );

    // A ClientHello split over two TCP segments.
    assert_eq!(
        split_handshake(https(&r), GEAR, &gear_config).await,
        der_of(&gear_leaf.cert_pem)
    );
    // The same split towards a terminated name: the router's certificate.
    let config = client_config(&pki.ca.pem, &[b"http/1.1"]);
    assert_eq!(
        split_handshake(https(&r), ALIAS, &config).await,
        der_of(&alias_leaf.cert_pem)
    );

    // openssl s_client and curl, as operators would try it.
    let addr = https(&r).to_string();
    let gear_ca_file = pki.dir.join("gear-ca.pem");
    std::fs::write(&gear_ca_file, &gear_ca.pem).expect("write gear CA");
    let gear_ca_path = gear_ca_file.display().to_string();
    let out = s_client_verified(&addr, GEAR, &gear_ca_path).await;
    assert!(out.contains("Gear CA"), "issued by the gear's CA: {out}");
    let port = https(&r).port();
    let (ok, out) = run(
        "curl",
        &[
            "-sS",
            "--cacert",
            &gear_ca_path,
            "--resolve",
            &format!("{GEAR}:{port}:127.0.0.1"),
            &format!("https://{GEAR}:{port}/via-curl"),
        ],
    )
    .await;
    assert!(ok && out.contains("/via-curl"), "{out}");
    // No SNI: the router's default certificate, as without passthrough.
    let (_, out) = run("openssl", &["s_client", "-connect", &addr, "-noservername"]).await;
    assert!(
        out.contains("CN = *.example.com") || out.contains("CN=*.example.com"),
        "{out}"
    );

    // h2 made for the HA name of the terminated app (the wildcard covers the gear's
    // name too), then a request for the passthrough name on it: 421.
    let mut h2 = h2_for(https(&r), HA, &pki.ca.pem).await;
    for (host, want) in [(HA, 200), (GEAR, 421), (HA, 200)] {
        let req = http::Request::get(format!("https://{host}/"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .expect("request");
        let status = h2.send_request(req).await.expect("response").status();
        assert_eq!(status.as_u16(), want, "{host}");
    }
    assert!(
        r.metric("router_tls_passthrough_total{result=\"relayed\"}")
            .await
            >= Some(6.0)
    );

    // One gear gone: nothing was sent to it yet, so connections go to the other.
    drop(gear);
    for _ in 0..4 {
        let s = connect(https(&r), GEAR, &gear_config)
            .await
            .expect("handshake with the remaining gear");
        assert_eq!(get(&mut http1(s).await, GEAR, "/").await.0, 200);
    }
}

/// The suite `openssl s_client` got when it offered `ciphers` (TLS 1.2 `-cipher`
/// or TLS 1.3 `-ciphersuites`, in its order of preference).
async fn negotiated(addr: &str, version: &str, flag: &str, ciphers: &str) -> String {
    let args = [
        "s_client",
        "-connect",
        addr,
        "-servername",
        HA,
        version,
        flag,
        ciphers,
    ];
    let (_, out) = run("openssl", &args).await;
    out.lines()
        .find_map(|l| {
            l.split_once("Cipher is ")
                .map(|(_, c)| c.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no cipher in: {out}"))
}

/// testssl.sh's "no cipher order" finding: a client that lists ChaCha20 first
/// gets the server's choice, AES-GCM on a CPU with AES instructions (ChaCha20
/// where it has none), in TLS 1.2 and 1.3 alike.
#[tokio::test]
async fn the_server_picks_the_cipher_suite_by_its_own_order() {
    let pki = Pki::new();
    let r = TestRouter::start_https(e2e::tempdir("tls"), &pki.tls_section("")).await;
    let addr = https(&r).to_string();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let aes = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags") || l.starts_with("Features"))
        .any(|l| l.split_whitespace().any(|f| f == "aes"));
    let tls12 = negotiated(
        &addr,
        "-tls1_2",
        "-cipher",
        "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:\
         ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
    )
    .await;
    let tls13 = negotiated(
        &addr,
        "-tls1_3",
        "-ciphersuites",
        "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256",
    )
    .await;
    if aes {
        assert!(tls12.contains("AES128-GCM"), "TLS 1.2 got {tls12}");
        assert_eq!(tls13, "TLS_AES_128_GCM_SHA256");
    } else {
        assert!(tls12.contains("CHACHA20"), "TLS 1.2 got {tls12}");
        assert_eq!(tls13, "TLS_CHACHA20_POLY1305_SHA256");
    }
    // And the converse order is not simply echoed: AES first from the client
    // where the CPU has none gets ChaCha20, with it AES.
    let tls13 = negotiated(
        &addr,
        "-tls1_3",
        "-ciphersuites",
        "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256",
    )
    .await;
    let want = if aes {
        "TLS_AES_128_GCM_SHA256"
    } else {
        "TLS_CHACHA20_POLY1305_SHA256"
    };
    assert_eq!(tls13, want);
}

/// The key-exchange groups (`tls.groups`, `tls::groups`): by default a rustls
/// client (aws-lc-rs, which offers the hybrid first) agrees on `X25519MLKEM768`,
/// an OpenSSL 3.0 client offering only X25519 still connects on `x25519`, and
/// each is counted under its `group`; a router told `[x25519]` agrees on X25519
/// with the rustls client too, and one whose groups the client does not share
/// refuses the handshake.
#[tokio::test]
async fn handshakes_agree_on_the_configured_groups_and_are_counted_by_group() {
    let pki = Pki::new();
    let ca_pem = std::fs::read_to_string(&pki.ca_file).expect("CA");
    let full = |group: &'static str| [("kind", "full"), ("group", group)];

    let r = TestRouter::start_https(e2e::tempdir("tls"), &pki.tls_section("")).await;
    assert_eq!(
        agreed_group(&r, &ca_pem).await,
        Some(rustls::NamedGroup::X25519MLKEM768),
        "the hybrid post-quantum group by default"
    );
    let addr = https(&r).to_string();
    let ca = pki.ca_file.display().to_string();
    let args = [
        "s_client",
        "-connect",
        &addr,
        "-servername",
        "www.example.com",
    ];
    let (_, out) = run(
        "openssl",
        &[&args[..], &["-CAfile", &ca, "-groups", "X25519"]].concat(),
    )
    .await;
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
    assert!(
        out.contains("X25519"),
        "openssl names the group it agreed on: {out}"
    );
    e2e::eventually(
        "each handshake counted under its group",
        Duration::from_secs(5),
        async || {
            r.metric_sum("router_tls_handshakes_total", &full("x25519mlkem768"))
                .await
                == 1.0
                && r.metric_sum("router_tls_handshakes_total", &full("x25519"))
                    .await
                    == 1.0
        },
    )
    .await;
    r.stop().await;

    let r = TestRouter::start_https(
        e2e::tempdir("tls"),
        &pki.tls_section("  groups: [X25519]\n"),
    )
    .await;
    assert_eq!(
        agreed_group(&r, &ca_pem).await,
        Some(rustls::NamedGroup::X25519),
        "tls.groups: [x25519] picks X25519 from a client that offers the hybrid first"
    );
    r.stop().await;

    let r = TestRouter::start_https(
        e2e::tempdir("tls"),
        &pki.tls_section("  groups: [secp384r1]\n"),
    )
    .await;
    let (_, out) = run(
        "openssl",
        &[&args[..], &["-CAfile", &ca, "-groups", "X25519"]].concat(),
    )
    .await;
    assert!(
        !out.contains("Verify return code: 0 (ok)"),
        "no group in common: no handshake: {out}"
    );
    r.stop().await;
}

/// The key-exchange group a rustls client (aws-lc-rs's defaults) agrees on with
/// `r`'s HTTPS listener.
async fn agreed_group(r: &TestRouter, ca_pem: &str) -> Option<rustls::NamedGroup> {
    let tls = connect(
        https(r),
        "www.example.com",
        &client_config(ca_pem, &[b"http/1.1"]),
    )
    .await
    .expect("rustls handshake");
    tls.get_ref()
        .1
        .negotiated_key_exchange_group()
        .map(|g| g.name())
}
