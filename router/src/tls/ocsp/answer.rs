//! OCSP (RFC 6960) as a stapling server needs it: the request for one
//! certificate, and the checks an answer passes before it is stapled.
//!
//! An answer is stapled only when it is a successful basic response, names
//! this certificate (its serial and its issuer's name and key hashes), is
//! signed by the issuer or by a responder certificate the issuer signed for
//! OCSP (`id-kp-OCSPSigning`, valid now), and is current (`thisUpdate` not
//! ahead of our clock by more than [`SKEW`], `nextUpdate` not passed). A
//! client checks a staple the same way; one that fails those checks can
//! break strict clients' handshakes, so it never reaches one. Signatures are
//! checked with the TLS provider's own algorithms (aws-lc-rs), the ones that
//! check clients' certificates.
//!
//! The types are RustCrypto's `x509-ocsp`; this module holds only the checks.
//! Everything here reads bytes a responder (or a file) sent: each step is a
//! `Result`, and `fuzz/fuzz_targets/ocsp_answer.rs` feeds it arbitrary bytes.

use std::time::Duration;

use aws_lc_rs::digest;
use rustls::pki_types::{CertificateDer, SignatureVerificationAlgorithm};
use x509_cert::Certificate;
use x509_cert::der::asn1::{AnyRef, BitString, Null, ObjectIdentifier, OctetString};
use x509_cert::der::{Decode, Encode, Reader, SliceReader};
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_ocsp::{
    BasicOcspResponse, CertId, CertStatus, OcspRequest, OcspResponse, OcspResponseStatus, Request,
    ResponderId, TbsRequest, Version,
};

/// How far ahead of our clock a responder's `thisUpdate` may be.
pub const SKEW: Duration = Duration::from_secs(300);

/// How long an answer without `nextUpdate` is kept, from its `thisUpdate`
/// (RFC 6960 §2.4: newer information is always available; nginx keeps such an
/// answer an hour too).
pub const NO_NEXT_UPDATE: Duration = Duration::from_secs(3600);

const SHA1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.14.3.2.26");
const SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
const AIA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.1.1");
const AD_OCSP: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1");
const OCSP_BASIC: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.48.1.1");
const EKU: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37");
const KP_OCSP_SIGNING: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.9");

/// Why an answer (or a certificate) cannot be stapled; [`reason`](Self::reason)
/// is the `result` label of `router_tls_ocsp_fetches_total`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OcspError {
    #[error("the chain has no issuer certificate after the leaf")]
    NoIssuer,
    #[error("the certificate names no http:// OCSP responder")]
    NoResponder,
    #[error("malformed: {0}")]
    Malformed(String),
    #[error("the responder answered {0:?}")]
    NotSuccessful(OcspResponseStatus),
    #[error("the answer is not about this certificate")]
    NotOurs,
    #[error("the answer's signature does not check against the issuer")]
    Signature,
    #[error("the answer is not current")]
    NotCurrent,
    #[error("the certificate is revoked")]
    Revoked,
    #[error("the responder does not know the certificate")]
    Unknown,
}

impl OcspError {
    pub fn reason(&self) -> &'static str {
        match self {
            OcspError::NoIssuer => "no_issuer",
            OcspError::NoResponder => "no_responder",
            OcspError::Malformed(_) => "malformed",
            OcspError::NotSuccessful(_) => "not_successful",
            OcspError::NotOurs => "not_ours",
            OcspError::Signature => "signature",
            OcspError::NotCurrent => "not_current",
            OcspError::Revoked => "revoked",
            OcspError::Unknown => "unknown",
        }
    }
}

fn malformed(e: impl std::fmt::Display) -> OcspError {
    OcspError::Malformed(e.to_string())
}

/// A good answer's window, in seconds since the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Current {
    pub this_update: u64,
    pub next_update: u64,
}

/// A served certificate and its issuer: what a request names and an answer
/// is checked against.
#[derive(Debug)]
pub struct Subject {
    leaf: Certificate,
    issuer: Certificate,
}

