//! The ACME client (`acme` crate) against Pebble, Let's Encrypt's test CA, with its
//! random validation delays and refused nonces left on: an account made once and
//! kept (0600), a certificate ordered over HTTP-01 that chains to Pebble's root and
//! names the alias, its answers withdrawn afterwards; and a CA that answers with an
//! endless body fails the one request, quickly, with its reason.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};

use acme::{Answers, Client, Settings};
use bytes::Bytes;
use e2e::pebble::Pebble;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// HTTP-01 answers served on a port of the test's own (what the router's HTTP
/// listener does for it).
#[derive(Default)]
struct Served(Mutex<HashMap<String, String>>);

impl Served {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Answers for Served {
    fn publish(&self, token: &str, key_authorization: &str) {
        self.map()
            .insert(token.to_string(), key_authorization.to_string());
    }
    fn withdraw(&self, token: &str) {
        self.map().remove(token);
    }
}

/// Serves `answers` at `/.well-known/acme-challenge/TOKEN` on a port it reports.
async fn http01_server(answers: Arc<Served>) -> u16 {
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
                    let token = req
                        .uri()
                        .path()
                        .strip_prefix("/.well-known/acme-challenge/")
                        .map(str::to_string);
                    let answer = token.and_then(|t| answers.map().get(&t).cloned());
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
    let answers = Arc::new(Served::default());
    let port = http01_server(answers.clone()).await;
    let pebble = Pebble::start(port);
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
    let issued = client.issue(name, answers.as_ref()).await.expect("issued");
    assert!(
        answers.map().is_empty(),
        "answers withdrawn after the order"
    );
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

#[tokio::test]
async fn a_ca_sending_an_endless_body_fails_that_request_quickly_with_its_reason() {
    // A TLS server that answers every request with a body that never ends.
    let ca = e2e::pki::Ca::new("hostile CA test");
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
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt as _;
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let _ = tls
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
                    .await;
                let chunk = format!("{:x}\r\n{}\r\n", 65536, "x".repeat(65536));
                while tls.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
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
