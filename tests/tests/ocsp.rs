//! OCSP stapling (`tls.ocsp`) through the real path: an openssl CA whose
//! server certificates name an `openssl ocsp` responder; `openssl s_client
//! -status` shows what is stapled and curl `--cert-status` checks it as a
//! strict client does. A revoked certificate is not stapled; a staple outlives
//! a restart with the responder gone; a responder that hangs delays no
//! handshake.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use e2e::openssl_ca::OpensslCa;
use e2e::{Backend, TestRouter, events};

const HOST: &str = "ha-myapp-demo.example.com";
const REVOKED: &str = "revoked.example.com";

/// `openssl s_client -status` for `name`: its whole output (the handshake
/// must complete: the output then has a "New, TLS" line).
async fn s_client_status(https: SocketAddr, name: &str) -> String {
    let out = tokio::process::Command::new("openssl")
        .args(["s_client", "-status", "-connect", &https.to_string()])
        .args(["-servername", name])
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("New, TLS"), "the handshake failed: {text}");
    text
}

/// The `tls:` section serving `stem`'s chain as the default certificate,
/// stapling on.
fn tls_section(ca: &OpensslCa, stem: &str, timeout: &str) -> String {
    format!(
        "tls:\n  default_cert: {}\n  default_key: {}\n  redirect_http: false\n  ocsp:\n    stapling: true\n    timeout: {timeout}\n",
        ca.path(&format!("{stem}.chain")),
        ca.path(&format!("{stem}.key")),
    )
}

async fn routed(r: &TestRouter) -> Backend {
    let b = Backend::start().await;
    r.drop_event("00.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_health(b.addr, "up").await;
    b
}

/// curl to `HOST`; with `--cert-status` (`cert_status`) curl refuses the
/// connection unless a staple is sent, verifies, and says the certificate is
/// good.
async fn curl(https: SocketAddr, ca: &Path, cert_status: bool) -> Result<(), String> {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "--max-time", "10", "--fail"])
        .args(cert_status.then_some("--cert-status"))
        .arg("--cacert")
        .arg(ca)
        .args(["--resolve", &format!("{HOST}:{}:127.0.0.1", https.port())])
        .arg(format!("https://{HOST}:{}/", https.port()))
        .output()
        .await
        .expect("curl");
    out.status
        .success()
        .then_some(())
        .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn answers_are_stapled_checked_by_curl_refused_when_revoked_and_kept_across_a_restart() {
    let dir = e2e::tempdir("ocsp");
    let ca = OpensslCa::new(&dir, "OCSP Test CA");
    let responder_addr = SocketAddr::from(([127, 0, 0, 1], e2e::free_port([127, 0, 0, 1].into())));
    let url = format!("http://{responder_addr}/");
    let good = ca.issue_server(HOST, &url);
    let revoked = ca.issue_server(REVOKED, &url);
    ca.revoke(&revoked);
    let responder = ca.responder(responder_addr).await;
    let root = dir.join("router");
    let tls = tls_section(&ca, &good, "10s");
    let r = TestRouter::start_https(root.clone(), &tls).await;
    let _b = routed(&r).await;
    let https = r.https.expect("https");
    // An alias with a certificate of its own, which its CA has revoked.
    let read = |f: &str| std::fs::read_to_string(ca.path(f)).expect("pem");
    r.drop_event("01.yaml", &events::add_alias("myapp", "demo", REVOKED));
    r.drop_event(
        "02.yaml",
        &events::add_ssl(
            "myapp",
            "demo",
            REVOKED,
            &read(&format!("{revoked}.chain")),
            &read(&format!("{revoked}.key")),
            None,
        ),
    );

    // 1. The answer is fetched and stapled; curl checks it as a strict client.
    e2e::eventually(
        "the default certificate is stapled",
        Duration::from_secs(60),
        async || {
            s_client_status(https, HOST)
                .await
                .contains("Cert Status: good")
        },
    )
    .await;
    let out = s_client_status(https, HOST).await;
    assert!(out.contains("OCSP Response Status: successful"), "{out}");
    curl(https, Path::new(&ca.path("ca.crt")), true)
        .await
        .expect("curl --cert-status accepts the staple");

    // 2. The revoked certificate: counted, never stapled.
    e2e::eventually(
        "the revoked answer is counted",
        Duration::from_secs(60),
        async || {
            r.metric("router_tls_ocsp_fetches_total{result=\"revoked\"}")
                .await
                >= Some(1.0)
        },
    )
    .await;
    let out = s_client_status(https, REVOKED).await;
    assert!(out.contains("OCSP response: no response sent"), "{out}");

    // 3. Metrics and /status show the staple's age.
    let this_update = r
        .metric("router_tls_ocsp_staple_timestamp_seconds{alias=\"default\"}")
        .await
        .expect("the default's staple gauge");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    assert!(
        this_update <= now + 300.0 && this_update > now - 3600.0,
        "{this_update} vs {now}"
    );
    assert_eq!(r.metric("router_tls_ocsp_staples").await, Some(1.0));
    let (_, status) = r.admin_get("/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    let default = status["certificates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "default"))
        .expect("the default in /status")
        .clone();
    assert!(
        default["staple_age_seconds"]
            .as_i64()
            .is_some_and(|a| a >= 0),
        "{default}"
    );

    // 4. The responder goes, the router restarts: the saved staple is served
    // from the first handshake.
    drop(responder);
    r.stop().await;
    let r = TestRouter::start_https(root, &tls).await;
    let out = s_client_status(r.https.expect("https"), HOST).await;
    assert!(
        out.contains("Cert Status: good"),
        "the saved staple after a restart: {out}"
    );
}