impl Subject {
    /// The leaf and the certificate after it, which must be its issuer.
    pub fn new(chain: &[CertificateDer<'_>]) -> Result<Subject, OcspError> {
        let [leaf, issuer, ..] = chain else {
            return Err(OcspError::NoIssuer);
        };
        let leaf = Certificate::from_der(leaf).map_err(malformed)?;
        let issuer = Certificate::from_der(issuer).map_err(malformed)?;
        if leaf.tbs_certificate.issuer != issuer.tbs_certificate.subject {
            return Err(OcspError::NoIssuer);
        }
        Ok(Subject { leaf, issuer })
    }

    /// The leaf's OCSP responder (its Authority Information Access), when it
    /// is plain HTTP as RFC 5019 and the CA/Browser Forum require.
    pub fn responder(&self) -> Result<String, OcspError> {
        use x509_cert::ext::pkix::AuthorityInfoAccessSyntax;
        use x509_cert::ext::pkix::name::GeneralName;
        let ext = self
            .leaf
            .tbs_certificate
            .extensions
            .iter()
            .flatten()
            .find(|e| e.extn_id == AIA)
            .ok_or(OcspError::NoResponder)?;
        let aia =
            AuthorityInfoAccessSyntax::from_der(ext.extn_value.as_bytes()).map_err(malformed)?;
        aia.0
            .iter()
            .filter(|d| d.access_method == AD_OCSP)
            .find_map(|d| match &d.access_location {
                GeneralName::UniformResourceIdentifier(u) => Some(u.as_str())
                    .filter(|u| u.starts_with("http://"))
                    .map(String::from),
                _ => None,
            })
            .ok_or(OcspError::NoResponder)
    }

    /// The leaf's CertID, hashed with SHA-1 as every responder accepts
    /// (RFC 5019 §2.1.1).
    fn cert_id(&self) -> Result<CertId, OcspError> {
        let (name, key) = self.issuer_hashes(&digest::SHA1_FOR_LEGACY_USE_ONLY)?;
        Ok(CertId {
            hash_algorithm: AlgorithmIdentifierOwned {
                oid: SHA1,
                parameters: Some(Null.into()),
            },
            issuer_name_hash: OctetString::new(name).map_err(malformed)?,
            issuer_key_hash: OctetString::new(key).map_err(malformed)?,
            serial_number: self.leaf.tbs_certificate.serial_number.clone(),
        })
    }

    /// The issuer's name and key hashed with `alg`.
    fn issuer_hashes(
        &self,
        alg: &'static digest::Algorithm,
    ) -> Result<(Vec<u8>, Vec<u8>), OcspError> {
        let name = self
            .leaf
            .tbs_certificate
            .issuer
            .to_der()
            .map_err(malformed)?;
        let key = self
            .issuer
            .tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .raw_bytes();
        Ok((
            digest::digest(alg, &name).as_ref().to_vec(),
            digest::digest(alg, key).as_ref().to_vec(),
        ))
    }

    /// The DER request for the leaf's status (unsigned, no nonce: the answer
    /// is served to many clients, as RFC 5019 has it).
    pub fn request(&self) -> Result<Vec<u8>, OcspError> {
        OcspRequest {
            tbs_request: TbsRequest {
                version: Version::V1,
                requestor_name: None,
                request_list: vec![Request {
                    req_cert: self.cert_id()?,
                    single_request_extensions: None,
                }],
                request_extensions: None,
            },
            optional_signature: None,
        }
        .to_der()
        .map_err(malformed)
    }

    /// Checks `der` (see the module doc) at `now` (seconds since the epoch).
    pub fn check(
        &self,
        der: &[u8],
        now: u64,
        algs: &[&dyn SignatureVerificationAlgorithm],
    ) -> Result<Current, OcspError> {
        let response = OcspResponse::from_der(der).map_err(malformed)?;
        if response.response_status != OcspResponseStatus::Successful {
            return Err(OcspError::NotSuccessful(response.response_status));
        }
        let bytes = response
            .response_bytes
            .ok_or_else(|| malformed("no responseBytes"))?;
        if bytes.response_type != OCSP_BASIC {
            return Err(malformed("not a basic response"));
        }
        let basic_der = bytes.response.as_bytes();
        let basic = BasicOcspResponse::from_der(basic_der).map_err(malformed)?;
        let single = basic
            .tbs_response_data
            .responses
            .iter()
            .find(|r| self.is_ours(&r.cert_id))
            .ok_or(OcspError::NotOurs)?;
        let signer = self.signer(&basic, now, algs)?;
        let message = first_element(basic_der)?;
        if !verified(
            algs,
            signer,
            &basic.signature_algorithm,
            message,
            &basic.signature,
        ) {
            return Err(OcspError::Signature);
        }
        let this_update = single.this_update.0.to_unix_duration().as_secs();
        let next_update = single
            .next_update
            .map(|t| t.0.to_unix_duration().as_secs())
            .unwrap_or(this_update.saturating_add(NO_NEXT_UPDATE.as_secs()));
        if this_update > now.saturating_add(SKEW.as_secs()) || next_update <= now {
            return Err(OcspError::NotCurrent);
        }
        match single.cert_status {
            CertStatus::Good(_) => Ok(Current {
                this_update,
                next_update,
            }),
            CertStatus::Revoked(_) => Err(OcspError::Revoked),
            CertStatus::Unknown(_) => Err(OcspError::Unknown),
        }
    }

    /// Whether a response's CertID is the leaf's, by SHA-1 or SHA-256.
    fn is_ours(&self, id: &CertId) -> bool {
        let alg = match id.hash_algorithm.oid {
            SHA1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            SHA256 => &digest::SHA256,
            _ => return false,
        };
        id.serial_number == self.leaf.tbs_certificate.serial_number
            && self.issuer_hashes(alg).is_ok_and(|(name, key)| {
                id.issuer_name_hash.as_bytes() == name && id.issuer_key_hash.as_bytes() == key
            })
    }

    /// The key that must have signed the answer: the issuer's, or a delegated
    /// responder's that the issuer signed for OCSP and that is valid at `now`.
    fn signer<'a>(
        &'a self,
        basic: &'a BasicOcspResponse,
        now: u64,
        algs: &[&dyn SignatureVerificationAlgorithm],
    ) -> Result<&'a SubjectPublicKeyInfoOwned, OcspError> {
        let id = &basic.tbs_response_data.responder_id;
        if names(id, &self.issuer) {
            return Ok(&self.issuer.tbs_certificate.subject_public_key_info);
        }
        basic
            .certs
            .iter()
            .flatten()
            .find(|c| names(id, c) && self.delegated(c, now, algs))
            .map(|c| &c.tbs_certificate.subject_public_key_info)
            .ok_or(OcspError::Signature)
    }

    /// Whether `c` is a responder certificate the issuer signed for OCSP.
    fn delegated(
        &self,
        c: &Certificate,
        now: u64,
        algs: &[&dyn SignatureVerificationAlgorithm],
    ) -> bool {
        let tbs = &c.tbs_certificate;
        let valid = tbs.validity.not_before.to_unix_duration().as_secs() <= now
            && now <= tbs.validity.not_after.to_unix_duration().as_secs();
        let for_ocsp = tbs.extensions.iter().flatten().any(|e| {
            e.extn_id == EKU
                && x509_cert::ext::pkix::ExtendedKeyUsage::from_der(e.extn_value.as_bytes())
                    .is_ok_and(|k| k.0.contains(&KP_OCSP_SIGNING))
        });
        valid
            && for_ocsp
            && tbs.issuer == self.issuer.tbs_certificate.subject
            && tbs.to_der().is_ok_and(|message| {
                verified(
                    algs,
                    &self.issuer.tbs_certificate.subject_public_key_info,
                    &c.signature_algorithm,
                    &message,
                    &c.signature,
                )
            })
    }
}

