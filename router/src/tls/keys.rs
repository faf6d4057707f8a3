//! Certificates and private keys as the broker sends them (routing-spi §2): a PEM
//! chain, and a PEM key that may be PKCS#1 RSA, SEC1 EC, PKCS#8, encrypted PKCS#8, or
//! a legacy OpenSSL-encrypted key (`Proc-Type: 4,ENCRYPTED` + `DEK-Info`).
//!
//! Ciphers and key derivation come from RustCrypto crates (`pkcs8` with PBES2 for
//! encrypted PKCS#8; `aes`/`des` in `cbc` mode and `md-5` for the legacy format). The
//! legacy format has no crate of its own: what is ours is reading its two headers
//! and OpenSSL's `EVP_BytesToKey` (MD5, one round, salt = the first 8 bytes of the IV),
//! a few lines over `md-5`.
//!
//! Every failure is a [`CertError`] with a short reason for the metric label and a
//! message that never quotes key material or the pass phrase.

use std::sync::Arc;

use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockDecryptMut, KeyIvInit};
use md5::{Digest, Md5};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use rustls::sign::CertifiedKey;
use x509_cert::der::Decode;

/// Why a certificate and key were not loaded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertError {
    #[error("no certificate in the PEM")]
    NoCertificate,
    #[error("certificate is not valid X.509: {0}")]
    BadCertificate(String),
    #[error("no private key in the PEM")]
    NoKey,
    #[error("{0} keys are not supported (use RSA or ECDSA)")]
    UnsupportedKey(&'static str),
    #[error("the key is encrypted and no pass phrase was given")]
    PassPhraseMissing,
    #[error("cannot decrypt the key: wrong pass phrase")]
    WrongPassPhrase,
    #[error("encrypted key uses an unsupported cipher {0:?}")]
    UnsupportedCipher(String),
    #[error("private key is not usable: {0}")]
    BadKey(String),
    #[error("the private key does not match the certificate")]
    KeyMismatch,
}

impl CertError {
    /// The `reason` label of `router_tls_certificate_errors_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            CertError::NoCertificate => "no_certificate",
            CertError::BadCertificate(_) => "bad_certificate",
            CertError::NoKey => "no_key",
            CertError::UnsupportedKey(_) => "unsupported_key",
            CertError::PassPhraseMissing => "pass_phrase_missing",
            CertError::WrongPassPhrase => "wrong_pass_phrase",
            CertError::UnsupportedCipher(_) => "unsupported_cipher",
            CertError::BadKey(_) => "bad_key",
            CertError::KeyMismatch => "key_mismatch",
        }
    }
}

/// A certificate chain with its signing key, ready for rustls.
#[derive(Debug)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    /// The leaf's notAfter, seconds since the epoch.
    pub not_after: i64,
}

/// The leaf's notAfter (seconds since the epoch), without loading anything else.
pub fn not_after(cert_pem: &str) -> Result<i64, CertError> {
    let leaf = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()
        .ok_or(CertError::NoCertificate)?
        .map_err(|e| CertError::BadCertificate(e.to_string()))?;
    leaf_not_after(&leaf)
}

fn leaf_not_after(leaf: &[u8]) -> Result<i64, CertError> {
    let parsed = x509_cert::Certificate::from_der(leaf)
        .map_err(|e| CertError::BadCertificate(e.to_string()))?;
    Ok(parsed
        .tbs_certificate
        .validity
        .not_after
        .to_unix_duration()
        .as_secs() as i64)
}

/// Loads `cert_pem` (leaf first, then the chain) and `key_pem`.
pub fn load(
    cert_pem: &str,
    key_pem: &str,
    pass_phrase: Option<&str>,
    provider: &CryptoProvider,
) -> Result<Loaded, CertError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| CertError::BadCertificate(e.to_string()))?;
    let leaf = chain.first().ok_or(CertError::NoCertificate)?;
    let not_after = leaf_not_after(leaf)?;
    let der = private_key(key_pem, pass_phrase)?;
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| CertError::BadKey(e.to_string()))?;
    let key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|_| CertError::KeyMismatch)?;
    Ok(Loaded {
        key: Arc::new(key),
        not_after,
    })
}

