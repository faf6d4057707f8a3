//! Key formats: the fixtures' certificates, plus keys converted by the `openssl`
//! command (the tool operators use to make them) into every format the broker may send.

use std::path::PathBuf;
use std::process::Command;

use spi_consumer::decode::{Decoded, RoutingEvent, decode};

use super::*;

fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

fn fixture_bundle(name: &str) -> spi_consumer::decode::CertBundle {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/spi-events")
        .join(name);
    let bytes = std::fs::read(&path).expect("fixture");
    match decode(&bytes) {
        Ok(Decoded::Event(RoutingEvent::AddSsl { bundle, .. })) => bundle,
        other => panic!("{name}: not add_ssl: {other:?}"),
    }
}

#[test]
fn fixture_08_plain_pkcs1_with_chain() {
    let b = fixture_bundle("08-add_ssl.yaml");
    let l = load(
        &b.certificate_pem,
        &b.private_key_pem,
        b.pass_phrase.as_deref(),
        &provider(),
    )
    .expect("loads");
    assert_eq!(l.key.cert.len(), 2, "leaf and CA");
    assert!(l.not_after > 4_000_000_000, "valid until 2119");
}

#[test]
fn fixture_10_legacy_aes_with_pass_phrase() {
    let b = fixture_bundle("10-add_ssl-pass_phrase.yaml");
    assert!(b.private_key_pem.contains("Proc-Type: 4,ENCRYPTED"));
    let l = load(
        &b.certificate_pem,
        &b.private_key_pem,
        b.pass_phrase.as_deref(),
        &provider(),
    );
    assert!(l.is_ok(), "{l:?}");
    let wrong = load(
        &b.certificate_pem,
        &b.private_key_pem,
        Some("wrong"),
        &provider(),
    );
    assert_eq!(wrong.err(), Some(CertError::WrongPassPhrase));
    let none = load(&b.certificate_pem, &b.private_key_pem, None, &provider());
    assert_eq!(none.err(), Some(CertError::PassPhraseMissing));
}

#[test]
fn fixture_31_ruby2x_dialect() {
    let b = fixture_bundle("31-ruby2x-add_ssl.yaml");
    load(
        &b.certificate_pem,
        &b.private_key_pem,
        b.pass_phrase.as_deref(),
        &provider(),
    )
    .expect("loads");
}