/// Whether a ResponderID names `c` (by subject, or by its key's SHA-1).
fn names(id: &ResponderId, c: &Certificate) -> bool {
    match id {
        ResponderId::ByName(n) => *n == c.tbs_certificate.subject,
        ResponderId::ByKey(h) => {
            let key = c
                .tbs_certificate
                .subject_public_key_info
                .subject_public_key
                .raw_bytes();
            h.as_bytes() == digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, key).as_ref()
        }
    }
}

/// The first element of a DER SEQUENCE, as sent: the signed bytes.
fn first_element(der: &[u8]) -> Result<&[u8], OcspError> {
    let outer = AnyRef::from_der(der).map_err(malformed)?;
    let mut inner = SliceReader::new(outer.value()).map_err(malformed)?;
    inner.tlv_bytes().map_err(malformed)
}

/// The contents of an AlgorithmIdentifier (as rustls's algorithms name theirs).
fn contents(alg: &AlgorithmIdentifierOwned) -> Option<Vec<u8>> {
    let der = alg.to_der().ok()?;
    Some(AnyRef::from_der(&der).ok()?.value().to_vec())
}

/// Whether `signature` over `message` checks with `key`, by an algorithm the
/// provider has for this key and signature algorithm.
fn verified(
    algs: &[&dyn SignatureVerificationAlgorithm],
    key: &SubjectPublicKeyInfoOwned,
    sig_alg: &AlgorithmIdentifierOwned,
    message: &[u8],
    signature: &BitString,
) -> bool {
    let (Some(key_id), Some(sig_id), Some(sig)) = (
        contents(&key.algorithm),
        contents(sig_alg),
        signature.as_bytes(),
    ) else {
        return false;
    };
    algs.iter()
        .filter(|a| {
            a.public_key_alg_id().as_ref() == key_id && a.signature_alg_id().as_ref() == sig_id
        })
        .any(|a| {
            a.verify_signature(key.subject_public_key.raw_bytes(), message, sig)
                .is_ok()
        })
}