/// One PEM block: its label, its RFC 1421 headers, its decoded body.
struct Block<'a> {
    label: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    der: Vec<u8>,
}

/// The first private-key block of `pem`, decrypted if needed.
fn private_key(pem: &str, pass: Option<&str>) -> Result<PrivateKeyDer<'static>, CertError> {
    let block = blocks(pem)
        .find(|b| b.label.ends_with("PRIVATE KEY"))
        .ok_or(CertError::NoKey)?;
    let pass = pass.filter(|p| !p.is_empty());
    match block.label {
        "DSA PRIVATE KEY" => Err(CertError::UnsupportedKey("DSA")),
        "ENCRYPTED PRIVATE KEY" => {
            let pass = pass.ok_or(CertError::PassPhraseMissing)?;
            let info = pkcs8::EncryptedPrivateKeyInfo::try_from(block.der.as_slice())
                .map_err(|e| CertError::BadKey(e.to_string()))?;
            let doc = info.decrypt(pass).map_err(|_| CertError::WrongPassPhrase)?;
            pkcs8_key(doc.as_bytes().to_vec(), true)
        }
        label @ ("RSA PRIVATE KEY" | "EC PRIVATE KEY" | "PRIVATE KEY") => {
            let encrypted = block
                .headers
                .iter()
                .any(|(k, v)| *k == "Proc-Type" && v.trim() == "4,ENCRYPTED");
            let der = if encrypted {
                let pass = pass.ok_or(CertError::PassPhraseMissing)?;
                let dek = block
                    .headers
                    .iter()
                    .find(|(k, _)| *k == "DEK-Info")
                    .map(|(_, v)| *v)
                    .ok_or_else(|| CertError::BadKey("Proc-Type without DEK-Info".into()))?;
                decrypt_legacy(&block.der, dek, pass)?
            } else {
                block.der
            };
            // A wrong pass phrase that happens to unpad correctly yields garbage:
            // say "wrong pass phrase" rather than "bad key" when it was encrypted.
            let garbage = |e: CertError| {
                if encrypted {
                    CertError::WrongPassPhrase
                } else {
                    e
                }
            };
            match label {
                "RSA PRIVATE KEY" => {
                    check_der_sequence(&der).map_err(garbage)?;
                    Ok(PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(der)))
                }
                "EC PRIVATE KEY" => {
                    check_der_sequence(&der).map_err(garbage)?;
                    Ok(PrivateKeyDer::Sec1(PrivateSec1KeyDer::from(der)))
                }
                _ => pkcs8_key(der, encrypted),
            }
        }
        other => Err(CertError::BadKey(format!("unexpected PEM block {other:?}"))),
    }
}

/// A PKCS#8 key, refusing DSA by its algorithm identifier.
fn pkcs8_key(der: Vec<u8>, encrypted: bool) -> Result<PrivateKeyDer<'static>, CertError> {
    const DSA: pkcs8::ObjectIdentifier = pkcs8::ObjectIdentifier::new_unwrap("1.2.840.10040.4.1");
    let info = pkcs8::PrivateKeyInfo::try_from(der.as_slice()).map_err(|e| {
        if encrypted {
            CertError::WrongPassPhrase
        } else {
            CertError::BadKey(e.to_string())
        }
    })?;
    if info.algorithm.oid == DSA {
        return Err(CertError::UnsupportedKey("DSA"));
    }
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(der)))
}

/// The outer DER element is a SEQUENCE spanning the whole input.
fn check_der_sequence(der: &[u8]) -> Result<(), CertError> {
    x509_cert::der::Any::from_der(der)
        .ok()
        .filter(|a| x509_cert::der::Tagged::tag(a) == x509_cert::der::Tag::Sequence)
        .map(|_| ())
        .ok_or_else(|| CertError::BadKey("not a DER key".into()))
}

