//! Client certificates (`tls.client_certificates`, OpenShift's `clientTLS`):
//! the HTTPS and HTTP/3 listeners ask clients for a certificate, verify it
//! against the operator's CA bundle and CRLs (rustls's `WebPkiClientVerifier`)
//! and, when `allowed_subjects` is set, its subject against those patterns; a
//! certificate that fails any of them fails the handshake (the client sees a
//! TLS alert: `bad_certificate`, `certificate_revoked`, ...), before any
//! request. With `mode: optional` a client may present none; one it presents
//! is checked the same.
//!
//! The verified certificate reaches the member in fields of its own (see
//! [`ClientCert`]); a client's own copies of them are always dropped.
//!
//! The CRL files are read again when they change (checked every
//! [`CRL_CHECK`]): a revocation reaches the next handshake without a restart.
//! The CA bundle and the patterns need one.
//!
//! **Per name** (`tls.client_certificates_by_name`, HAProxy's crt-list
//! `verify` per SNI): a name (or `*.domain`, for the names one label under
//! it) may have a policy of its own, which its handshakes get instead of the
//! router-wide one ([`Policies`]: the ClientHello's server name picks the
//! TLS configuration). A request on a connection made under one policy for a
//! name under another is 421, as for a name with another certificate: h2
//! coalescing never carries a request past a certificate check it did not
//! pass. HTTP/3 handshakes have one configuration (QUIC's TLS is set before the
//! name is known), the router-wide one: a name with its own policy is
//! answered 421 there and not announced in `Alt-Svc`, so clients use TCP.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use http::HeaderValue;
use rustls::DistinguishedName;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use serde::Deserialize;

/// How often the CRL files are looked at for a change.
pub const CRL_CHECK: Duration = Duration::from_secs(10);