#[tokio::test]
async fn a_responder_that_hangs_delays_no_handshake() {
    let dir = e2e::tempdir("ocsp-hang");
    let ca = OpensslCa::new(&dir, "OCSP Hang CA");
    // A responder that accepts and never answers.
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", hang.local_addr().expect("addr"));
    let stem = ca.issue_server(HOST, &url);
    // A long fetch timeout: the fetch stays in flight for the whole test.
    let r = TestRouter::start_https(dir.join("router"), &tls_section(&ca, &stem, "5m")).await;
    let _b = routed(&r).await;
    let (held, _) = tokio::time::timeout(Duration::from_secs(60), hang.accept())
        .await
        .expect("the router asks the responder within a scan")
        .expect("accept");
    // The fetch is in flight (nothing answered it, nothing counted it) ...
    assert_eq!(
        r.metric("router_tls_ocsp_fetches_total{result=\"fetch\"}")
            .await,
        None
    );
    // ... and handshakes go on, without a staple.
    let https = r.https.expect("https");
    for _ in 0..3 {
        let out = s_client_status(https, HOST).await;
        assert!(out.contains("OCSP response: no response sent"), "{out}");
    }
    let ca_file = ca.path("ca.crt");
    curl(https, Path::new(&ca_file), false)
        .await
        .expect("a request while the fetch hangs");
    assert!(
        curl(https, Path::new(&ca_file), true).await.is_err(),
        "curl --cert-status must refuse: nothing is stapled"
    );
    drop(held);
}

#[tokio::test]
async fn on_a_pair_b_staples_what_a_fetched_without_asking_the_responder() {
    let dir = e2e::tempdir("ocsp-pair");
    let ca = OpensslCa::new(&dir, "OCSP Pair CA");
    let responder_addr = SocketAddr::from(([127, 0, 0, 1], e2e::free_port([127, 0, 0, 1].into())));
    let stem = ca.issue_server(HOST, &format!("http://{responder_addr}/"));
    let responder = ca.responder(responder_addr).await;
    let tls = tls_section(&ca, &stem, "10s");
    let a = TestRouter::start_https(dir.join("a"), &tls).await;
    e2e::eventually("router a staples", Duration::from_secs(60), async || {
        s_client_status(a.https.expect("https"), HOST)
            .await
            .contains("Cert Status: good")
    })
    .await;
    // The responder goes: whatever b staples now came from a.
    drop(responder);
    let token = dir.join("token");
    std::fs::write(&token, "ocsp-pair-token\n").expect("token");
    let b_config = format!(
        "{tls}admin:\n  token_file: {}\npair:\n  peer: \"{}\"\n  node: b\n",
        token.display(),
        a.admin
    );
    let b = TestRouter::start_https(dir.join("b"), &b_config).await;
    e2e::eventually(
        "router b staples a's answer",
        Duration::from_secs(60),
        async || {
            s_client_status(b.https.expect("https"), HOST)
                .await
                .contains("Cert Status: good")
        },
    )
    .await;
    assert!(
        b.metric("router_tls_ocsp_fetches_total{result=\"peer\"}")
            .await
            >= Some(1.0)
    );
    assert_eq!(
        b.metric("router_tls_ocsp_fetches_total{result=\"ok\"}")
            .await,
        None
    );
    // a serves its saved answers by name; a name that is not one is 404.
    let (status, _) = a.admin_get("/ocsp/..%2Fpair.json").await;
    assert_eq!(status, 404);
}