/// OpenSSL's traditional encryption: `DEK-Info: AES-128-CBC,<hex IV>`.
fn decrypt_legacy(data: &[u8], dek_info: &str, pass: &str) -> Result<Vec<u8>, CertError> {
    let (cipher, iv_hex) = dek_info
        .split_once(',')
        .ok_or_else(|| CertError::BadKey("malformed DEK-Info".into()))?;
    let iv = hex::decode(iv_hex.trim())
        .ok()
        .ok_or_else(|| CertError::BadKey("malformed DEK-Info IV".into()))?;
    let cipher = cipher.trim();
    let (key_len, iv_len) = match cipher {
        "AES-128-CBC" => (16, 16),
        "AES-192-CBC" => (24, 16),
        "AES-256-CBC" => (32, 16),
        "DES-EDE3-CBC" => (24, 8),
        other => return Err(CertError::UnsupportedCipher(other.to_string())),
    };
    if iv.len() != iv_len {
        return Err(CertError::BadKey("DEK-Info IV has the wrong length".into()));
    }
    let salt = iv.get(..8).unwrap_or(&iv);
    let key = evp_bytes_to_key(pass.as_bytes(), salt, key_len);
    let mut buf = data.to_vec();
    let plain = match cipher {
        "AES-128-CBC" => cbc_decrypt::<aes::Aes128>(&key, &iv, &mut buf),
        "AES-192-CBC" => cbc_decrypt::<aes::Aes192>(&key, &iv, &mut buf),
        "AES-256-CBC" => cbc_decrypt::<aes::Aes256>(&key, &iv, &mut buf),
        _ => cbc_decrypt::<des::TdesEde3>(&key, &iv, &mut buf),
    };
    let len = plain.ok_or(CertError::WrongPassPhrase)?;
    buf.truncate(len);
    Ok(buf)
}

/// CBC decryption in place with PKCS#7 padding; the plaintext's length, or `None`
/// if the key or IV does not fit or the padding is wrong (a wrong pass phrase).
fn cbc_decrypt<C>(key: &[u8], iv: &[u8], buf: &mut [u8]) -> Option<usize>
where
    C: cbc::cipher::BlockDecryptMut + cbc::cipher::BlockCipher + cbc::cipher::KeyInit,
{
    cbc::Decryptor::<C>::new_from_slices(key, iv)
        .ok()?
        .decrypt_padded_mut::<Pkcs7>(buf)
        .ok()
        .map(<[u8]>::len)
}

/// `EVP_BytesToKey(MD5, salt, pass, count = 1)`: D_i = MD5(D_{i-1} || pass || salt).
fn evp_bytes_to_key(pass: &[u8], salt: &[u8], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 16);
    let mut prev: Vec<u8> = Vec::new();
    while out.len() < len {
        let mut h = Md5::new();
        h.update(&prev);
        h.update(pass);
        h.update(salt);
        prev = h.finalize().to_vec();
        out.extend_from_slice(&prev);
    }
    out.truncate(len);
    out
}

/// The PEM blocks of `text`, with headers (RFC 1421 style, which RFC 7468 parsers
/// reject but OpenSSL's legacy encrypted keys carry). Blocks that do not decode are
/// skipped.
fn blocks(text: &str) -> impl Iterator<Item = Block<'_>> {
    let mut lines = text.lines().map(str::trim);
    std::iter::from_fn(move || {
        loop {
            let line = lines.next()?;
            let Some(label) = line
                .strip_prefix("-----BEGIN ")
                .and_then(|l| l.strip_suffix("-----"))
            else {
                continue;
            };
            let end = format!("-----END {label}-----");
            let mut headers = Vec::new();
            let mut body = String::new();
            let mut closed = false;
            for l in lines.by_ref() {
                if l == end {
                    closed = true;
                    break;
                }
                match l.split_once(':') {
                    Some((k, v)) if body.is_empty() => headers.push((k.trim(), v.trim())),
                    _ => body.push_str(l),
                }
            }
            if !closed {
                return None;
            }
            use base64ct::Encoding;
            if let Ok(der) = base64ct::Base64::decode_vec(&body) {
                return Some(Block {
                    label,
                    headers,
                    der,
                });
            }
        }
    })
}

#[cfg(test)]
mod tests;
