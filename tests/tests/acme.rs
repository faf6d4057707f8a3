//! The ACME client (`acme` crate) against Pebble, Let's Encrypt's test CA, with its
//! random validation delays and refused nonces left on: an account made once and
//! kept (0600), a certificate ordered over HTTP-01 that chains to Pebble's root and
//! names the alias, its answers withdrawn afterwards; and a CA that answers with an
//! endless body fails the one request, quickly, with its reason; an order that
//! failed for a moment (the CA answering 503) is resumed, not placed again.

use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::time::Duration;

use acme::{Challenges, Client, Settings};
use bytes::Bytes;
use e2e::pebble::Pebble;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Serves `answers` (what the router's HTTP listener does for it) at `/.well-known/acme-challenge/TOKEN` on a port it reports.
async fn http01_server(answers: Arc<Challenges>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let answers = answers.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let answer = answers.answer(req.uri().path());
                    async move {
                        let status = if answer.is_some() { 200 } else { 404 };
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from(answer.unwrap_or_default())))
                                .expect("response"),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_made_once_and_a_certificate_ordered_over_http01_from_pebble() {
    let answers = Arc::new(Challenges::default());
    let port = http01_server(answers.clone()).await;
    let pebble = Pebble::start(port, port);
    let mut settings = Settings::new(&pebble.directory);
    settings.ca_file = Some(pebble.ca_file.clone());
    settings.contact = vec!["mailto:ops@example.com".into()];
    let dir = e2e::tempdir("acme-account");

    let client = Client::open(&settings, &dir).await.expect("account");
    let file = dir.join("account.json");
    let mode = std::fs::metadata(&file)
        .expect("account file")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the account file holds its private key"
    );
    let saved = std::fs::read(&file).expect("read");

    let name = "shop.example.test";
    let issued = client
        .issue(name, answers.as_ref(), None)
        .await
        .expect("issued");
    assert!(answers.is_empty(), "answers withdrawn after the order");
    assert!(issued.order_url.starts_with("https://127.0.0.1:"));

    // The chain verifies against Pebble's issuing root, for the name ordered.
    let root_pem = pebble.get(&format!("{}/roots/0", pebble.management));
    let root = CertificateDer::from_pem_slice(root_pem.as_bytes()).expect("Pebble's root");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root).expect("root");
    let verifier = rustls::client::WebPkiServerVerifier::builder(Arc::new(roots))
        .build()
        .expect("verifier");
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(issued.chain_pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("chain PEM");
    assert!(chain.len() >= 2, "leaf and intermediate");
    let server = ServerName::try_from(name).expect("name");
    verifier
        .verify_server_cert(&chain[0], &chain[1..], &server, &[], UnixTime::now())
        .expect("the certificate chains to Pebble's root and names the alias");
    let other = ServerName::try_from("other.example.test").expect("name");
    assert!(
        verifier
            .verify_server_cert(&chain[0], &chain[1..], &other, &[], UnixTime::now())
            .is_err(),
        "and no other name"
    );
    // The key is the certificate's, as the router loads an alias's certificate.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    router::tls::keys::load(&issued.chain_pem, &issued.key_pem, None, &provider)
        .expect("the router loads the issued certificate and its key");

    // Opened again (a restart): the same account, the file untouched.
    let again = Client::open(&settings, &dir).await.expect("account again");
    assert_eq!(again.account_id(), client.account_id());
    assert_eq!(std::fs::read(&file).expect("read"), saved);
}

/// A CA of the test's own over TLS on 127.0.0.1: its listener, its acceptor, and
/// a directory holding its root (`ca.pem`).
async fn tls_ca(
    what: &str,
) -> (
    tokio::net::TcpListener,
    tokio_rustls::TlsAcceptor,
    std::path::PathBuf,
) {
    let ca = e2e::pki::Ca::new(what);
    let leaf = ca.leaf(&["127.0.0.1"]);
    let dir = e2e::tempdir("acme-hostile");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("ca.pem"), &ca.pem).expect("ca");
    let certs = CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("cert");
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("key");
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    (listener, acceptor, dir)
}

type CaStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;

/// Answers each TLS connection to `listener` with `answer`.
fn serve<F, Fut>(listener: tokio::net::TcpListener, acceptor: tokio_rustls::TlsAcceptor, answer: F)
where
    F: Fn(CaStream) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, answer) = (acceptor.clone(), answer.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    answer(tls).await;
                }
            });
        }
    });
}

