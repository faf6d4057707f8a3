//! ACME Renewal Information (RFC 9773): when the CA would like a certificate
//! renewed. A CA that offers it (Let's Encrypt does) gives a window per
//! certificate, earlier than usual when it must revoke; the router renews at a
//! random moment in it instead of at two thirds of the lifetime. The request is
//! `instant-acme`'s; what is ours is naming the certificate (its authority key
//! identifier and serial, read with `x509-cert`) and the window in Unix seconds.

use std::time::Duration;

use instant_acme::CertificateIdentifier;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, Der};
use x509_cert::der::Decode as _;
use x509_cert::der::oid::AssociatedOid as _;
use x509_cert::ext::pkix::AuthorityKeyIdentifier;

use crate::{AcmeError, Client};

/// The CA's suggested renewal window for a certificate, in seconds since the
/// epoch, and when to ask again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub start: i64,
    pub end: i64,
    /// The CA's `Retry-After`: ask again no sooner than this.
    pub ask_again: Duration,
}

/// The certificate's identifier for ARI (`base64url(AKI).base64url(serial)`),
/// from the leaf of `chain_pem`; `None` without an authority key identifier.
pub fn certificate_id(chain_pem: &str) -> Option<CertificateIdentifier<'static>> {
    let leaf = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()?
        .ok()?;
    let cert = x509_cert::Certificate::from_der(leaf.as_ref()).ok()?;
    let tbs = &cert.tbs_certificate;
    let aki = tbs
        .extensions
        .as_ref()?
        .iter()
        .find(|e| e.extn_id == AuthorityKeyIdentifier::OID)?;
    let aki = AuthorityKeyIdentifier::from_der(aki.extn_value.as_bytes()).ok()?;
    let key_id = aki.key_identifier?;
    Some(
        CertificateIdentifier::new(
            Der::from_slice(key_id.as_bytes()),
            Der::from_slice(tbs.serial_number.as_bytes()),
        )
        .into_owned(),
    )
}

impl Client {
    /// The CA's renewal window for the certificate `chain_pem`; `None` when the
    /// CA offers no renewal information or the certificate cannot be named.
    pub async fn renewal_window(&self, chain_pem: &str) -> Result<Option<Window>, AcmeError> {
        let Some(id) = certificate_id(chain_pem) else {
            return Ok(None);
        };
        match self.account.renewal_info(&id).await {
            Ok((info, ask_again)) => Ok(Some(Window {
                start: info.suggested_window.start.unix_timestamp(),
                end: info.suggested_window.end.unix_timestamp(),
                ask_again,
            })),
            Err(instant_acme::Error::Unsupported(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_named_by_its_authority_key_id_and_serial() {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.key_identifier_method = rcgen::KeyIdMethod::PreSpecified(vec![0xAB; 20]);
        let issuer = rcgen::Issuer::new(ca, rcgen::KeyPair::generate().expect("key"));
        let mut leaf =
            rcgen::CertificateParams::new(vec!["shop.example.com".to_string()]).expect("params");
        leaf.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x01, 0x02, 0x03]));
        leaf.use_authority_key_identifier_extension = true;
        let key = rcgen::KeyPair::generate().expect("key");
        let pem = leaf.signed_by(&key, &issuer).expect("signed").pem();
        let id = certificate_id(&pem).expect("named");
        // base64url(0xAB x 20) "." base64url(01 02 03)
        assert_eq!(
            id.to_string(),
            format!("{}.AQID", "q6urq6urq6urq6urq6urq6urq6s")
        );
        // Without the extension there is nothing to name it by.
        let mut bare =
            rcgen::CertificateParams::new(vec!["a.example.com".to_string()]).expect("params");
        bare.use_authority_key_identifier_extension = false;
        let pem = bare.self_signed(&key).expect("cert").pem();
        assert!(certificate_id(&pem).is_none());
        assert!(certificate_id("not a certificate").is_none());
    }
}