/// `tls.client_certificates`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientAuthSettings {
    pub mode: Mode,
    /// The CAs client certificates chain to (PEM).
    pub ca_file: PathBuf,
    /// Revocation lists (PEM or DER), read again when they change.
    #[serde(default)]
    pub crl_files: Vec<PathBuf>,
    /// Regular expressions a certificate's subject (as `/C=US/O=Org/CN=name`)
    /// must match one of; none: any.
    #[serde(default)]
    pub allowed_subjects: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// A handshake without a valid certificate fails.
    Required,
    /// A client may present none (its requests carry `X-SSL-Client-Verify: NONE`).
    Optional,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientAuthError {
    #[error("{0}: {1}")]
    Read(PathBuf, String),
    #[error("{0}: no certificate in it")]
    NoCa(PathBuf),
    #[error("allowed_subjects: {0}")]
    Pattern(#[from] regex::Error),
    #[error("{0}")]
    Verifier(String),
}

/// `tls.client_certificates_by_name`: names with a policy of their own.
pub type ByName = std::collections::BTreeMap<String, ClientAuthSettings>;

/// Which client-certificate policy a name's handshakes get: `0` the
/// router-wide one (`tls.client_certificates`, or none), `i` the `i`-th
/// name of `tls.client_certificates_by_name` (in its sorted order).
#[derive(Debug, Default)]
pub struct Policies {
    by_name: std::collections::HashMap<String, u16>,
}

impl Policies {
    pub fn new(by_name: &ByName) -> Policies {
        Policies {
            by_name: by_name
                .keys()
                .zip(1u16..)
                .map(|(n, i)| (n.to_ascii_lowercase(), i))
                .collect(),
        }
    }

    /// The policy of `name` (lower-case): its own, else its wildcard's one
    /// label up, else the router-wide one.
    pub fn of(&self, name: Option<&str>) -> u16 {
        let (Some(name), false) = (name, self.by_name.is_empty()) else {
            return 0;
        };
        self.by_name
            .get(name)
            .or_else(|| self.by_name.get(&crate::tls::store::wildcard_of(name)?))
            .copied()
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The verifier the TLS listeners use.
#[derive(Debug)]
pub struct Verifier {
    settings: ClientAuthSettings,
    provider: Arc<CryptoProvider>,
    inner: ArcSwap<Arc<dyn ClientCertVerifier>>,
    hints: Vec<DistinguishedName>,
    subjects: Vec<regex::Regex>,
    /// The CRL files' modification times when last read.
    read_at: Mutex<Vec<Option<SystemTime>>>,
}

impl Verifier {
    /// Reads the CA bundle and the CRLs and compiles the patterns.
    pub fn new(
        settings: &ClientAuthSettings,
        provider: Arc<CryptoProvider>,
    ) -> Result<Arc<Verifier>, ClientAuthError> {
        let subjects = settings
            .allowed_subjects
            .iter()
            .map(|p| regex::Regex::new(p))
            .collect::<Result<Vec<_>, _>>()?;
        let inner = build(settings, &provider)?;
        let hints = inner.root_hint_subjects().to_vec();
        Ok(Arc::new(Verifier {
            read_at: Mutex::new(stamps(&settings.crl_files)),
            settings: settings.clone(),
            provider,
            inner: ArcSwap::from_pointee(inner),
            hints,
            subjects,
        }))
    }

    /// Reads the CRLs again if a file changed; a file that cannot be read now
    /// keeps the lists in force (logged).
    pub fn refresh(&self) {
        let now = stamps(&self.settings.crl_files);
        let mut read = self.read_at.lock().unwrap_or_else(|p| p.into_inner());
        if *read == now {
            return;
        }
        match build(&self.settings, &self.provider) {
            Ok(v) => {
                self.inner.store(Arc::new(v));
                *read = now;
                tracing::info!("client certificates: revocation lists read again");
            }
            Err(e) => {
                tracing::error!(error = %e, "client certificates: the revocation lists in force stay")
            }
        }
    }

    fn subject_allowed(&self, cert: &CertificateDer<'_>) -> bool {
        self.subjects.is_empty()
            || subject(cert).is_some_and(|s| self.subjects.iter().any(|r| r.is_match(&s)))
    }
}

/// The files' modification times.
fn stamps(files: &[PathBuf]) -> Vec<Option<SystemTime>> {
    files
        .iter()
        .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
        .collect()
}

fn build(
    s: &ClientAuthSettings,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, ClientAuthError> {
    let read =
        |p: &PathBuf, e: &dyn std::fmt::Display| ClientAuthError::Read(p.clone(), e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&s.ca_file).map_err(|e| read(&s.ca_file, &e))? {
        let cert = cert.map_err(|e| read(&s.ca_file, &e))?;
        roots.add(cert).map_err(|e| read(&s.ca_file, &e))?;
    }
    if roots.is_empty() {
        return Err(ClientAuthError::NoCa(s.ca_file.clone()));
    }
    let mut crls = Vec::new();
    for file in &s.crl_files {
        let bytes = std::fs::read(file).map_err(|e| read(file, &e))?;
        if bytes.starts_with(b"-----") {
            for crl in CertificateRevocationListDer::pem_slice_iter(&bytes) {
                crls.push(crl.map_err(|e| read(file, &e))?);
            }
        } else {
            crls.push(CertificateRevocationListDer::from(bytes));
        }
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .with_crls(crls);
    let builder = match s.mode {
        Mode::Required => builder,
        Mode::Optional => builder.allow_unauthenticated(),
    };
    builder
        .build()
        .map_err(|e| ClientAuthError::Verifier(e.to_string()))
}

impl ClientCertVerifier for Verifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.settings.mode == Mode::Required
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .load()
            .verify_client_cert(end_entity, intermediates, now)?;
        if !self.subject_allowed(end_entity) {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ));
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.load().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.load().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.load().supported_verify_schemes()
    }
}

/// A certificate's subject as OpenSSL's one-line form writes it
/// (`/C=US/O=Org/CN=name`, what haproxy's `ssl_c_s_dn` and OpenShift's
/// `allowedSubjectPatterns` use).
pub fn subject(cert: &CertificateDer<'_>) -> Option<String> {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(cert.as_ref()).ok()?;
    let mut out = String::new();
    for rdn in cert.tbs_certificate.subject.0.iter() {
        for atv in rdn.0.iter() {
            out.push('/');
            out.push_str(&atv.to_string());
        }
    }
    Some(out)
}

/// What a connection's client certificate tells its requests' members:
/// `X-SSL-Client-Verify` (`SUCCESS`, or `NONE` when `optional` and none was
/// presented), `X-SSL-Client-DN` (the subject, one-line form) and
/// `X-SSL-Client-Cert` (the certificate, DER in base64: what OpenShift's
/// router sends under that name).
#[derive(Debug, Clone)]
pub struct ClientCert {
    pub verify: HeaderValue,
    pub dn: Option<HeaderValue>,
    pub cert: Option<HeaderValue>,
}

impl ClientCert {
    /// The bytes its fields take in a member's head, about (names and values).
    pub fn lines_len(&self) -> usize {
        let len = |v: &Option<HeaderValue>| v.as_ref().map_or(0, HeaderValue::len);
        96 + self.verify.len() + len(&self.dn) + len(&self.cert)
    }

    /// Of a handshake whose client presented `chain` (verified: the
    /// handshake succeeded), or none.
    pub fn of(chain: Option<&[CertificateDer<'_>]>) -> ClientCert {
        let Some(leaf) = chain.and_then(|c| c.first()) else {
            return ClientCert {
                verify: HeaderValue::from_static("NONE"),
                dn: None,
                cert: None,
            };
        };
        use base64ct::Encoding as _;
        let b64 = base64ct::Base64::encode_string(leaf.as_ref());
        ClientCert {
            verify: HeaderValue::from_static("SUCCESS"),
            dn: subject(leaf).and_then(|s| HeaderValue::from_str(&s).ok()),
            cert: HeaderValue::from_str(&b64).ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ClientAuthSettings {
        ClientAuthSettings {
            mode: Mode::Required,
            ca_file: PathBuf::from("/dev/null"),
            crl_files: Vec::new(),
            allowed_subjects: Vec::new(),
        }
    }

    #[test]
    fn a_name_gets_its_own_policy_else_its_wildcards_else_the_router_wide_one() {
        let by_name: ByName = ["partner.example.com", "*.b2b.example.com"]
            .into_iter()
            .map(|n| (n.to_string(), settings()))
            .collect();
        let p = Policies::new(&by_name);
        // Sorted: "*.b2b..." is 1, "partner..." is 2.
        assert_eq!(p.of(Some("partner.example.com")), 2);
        assert_eq!(p.of(Some("shop.b2b.example.com")), 1);
        assert_eq!(p.of(Some("*.b2b.example.com")), 1);
        // Two labels under the wildcard: not covered, as for certificates.
        assert_eq!(p.of(Some("a.shop.b2b.example.com")), 0);
        assert_eq!(p.of(Some("www.example.com")), 0);
        assert_eq!(p.of(None), 0);
        assert_eq!(Policies::default().of(Some("partner.example.com")), 0);
    }
}