#[cfg(test)]
mod tests {
    //! Against answers `openssl ocsp` made (`fixtures/ocsp/`, see its README):
    //! `good.der` for `leaf.crt` signed by the CA, `delegated.der` signed by a
    //! responder certificate the CA issued for OCSP, `impostor.der` signed by
    //! a certificate the CA issued for a server, `revoked.der` for
    //! `other.crt`, which the CA revoked.

    use super::*;
    use rustls::pki_types::pem::PemObject;

    /// When the fixtures' answers were made (`thisUpdate`); they are valid a day.
    const MADE: u64 = 1_795_936_340;

    fn fixture(name: &str) -> Vec<u8> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/ocsp/");
        std::fs::read(format!("{dir}{name}")).expect("fixture")
    }

    fn chain(leaf: &str) -> Vec<CertificateDer<'static>> {
        [leaf, "ca.crt"]
            .iter()
            .map(|f| CertificateDer::from_pem_slice(&fixture(f)).expect("pem"))
            .collect()
    }

    fn algs() -> &'static [&'static dyn SignatureVerificationAlgorithm] {
        rustls::crypto::aws_lc_rs::default_provider()
            .signature_verification_algorithms
            .all
    }

    #[test]
    fn the_request_names_the_leaf_and_the_responder_is_read_from_it() {
        let s = Subject::new(&chain("leaf.crt")).expect("subject");
        assert_eq!(s.responder().as_deref(), Ok("http://127.0.0.1:8888/"));
        let req = OcspRequest::from_der(&s.request().expect("request")).expect("decodes");
        let id = &req.tbs_request.request_list[0].req_cert;
        assert!(s.is_ours(id));
        let other = Subject::new(&chain("other.crt")).expect("subject");
        assert!(!other.is_ours(id));
    }

    #[test]
    fn a_good_answer_signed_by_the_issuer_or_its_responder_is_current_for_a_day() {
        let s = Subject::new(&chain("leaf.crt")).expect("subject");
        for f in ["good.der", "delegated.der"] {
            let c = s.check(&fixture(f), MADE + 60, algs()).expect(f);
            assert_eq!(c.this_update, MADE, "{f}");
            assert_eq!(c.next_update, MADE + 86_400, "{f}");
        }
    }

    #[test]
    fn answers_that_must_not_be_stapled_say_why() {
        let s = Subject::new(&chain("leaf.crt")).expect("subject");
        let good = fixture("good.der");
        let check = |der: &[u8], now| s.check(der, now, algs()).map_err(|e| e.reason());
        // Expired, and from the future beyond the skew.
        assert_eq!(check(&good, MADE + 86_400), Err("not_current"));
        assert_eq!(check(&good, MADE - 3600), Err("not_current"));
        assert!(check(&good, MADE - 60).is_ok(), "within the skew");
        // Signed by a certificate the CA did not issue for OCSP.
        assert_eq!(check(&fixture("impostor.der"), MADE + 60), Err("signature"));
        // About another certificate.
        assert_eq!(check(&fixture("revoked.der"), MADE + 60), Err("not_ours"));
        // The signed data changed: thisUpdate a second later.
        let mut tampered = good.clone();
        let at = tampered
            .windows(15)
            .position(|w| w == b"20261129071220Z")
            .expect("thisUpdate in the answer");
        tampered[at + 13] = b'1';
        assert_eq!(check(&tampered, MADE + 60), Err("signature"));
        // Not an answer at all.
        assert_eq!(check(b"\x30\x03\x0a\x01\x00", MADE), Err("malformed"));
        assert_eq!(check(b"", MADE), Err("malformed"));
        // "tryLater".
        assert_eq!(check(b"\x30\x03\x0a\x01\x03", MADE), Err("not_successful"));
    }

    #[test]
    fn a_revoked_certificate_is_said_revoked() {
        let s = Subject::new(&chain("other.crt")).expect("subject");
        assert_eq!(
            s.check(&fixture("revoked.der"), MADE + 60, algs()),
            Err(OcspError::Revoked)
        );
    }

    #[test]
    fn a_chain_without_its_issuer_has_nothing_to_ask() {
        let leaf = chain("leaf.crt").remove(0);
        assert_eq!(
            Subject::new(std::slice::from_ref(&leaf)).err(),
            Some(OcspError::NoIssuer)
        );
        assert_eq!(
            Subject::new(&[leaf.clone(), leaf]).err(),
            Some(OcspError::NoIssuer)
        );
    }
}
