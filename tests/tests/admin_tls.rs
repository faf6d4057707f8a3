//! The admin listener off loopback: TLS only, with the pair's own CA, and what
//! `router check-pair` does with it; the real binary.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e::pki::{Ca, write_leaf};
use e2e::process::RouterProcess;
use e2e::{raw, tlsclient};

/// A router whose admin listener is on every address (off loopback), with an
/// admin certificate for 127.0.0.1 from `ca`, and `shared` (YAML) added.
fn config(dir: &Path, admin: &str, ca: &Ca, ca_file: &Path, shared: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("spool")).expect("spool");
    let (cert, key) = write_leaf(dir, "admin", &ca.leaf(&["127.0.0.1", "localhost"]));
    let cfg = dir.join("router.yaml");
    std::fs::write(
        &cfg,
        format!(
            "cloud_domain: example.com\nstate_dir: {d}/state\n\
             listen:\n  http: 127.0.0.1:0\n  admin: {admin}\n\
             spi: {{ source: spool, spool: {{ path: {d}/spool, interval: 100ms }} }}\n\
             access_log: {{ format: json, enabled: false }}\n\
             admin:\n  tls_cert: {c}\n  tls_key: {k}\n  tls_ca: {ca}\n{shared}",
            d = dir.display(),
            c = cert.display(),
            k = key.display(),
            ca = ca_file.display(),
        ),
    )
    .expect("config");
    cfg
}

fn loopback(addr: SocketAddr) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], addr.port()))
}

#[tokio::test]
async fn off_loopback_the_admin_api_speaks_tls_only_and_check_pair_verifies_it() {
    let root = e2e::tempdir("admin-tls");
    std::fs::create_dir_all(&root).expect("root");
    let ca = Ca::new("pair CA");
    let ca_file = root.join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).expect("ca");
    let key = root.join("affinity.key");
    std::fs::write(&key, [7u8; 32]).expect("key");
    let shared = format!("affinity_key_file: {}\n", key.display());
    let (a_dir, b_dir) = (root.join("a"), root.join("b"));
    let a = RouterProcess::start(&config(&a_dir, "0.0.0.0:0", &ca, &ca_file, &shared)).await;
    let b = RouterProcess::start(&config(&b_dir, "0.0.0.0:0", &ca, &ca_file, &shared)).await;
    let (a_admin, b_admin) = (
        a.admin.expect("a's admin listener"),
        b.admin.expect("b's admin listener"),
    );
    assert!(a_admin.ip().is_unspecified());
    // Plain HTTP gets no answer.
    let plain = raw::exchange(
        loopback(a_admin),
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        raw::status(&plain),
        None,
        "{}",
        String::from_utf8_lossy(&plain)
    );
    // TLS, verified against the pair's CA: the API answers.
    let client = tlsclient::client_config(&ca.pem, &[b"http/1.1"]);
    let stream = tlsclient::connect(loopback(a_admin), "127.0.0.1", &client)
        .await
        .expect("handshake verified with the pair's CA");
    let mut sender = tlsclient::http1(stream).await;
    let (status, _) = tlsclient::get(&mut sender, "127.0.0.1", "/healthz").await;
    assert_eq!(status, 200);
    // A client that does not trust that CA does not get through.
    let stranger = Ca::new("another CA");
    let other = tlsclient::client_config(&stranger.pem, &[b"http/1.1"]);
    assert!(
        tlsclient::connect(loopback(a_admin), "127.0.0.1", &other)
            .await
            .is_err()
    );
    // `router check-pair` (over TLS to both): the same key and settings.
    let cli = config(
        &root.join("cli"),
        &a_admin.to_string(),
        &ca,
        &ca_file,
        &shared,
    );
    let out = tokio::process::Command::new(e2e::bin("router"))
        .arg("--config")
        .arg(&cli)
        .args(["check-pair", &loopback(b_admin).to_string()])
        .output()
        .await
        .expect("router check-pair");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("the same app settings"), "{text}");
    drop((a, b));
}

#[test]
fn off_loopback_without_a_certificate_the_router_refuses_to_start() {
    let dir = e2e::tempdir("admin-tls-none");
    std::fs::create_dir_all(dir.join("spool")).expect("spool");
    let cfg = dir.join("router.yaml");
    std::fs::write(
        &cfg,
        format!(
            "cloud_domain: example.com\nstate_dir: {d}/state\n\
             listen:\n  http: 127.0.0.1:0\n  admin: 0.0.0.0:0\n\
             spi: {{ source: spool, spool: {{ path: {d}/spool }} }}\n",
            d = dir.display()
        ),
    )
    .expect("config");
    let out = std::process::Command::new(e2e::bin("router"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("listen.admin") && err.contains("admin.tls_cert"),
        "{err}"
    );
}