#[tokio::test]
async fn a_rate_limited_answer_s_retry_after_comes_with_the_error() {
    let (listener, acceptor, dir) = tls_ca("rate-limiting CA test").await;
    let port = listener.local_addr().expect("addr").port();
    serve(listener, acceptor, |mut tls: CaStream| async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut buf = [0u8; 4096];
        let _ = tls.read(&mut buf).await;
        let body =
            r#"{"type":"urn:ietf:params:acme:error:rateLimited","detail":"too many","status":503}"#;
        let _ = tls
                    .write_all(format!("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 7200\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).as_bytes())
                    .await;
        let _ = tls.shutdown().await;
    });
    let mut settings = Settings::new(format!("https://127.0.0.1:{port}/dir"));
    settings.ca_file = Some(dir.join("ca.pem"));
    let err = match Client::open(&settings, &dir.join("account")).await {
        Ok(_) => panic!("a CA refusing everything made an account"),
        Err(e) => e,
    };
    assert_eq!(
        err.retry_after(),
        Some(Duration::from_secs(7200)),
        "the CA's Retry-After comes with the error: {err:#}"
    );
}

#[tokio::test]
async fn a_ca_sending_an_endless_body_fails_that_request_quickly_with_its_reason() {
    // A TLS server that answers every request with a body that never ends.
    let (listener, acceptor, dir) = tls_ca("hostile CA test").await;
    let port = listener.local_addr().expect("addr").port();
    serve(listener, acceptor, |mut tls: CaStream| async move {
        use tokio::io::AsyncWriteExt as _;
        let _ = tls
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                    .await;
        let chunk = format!("{:x}\r\n{}\r\n", 65536, "x".repeat(65536));
        while tls.write_all(chunk.as_bytes()).await.is_ok() {}
    });
    let mut settings = Settings::new(format!("https://127.0.0.1:{port}/dir"));
    settings.ca_file = Some(dir.join("ca.pem"));
    settings.max_body = 256 * 1024;
    let err = match Client::open(&settings, &dir.join("account")).await {
        Ok(_) => panic!("an endless directory made an account"),
        Err(e) => e,
    };
    // Stopped at the body's cap (not at the request's 30 s deadline, whose
    // reason is "no answer within").
    let said = format!("{err:#} {err:?}");
    assert!(
        said.contains("length limit exceeded"),
        "the reason names the body's cap: {said}"
    );
    assert!(
        !dir.join("account/account.json").exists(),
        "no account saved"
    );
}

/// A router whose apps all ask for ACME certificates from `pebble` (validated by
/// `challenge`), HTTPS on with a wildcard default certificate from a CA of the
/// test's, and app `shop` with `alias`: the router, its directory, its
/// configuration file, Pebble's root and the wildcard's CA.
async fn acme_router(pebble: &Pebble, challenge: &str, alias: &str) -> RouterParts {
    acme_router_via(
        pebble,
        (&pebble.directory, &pebble.ca_file),
        challenge,
        alias,
        "",
    )
    .await
}

type RouterParts = (
    e2e::process::RouterProcess,
    std::path::PathBuf,
    std::path::PathBuf,
    String,
    e2e::pki::Wildcard,
);

/// [`acme_router`] asking the CA at `directory` (trusted through `ca_file`;
/// a front of `pebble`'s), with `more` lines under `acme:`.
async fn acme_router_via(
    pebble: &Pebble,
    (directory, ca_file): (&str, &std::path::Path),
    challenge: &str,
    alias: &str,
    more: &str,
) -> (
    e2e::process::RouterProcess,
    std::path::PathBuf,
    std::path::PathBuf,
    String,
    e2e::pki::Wildcard,
) {
    let root = pebble.get(&format!("{}/roots/0", pebble.management));
    assert!(root.contains("BEGIN CERTIFICATE"), "Pebble's root: {root}");
    let wildcard = e2e::pki::Wildcard::new("acme-router");
    let dir = e2e::tempdir("acme-router");
    let extra = format!(
        "{tls}acme:\n  directory: {dir_url}\n  ca_file: {ca}\n  check_interval: 1s\n  challenge: {challenge}\n{more}\
         app_defaults:\n  acme: true\n",
        tls = wildcard.tls_section(),
        dir_url = directory,
        ca = ca_file.display(),
    );
    // `listen:`'s https goes under the lines the helper writes.
    let config = e2e::process::spool_config(&dir, "127.0.0.1:0", false, "").replace(
        "  admin: 127.0.0.1:0\n",
        "  admin: 127.0.0.1:0\n  https: 127.0.0.1:0\n",
    ) + &extra;
    let app = e2e::events::add_lb("shop", "acme", "127.0.0.1:9".parse().expect("addr"));
    let cfg = e2e::process::spool_router(&dir, &app, &config);
    std::fs::write(
        dir.join("spool/02.yaml"),
        e2e::events::add_alias("shop", "acme", alias),
    )
    .expect("alias event");
    let router = e2e::process::RouterProcess::start(&cfg).await;
    (router, dir, cfg, root, wildcard)
}

/// Relays TCP from a port of its own to the port set later (Pebble must know
/// where to validate before the router, which must know Pebble's directory, is
/// started): Pebble's HTTP-01 requests reach the router's HTTP listener as sent.
async fn relay_to_later() -> (u16, tokio::sync::watch::Sender<u16>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = tokio::sync::watch::channel(0u16);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let mut rx = rx.clone();
            tokio::spawn(async move {
                // A connection that comes before the target is set waits for it:
                // the CA may validate before the test has told the relay where
                // the router listens (Pebble's wait before validating is random,
                // 0-15 s). Relayed to port 0, the validation failed and the order
                // with it, a retry a minute later (CI runs 17 and 20).
                let Ok(to) = rx.wait_for(|p| *p != 0).await.map(|p| *p) else {
                    return;
                };
                if let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (port, tx)
}

/// A TLS handshake to `addr` for `name` that verifies against `root_pem`.
async fn verified(addr: std::net::SocketAddr, name: &str, root_pem: &str) -> bool {
    let config = e2e::tlsclient::client_config(root_pem, &[b"http/1.1"]);
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    let server = ServerName::try_from(name.to_string()).expect("name");
    tokio_rustls::TlsConnector::from(config)
        .connect(server, tcp)
        .await
        .is_ok()
}

/// Whether a handshake for `name` verifies against `root_pem` within `tries`
/// attempts `every` apart.
/// How long a first certificate may take, in tries of [`ISSUE_EVERY`]: Pebble
/// sleeps up to 15 s before it validates a challenge, the order is then polled
/// with back-off and finalized; 75 s leaves room on 2 cores with the rest of the
/// suite running. (The one first certificate that came late, CI runs 17 and 20,
/// was the relay's race in [`relay_to_later`], fixed there.)
const ISSUE_TRIES: u32 = 150;
const ISSUE_EVERY: Duration = Duration::from_millis(500);

async fn served_within(
    addr: std::net::SocketAddr,
    name: &str,
    root_pem: &str,
    tries: u32,
    every: Duration,
) -> bool {
    for _ in 0..tries {
        if verified(addr, name, root_pem).await {
            return true;
        }
        tokio::time::sleep(every).await;
    }
    false
}

/// Waits for `alias` to be served a certificate chaining to Pebble's root
/// (`root`) on `https`; fails with what the router said when it is not.
async fn served_or_say(
    router: &mut e2e::process::RouterProcess,
    https: std::net::SocketAddr,
    alias: &str,
    root: &str,
) {
    if !served_within(https, alias, root, ISSUE_TRIES, ISSUE_EVERY).await {
        let mut said = Vec::new();
        while let Ok(line) = router.logs.try_recv() {
            said.push(line.to_string());
        }
        panic!(
            "{alias} is not served a certificate chaining to Pebble's root; the router said:\n{}",
            said.join("\n")
        );
    }
}

/// The status document's source of `alias`'s certificate.
async fn certificate_source(admin: std::net::SocketAddr, alias: &str) -> String {
    let (_, status) = e2e::http_get(&format!("http://{admin}/status")).await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    status["certificates"]
        .as_array()
        .and_then(|certs| certs.iter().find(|c| c["name"] == alias))
        .map(|c| c["source"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|| format!("no certificate for {alias} in {status}"))
}

/// `router_acme_orders_total{result}` from the router's admin API.
async fn orders(admin: std::net::SocketAddr, result: &str) -> String {
    let (_, text) = e2e::http_get(&format!("http://{admin}/metrics")).await;
    let sample = format!("router_acme_orders_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&sample).map(str::to_string))
        .unwrap_or_else(|| format!("no {sample}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_of_an_app_asking_for_acme_is_served_pebbles_certificate_and_keeps_it_after_a_restart()
 {
    let (relay, to) = relay_to_later().await;
    let (tls_relay, _) = relay_to_later().await;
    let pebble = Pebble::start(relay, tls_relay);
    let alias = "shop.example.test";
    let (router, dir, cfg, root, wildcard) = acme_router(&pebble, "http-01", alias).await;
    to.send_replace(router.http.port());
    let https = router.https.expect("https");
    let admin = router.admin.expect("admin");

    // Ordered, validated through the router's HTTP listener, served over HTTPS.
    // Pebble waits up to 15 s before it validates.
    let mut router = router;
    served_or_say(&mut router, https, alias, &root).await;
    assert_eq!(orders(admin, "issued").await, "1", "one order");
    // Kept for operators in /audit's own ACME ring.
    let (_, audit) = e2e::http_get(&format!("http://{admin}/audit")).await;
    let audit: serde_json::Value = serde_json::from_str(&audit).expect("audit JSON");
    let acme: Vec<(String, String)> = audit["acme"]
        .as_array()
        .expect("acme entries")
        .iter()
        .map(|e| (e["action"].to_string(), e["target"].to_string()))
        .collect();
    for action in ["acme-order", "acme-issued"] {
        assert!(
            acme.contains(&(format!("{action:?}"), format!("{alias:?}"))),
            "{action} for {alias} in /audit: {acme:?}"
        );
    }
    // Another name still gets the default certificate, which Pebble's root does not sign.
    assert!(!verified(https, "other.example.test", &root).await);
    let saved = dir.join(format!("state/acme/certs/{alias}.json"));
    let mode = std::fs::metadata(&saved)
        .expect("saved certificate")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the saved key is owner-only");
    // Operators see where the certificate comes from: /routes and the status page.
    assert_eq!(certificate_source(admin, alias).await, "acme");
    let (_, routes) = e2e::http_get(&format!("http://{admin}/routes")).await;
    let routes: serde_json::Value = serde_json::from_str(&routes).expect("routes JSON");
    assert_eq!(
        routes["apps"][0]["acme_certificates"],
        serde_json::json!([alias]),
        "{routes}"
    );
    let account = dir.join("state/acme/account.json");
    assert!(account.exists(), "the account is kept in state_dir");

    // Restarted: the saved certificate is served again, with no new order.
    drop(router);
    let router = e2e::process::RouterProcess::start(&cfg).await;
    to.send_replace(router.http.port());
    let https = router.https.expect("https");
    assert!(
        served_within(https, alias, &root, 40, Duration::from_millis(100)).await,
        "served from state_dir after a restart"
    );
    let admin = router.admin.expect("admin");
    assert_eq!(
        orders(admin, "issued").await,
        "0",
        "no order after the restart"
    );

    // Names a client asks for never start an order: an unknown SNI, an unknown Host.
    assert!(!verified(https, "unknown.example.test", &root).await);
    let _ = e2e::http_get(&format!("http://{}/", router.http)).await;
    let mut spool_n = 2;
    let mut drop_event = |event: String| {
        spool_n += 1;
        std::fs::write(dir.join(format!("spool/{spool_n:02}.yaml")), event).expect("event");
    };
    // An uploaded certificate (add_ssl) replaces the ACME one at once.
    let upload = wildcard.ca.leaf(&[alias]);
    drop_event(e2e::events::add_ssl(
        "shop",
        "acme",
        alias,
        &upload.cert_pem,
        &upload.key_pem,
        None,
    ));
    let wildcard_ca = std::fs::read_to_string(&wildcard.ca_file).expect("CA");
    assert!(
        served_within(https, alias, &wildcard_ca, 40, Duration::from_millis(100)).await,
        "the uploaded certificate wins"
    );
    assert_eq!(certificate_source(admin, alias).await, "upload");
    // The alias removed: no ACME certificate served for it any more.
    drop_event(format!(
        "---\n:action: :remove_alias\n:app_name: shop\n:namespace: acme\n:alias: {alias}\n"
    ));
    let mut gone = false;
    for _ in 0..40 {
        let (_, text) = e2e::http_get(&format!("http://{admin}/metrics")).await;
        if text.lines().any(|l| l == "router_acme_certificates 0") {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gone,
        "the removed alias's ACME certificate is no longer served"
    );
    assert!(!verified(https, alias, &root).await);
    // The issuer has looked the table over since the unknown names were asked for
    // (it stopped serving the removed alias): still no order of any kind.
    assert_eq!(
        orders(admin, "issued").await,
        "0",
        "no order for an unknown name"
    );
    assert_eq!(orders(admin, "failed").await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_alpn_01_an_alias_validates_on_the_https_listener_with_port_80_closed() {
    // Pebble's HTTP-01 port leads nowhere; its TLS-ALPN-01 port to the router's HTTPS.
    let (http_relay, _) = relay_to_later().await;
    let (tls_relay, to) = relay_to_later().await;
    let pebble = Pebble::start(http_relay, tls_relay);
    let alias = "tls.example.test";
    let (router, _dir, _cfg, root, _wildcard) = acme_router(&pebble, "tls-alpn-01", alias).await;
    let https = router.https.expect("https");
    to.send_replace(https.port());
    let admin = router.admin.expect("admin");
    assert!(
        served_within(https, alias, &root, ISSUE_TRIES, ISSUE_EVERY).await,
        "validated over acme-tls/1 on the HTTPS listener, then served"
    );
    assert_eq!(orders(admin, "issued").await, "1");
    assert_eq!(certificate_source(admin, alias).await, "acme");
    // A client offering acme-tls/1 with no order waiting gets no validation
    // certificate: the handshake fails (no protocol in common), nothing served.
    let config = e2e::tlsclient::client_config(&root, &[b"acme-tls/1"]);
    let tcp = tokio::net::TcpStream::connect(https)
        .await
        .expect("connect");
    let name = ServerName::try_from(alias.to_string()).expect("name");
    assert!(
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .is_err(),
        "no acme-tls/1 answer without an order in flight"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lived_certificate_is_renewed_before_expiry_with_no_failed_handshake() {
    // Certificates valid 90 s: renewal is due at 60 s, Pebble validates within 15.
    let (relay, to) = relay_to_later().await;
    let (tls_relay, _) = relay_to_later().await;
    let pebble = Pebble::start_with(relay, tls_relay, Some(90));
    let alias = "renew.example.test";
    let (router, _dir, _cfg, root, _wildcard) = acme_router(&pebble, "http-01", alias).await;
    to.send_replace(router.http.port());
    let https = router.https.expect("https");
    let admin = router.admin.expect("admin");
    assert!(
        served_within(https, alias, &root, ISSUE_TRIES, ISSUE_EVERY).await,
        "first certificate"
    );
    let first = served_leaf(https, alias, &root).await.expect("first leaf");
    // A client loop until the certificate changes: every handshake must verify
    // (each is checked against the leaf's own validity by the verifier: an
    // expired certificate fails it).
    let mut handshakes = 0u32;
    let renewed = loop {
        let leaf = served_leaf(https, alias, &root).await;
        handshakes += 1;
        let Some(leaf) = leaf else {
            panic!("handshake {handshakes} failed while the certificate was renewed");
        };
        if leaf != first {
            break leaf;
        }
        assert!(handshakes < 1000, "no renewal within 200 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(renewed, first);
    // The issuer's own account of its orders (each failure with its reason).
    let (_, audit) = e2e::http_get(&format!("http://{admin}/audit")).await;
    let acme: serde_json::Value = serde_json::from_str(&audit).unwrap_or_default();
    let said = &acme["acme"];
    assert_eq!(
        orders(admin, "issued").await,
        "2",
        "one order, one renewal: {said}"
    );
    assert_eq!(orders(admin, "failed").await, "0", "{said}");
}

/// The leaf a handshake for `name` verified against `root_pem` presents (`None`:
/// the handshake failed).
async fn served_leaf(addr: std::net::SocketAddr, name: &str, root_pem: &str) -> Option<Vec<u8>> {
    let config = e2e::tlsclient::client_config(root_pem, &[b"http/1.1"]);
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let server = ServerName::try_from(name.to_string()).ok()?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(server, tcp)
        .await
        .ok()?;
    Some(e2e::tlsclient::peer_leaf(&tls))
}

/// base64url without padding (RFC 4648 §5).
fn base64url(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ABC[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// Pebble as packaged offers no renewal information, so a CA of the test's own
/// does (RFC 9773): its directory names `renewalInfo`, and it answers the
/// certificate's identifier with a window and a `Retry-After`, through the
/// same bounded client and account file as every order.
#[tokio::test]
async fn a_ca_offering_renewal_information_gives_the_window_for_the_certificate() {
    let (listener, acceptor, dir) = tls_ca("ARI CA test").await;
    let port = listener.local_addr().expect("addr").port();
    let base = format!("https://127.0.0.1:{port}");
    let asked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let (seen, url) = (asked.clone(), base.clone());
    serve(listener, acceptor, move |mut tls: CaStream| {
        let (seen, url) = (seen.clone(), url.clone());
        async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let mut buf = [0u8; 4096];
            let n = tls.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            seen.lock().expect("lock").push(path.clone());
            let (status, extra, body) = if path == "/dir" {
                let dir = serde_json::json!({"newNonce": format!("{url}/nonce"), "newAccount": format!("{url}/acct"),
                    "newOrder": format!("{url}/order"), "renewalInfo": format!("{url}/ari")});
                ("200 OK", "", dir.to_string())
            } else if path.starts_with("/ari/") {
                let w = r#"{"suggestedWindow": {"start": "2026-12-01T00:00:00Z", "end": "2026-12-02T00:00:00Z"}}"#;
                ("200 OK", "retry-after: 21600\r\n", w.to_string())
            } else {
                ("404 Not Found", "", String::new())
            };
            let _ = tls
                .write_all(format!("HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}", body.len()).as_bytes())
                .await;
            let _ = tls.shutdown().await;
        }
    });
    // An account kept from before (the CA is not asked to make one).
    let key = rcgen::KeyPair::generate().expect("key");
    let account = serde_json::json!({"id": format!("{base}/acct/1"),
        "key_pkcs8": base64url(&key.serialize_der()), "directory": format!("{base}/dir")});
    let acct_dir = dir.join("account");
    std::fs::create_dir_all(&acct_dir).expect("dir");
    std::fs::write(acct_dir.join("account.json"), account.to_string()).expect("account");
    let mut settings = Settings::new(format!("{base}/dir"));
    settings.ca_file = Some(dir.join("ca.pem"));
    let client = Client::open(&settings, &acct_dir).await.expect("account");

    // A certificate with an authority key identifier and a serial to name it by.
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(vec![0xAB; 20]);
    let issuer = rcgen::Issuer::new(ca, rcgen::KeyPair::generate().expect("key"));
    let mut leaf =
        rcgen::CertificateParams::new(vec!["shop.example.test".to_string()]).expect("params");
    leaf.serial_number = Some(rcgen::SerialNumber::from_slice(&[1, 2, 3]));
    leaf.use_authority_key_identifier_extension = true;
    let chain = leaf.signed_by(&key, &issuer).expect("signed").pem();

    let window = client
        .renewal_window(&chain)
        .await
        .expect("asked")
        .expect("the CA offers renewal information");
    assert_eq!((window.start, window.end), (1_796_083_200, 1_796_169_600));
    assert!(
        window.ask_again > Duration::from_secs(21_500)
            && window.ask_again <= Duration::from_secs(21_600),
        "Retry-After kept: {window:?}"
    );
    assert!(
        asked
            .lock()
            .expect("lock")
            .contains(&format!("/ari/{}.AQID", base64url(&[0xAB; 20]))),
        "asked by AKI and serial: {:?}",
        asked.lock().expect("lock")
    );
}

/// A TLS front of Pebble's ACME API, as a CA whose service fails for a moment
/// mid-order: it passes every request on to Pebble (the Host as sent, so
/// Pebble's URLs name the front), counts new orders (`POST /order-plz`), and
/// answers the first `fail` requests that tell the CA to validate a challenge
/// (`POST /chalZ/...`) with the CA's `serverInternal` problem (503) instead.
/// Its port, its CA's directory (`ca.pem`), the new orders and the failures.
async fn faulty_front(
    pebble: &Pebble,
    fail: usize,
) -> (
    u16,
    std::path::PathBuf,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (listener, acceptor, dir) = tls_ca("faulty CA front").await;
    let port = listener.local_addr().expect("addr").port();
    let upstream: std::net::SocketAddr = pebble
        .directory
        .trim_start_matches("https://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .expect("Pebble's address");
    let client = e2e::tlsclient::client_config(
        &std::fs::read_to_string(&pebble.ca_file).expect("Pebble's CA"),
        &[b"http/1.1"],
    );
    let (orders, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counts = (orders.clone(), failed.clone());
    serve(listener, acceptor, move |tls: CaStream| {
        let (client, (orders, failed)) = (client.clone(), counts.clone());
        async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (client, orders, failed) = (client.clone(), orders.clone(), failed.clone());
                async move {
                    let post = req.method() == hyper::Method::POST;
                    let path = req.uri().path().to_string();
                    if post && path == "/order-plz" {
                        orders.fetch_add(1, Ordering::SeqCst);
                    }
                    if post
                        && path.starts_with("/chalZ/")
                        && failed.fetch_add(1, Ordering::SeqCst) < fail
                    {
                        let body = r#"{"type":"urn:ietf:params:acme:error:serverInternal","detail":"a moment","status":503}"#;
                        return Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .status(503)
                                .header("content-type", "application/problem+json")
                                .body(Full::new(Bytes::from(body)))
                                .expect("response"),
                        );
                    }
                    Ok(pass_on(req, upstream, client).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        }
    });
    (port, dir, orders, failed)
}

/// One request passed on to `upstream` over TLS, its answer read whole (502
/// when Pebble cannot be reached).
async fn pass_on(
    req: hyper::Request<hyper::body::Incoming>,
    upstream: std::net::SocketAddr,
    client: Arc<rustls::ClientConfig>,
) -> hyper::Response<Full<Bytes>> {
    use http_body_util::BodyExt as _;
    let bad = || {
        hyper::Response::builder()
            .status(502)
            .body(Full::new(Bytes::new()))
            .expect("response")
    };
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return bad();
    };
    let Ok(tls) = e2e::tlsclient::connect(upstream, "127.0.0.1", &client).await else {
        return bad();
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await
    else {
        return bad();
    };
    tokio::spawn(conn);
    let Ok(answer) = sender
        .send_request(hyper::Request::from_parts(parts, Full::new(body)))
        .await
    else {
        return bad();
    };
    let (parts, body) = answer.into_parts();
    match body.collect().await {
        Ok(b) => hyper::Response::from_parts(parts, Full::new(b.to_bytes())),
        Err(_) => bad(),
    }
}

/// Issue 60: a CA that fails mid-order (its service answering 503 for a
/// moment) costs no second order: the router's next try resumes the order it
/// has, and the certificate comes from that one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_that_failed_for_a_moment_is_resumed_not_placed_again() {
    let (relay, to) = relay_to_later().await;
    let (tls_relay, _) = relay_to_later().await;
    let pebble = Pebble::start(relay, tls_relay);
    let (front, front_dir, new_orders, failed) = faulty_front(&pebble, 1).await;
    let alias = "resume.example.test";
    let directory = format!("https://127.0.0.1:{front}/dir");
    let (router, _dir, _cfg, root, _wildcard) = acme_router_via(
        &pebble,
        (&directory, &front_dir.join("ca.pem")),
        "http-01",
        alias,
        "  retry_after: 1s\n",
    )
    .await;
    to.send_replace(router.http.port());
    let (https, admin) = (router.https.expect("https"), router.admin.expect("admin"));
    let mut router = router;
    served_or_say(&mut router, https, alias, &root).await;
    use std::sync::atomic::Ordering;
    assert!(
        failed.load(Ordering::SeqCst) >= 1,
        "the front failed a challenge request"
    );
    assert_eq!(orders(admin, "failed").await, "1", "the first try failed");
    assert_eq!(orders(admin, "issued").await, "1");
    assert_eq!(
        new_orders.load(Ordering::SeqCst),
        1,
        "one order at the CA: the second try resumed the first's"
    );
    let (_, audit) = e2e::http_get(&format!("http://{admin}/audit")).await;
    assert!(
        audit.contains("acme-resume"),
        "the resume is audited: {audit}"
    );
}