#[test]
fn key_of_another_certificate_is_a_mismatch() {
    let a = fixture_bundle("08-add_ssl.yaml");
    let b = fixture_bundle("10-add_ssl-pass_phrase.yaml");
    let r = load(
        &a.certificate_pem,
        &b.private_key_pem,
        b.pass_phrase.as_deref(),
        &provider(),
    );
    assert_eq!(r.err(), Some(CertError::KeyMismatch));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    let a = fixture_bundle("08-add_ssl.yaml");
    for (cert, key) in [
        ("", a.private_key_pem.as_str()),
        (a.certificate_pem.as_str(), ""),
        (
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            a.private_key_pem.as_str(),
        ),
        (
            a.certificate_pem.as_str(),
            "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        ),
        (
            a.certificate_pem.as_str(),
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        ),
    ] {
        assert!(load(cert, key, Some("x"), &provider()).is_err());
    }
}

/// Runs `openssl` with `args`, feeding `input`; returns stdout.
fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("openssl (Debian package openssl) must be installed");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write");
    let out = child.wait_with_output().expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn cert_for(key: &rcgen::KeyPair) -> String {
    rcgen::CertificateParams::new(vec!["alias.example.net".to_string()])
        .expect("params")
        .self_signed(key)
        .expect("cert")
        .pem()
}

#[test]
fn every_key_format_openssl_writes() {
    let p = provider();
    // RSA: PKCS#8 from rcgen, PKCS#1 via openssl, each also encrypted.
    let rsa = rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).expect("rsa");
    let ec = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("ec");
    for (name, key) in [("rsa", &rsa), ("ec", &ec)] {
        let cert = cert_for(key);
        let pkcs8 = key.serialize_pem();
        // OpenSSL 3 writes PKCS#8 unless told otherwise.
        let kind: &[&str] = if name == "rsa" {
            &["rsa", "-traditional"]
        } else {
            &["ec"]
        };
        let with = |extra: &[&str]| {
            let args: Vec<&str> = kind.iter().chain(extra).copied().collect();
            String::from_utf8(openssl(&args, pkcs8.as_bytes())).expect("utf8")
        };
        let traditional = with(&[]);
        let legacy_aes = with(&["-aes256", "-passout", "pass:s3cret"]);
        let legacy_3des = with(&["-des3", "-passout", "pass:s3cret"]);
        assert!(
            !traditional.contains("BEGIN PRIVATE KEY"),
            "{name}: {traditional:.40}"
        );
        let enc_pkcs8 = String::from_utf8(openssl(
            &[
                "pkcs8",
                "-topk8",
                "-v2",
                "aes-256-cbc",
                "-passout",
                "pass:s3cret",
            ],
            pkcs8.as_bytes(),
        ))
        .expect("utf8");
        assert!(legacy_aes.contains("DEK-Info: AES-256-CBC"), "{name}");
        assert!(legacy_3des.contains("DEK-Info: DES-EDE3-CBC"), "{name}");
        assert!(enc_pkcs8.contains("ENCRYPTED PRIVATE KEY"), "{name}");
        for (format, pem, pass) in [
            ("pkcs8", &pkcs8, None),
            ("traditional", &traditional, None),
            ("legacy aes", &legacy_aes, Some("s3cret")),
            ("legacy 3des", &legacy_3des, Some("s3cret")),
            ("encrypted pkcs8", &enc_pkcs8, Some("s3cret")),
        ] {
            let r = load(&cert, pem, pass, &p);
            assert!(r.is_ok(), "{name} {format}: {r:?}");
            if pass.is_some() {
                let wrong = load(&cert, pem, Some("nope"), &p);
                assert_eq!(
                    wrong.err(),
                    Some(CertError::WrongPassPhrase),
                    "{name} {format}"
                );
            }
        }
    }
}

#[test]
fn dsa_keys_are_refused_by_name() {
    let params = openssl(&["dsaparam", "2048"], b"");
    let dir = std::env::temp_dir().join(format!("dsa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let params_path = dir.join("params.pem");
    std::fs::write(&params_path, params).expect("write");
    let key = openssl(&["gendsa", params_path.to_str().expect("path")], b"");
    let traditional = String::from_utf8(openssl(&["dsa"], &key)).expect("utf8");
    let pkcs8 = String::from_utf8(openssl(&["pkcs8", "-topk8", "-nocrypt"], &key)).expect("utf8");
    let _ = std::fs::remove_dir_all(&dir);
    let cert = fixture_bundle("08-add_ssl.yaml").certificate_pem;
    for pem in [traditional, pkcs8] {
        let r = load(&cert, &pem, None, &provider());
        assert_eq!(r.err(), Some(CertError::UnsupportedKey("DSA")), "{pem:.40}");
    }
}

#[test]
fn evp_bytes_to_key_matches_openssl() {
    // `openssl enc -P` prints the key EVP_BytesToKey derives (MD5, one round).
    let legacy = Command::new("openssl")
        .args([
            "enc",
            "-aes-128-cbc",
            "-k",
            "pass",
            "-S",
            "0102030405060708",
            "-P",
            "-md",
            "md5",
        ])
        .output()
        .expect("openssl");
    let text = String::from_utf8_lossy(&legacy.stdout);
    let key_hex = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("key="))
        .expect("key line");
    let ours = evp_bytes_to_key(b"pass", &[1, 2, 3, 4, 5, 6, 7, 8], 16);
    assert_eq!(hex::decode(key_hex.trim()).expect("hex"), ours);
}
