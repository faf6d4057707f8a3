//! Test certificates made with rcgen: a private CA, and certificates it signs for
//! servers (by DNS name or IP) and clients. Written as PEM files, plus PKCS12 stores
//! for Java servers (made by openssl and keytool, as an operator would).

use std::path::{Path, PathBuf};
use std::process::Command;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

/// A certificate and its key, as PEM.
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("key");
        let cert = params.self_signed(&key).expect("self-signed");
        Ca {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A certificate for these names (DNS names or IP addresses).
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A fresh directory (tempdir `tag`) holding a new CA (`ca.pem`) and a
/// `*.example.com` certificate it signed (`wildcard.crt`, `wildcard.key`).
pub struct Wildcard {
    /// Signs further leaves (aliases with certificates of their own).
    pub ca: Ca,
    pub dir: PathBuf,
    pub ca_file: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Wildcard {
    pub fn new(tag: &str) -> Wildcard {
        let dir = crate::tempdir(tag);
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = Ca::new(&format!("{tag} test CA"));
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &ca.pem).expect("write CA");
        let (cert, key) = write_leaf(&dir, "wildcard", &ca.leaf(&["*.example.com"]));
        Wildcard {
            ca,
            dir,
            ca_file,
            cert,
            key,
        }
    }

    /// The `tls:` section serving it as the default certificate, no redirect.
    pub fn tls_section(&self) -> String {
        format!(
            "tls:\n  default_cert: {}\n  default_key: {}\n  redirect_http: false\n",
            self.cert.display(),
            self.key.display()
        )
    }
}

/// Writes `name.crt` / `name.key` into `dir`; returns their paths.
pub fn write_leaf(dir: &Path, name: &str, leaf: &Leaf) -> (PathBuf, PathBuf) {
    let (c, k) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, &leaf.cert_pem).expect("write cert");
    std::fs::write(&k, &leaf.key_pem).expect("write key");
    (c, k)
}

/// A PKCS12 keystore holding `leaf` (password `changeit`).
pub fn pkcs12_keystore(dir: &Path, leaf: &Leaf, ca_pem: &str) -> PathBuf {
    let (cert, key) = write_leaf(dir, "keystore-leaf", leaf);
    let ca = dir.join("keystore-ca.crt");
    std::fs::write(&ca, ca_pem).expect("write ca");
    let out = dir.join("keystore.p12");
    let ok = Command::new("openssl")
        .args([
            "pkcs12",
            "-export",
            "-name",
            "server",
            "-passout",
            "pass:changeit",
        ])
        .arg("-in")
        .arg(&cert)
        .arg("-inkey")
        .arg(&key)
        .arg("-certfile")
        .arg(&ca)
        .arg("-out")
        .arg(&out)
        .status()
        .expect("openssl runs")
        .success();
    assert!(ok, "openssl pkcs12 failed");
    out
}

/// A PKCS12 truststore trusting `ca_pem` (password `changeit`), made with keytool.
pub fn pkcs12_truststore(dir: &Path, ca_pem: &str) -> PathBuf {
    let ca = dir.join("truststore-ca.crt");
    std::fs::write(&ca, ca_pem).expect("write ca");
    let out = dir.join("truststore.p12");
    let ok = Command::new("keytool")
        .args([
            "-importcert",
            "-noprompt",
            "-alias",
            "ca",
            "-storetype",
            "PKCS12",
            "-storepass",
            "changeit",
        ])
        .arg("-file")
        .arg(&ca)
        .arg("-keystore")
        .arg(&out)
        .status()
        .expect("keytool runs (it comes with Java)")
        .success();
    assert!(ok, "keytool failed");
    out
}

/// A TLS 1.3 client configuration (aws-lc-rs) trusting the CA certificates
/// in the PEM file `ca`, offering `alpn`: the test clients' (`h2-client`,
/// `h3-client`).
pub fn client_tls(ca: &str, alpn: &[u8]) -> anyhow::Result<rustls::ClientConfig> {
    use anyhow::Context as _;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).with_context(|| ca.to_string())?;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![alpn.to_vec()];
    Ok(tls)
}
