//! TLS profiles (OpenShift's `tlsSecurityProfile`, Mozilla's server-side TLS
//! configurations): which versions and cipher suites a side of the router
//! speaks, for clients (`tls.profile`) and for members
//! (`upstream.tls.profile`).
//!
//! | profile | versions | suites |
//! |---|---|---|
//! | `modern` | TLS 1.3 | AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305 |
//! | `intermediate` (default) | TLS 1.2, 1.3 | the above, and for 1.2 ECDHE (ECDSA or RSA) with AES-GCM or ChaCha20-Poly1305 |
//! | `old` | TLS 1.2, 1.3 | the same as `intermediate` |
//! | `custom` | `min_version` (`1.2` or `1.3`) and up | `ciphers`: by IANA or OpenSSL name |
//!
//! What `old` cannot mean here: rustls implements neither TLS 1.0 and 1.1 nor
//! CBC, 3DES, RC4 or static-RSA suites (by design: each has a published
//! attack), so Mozilla's "old" (for clients such as IE 8 on Windows XP or
//! Java 6) is not reachable; `old` is accepted so that a configuration moved
//! from OpenShift keeps working, and gives the widest set rustls has, which is
//! `intermediate`'s. A `custom` list naming a suite rustls does not have is
//! refused, naming it.

use rustls::crypto::CryptoProvider;
use rustls::{ProtocolVersion, SupportedCipherSuite, SupportedProtocolVersion};
use serde::Deserialize;

/// A profile's name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    Old,
    #[default]
    Intermediate,
    Modern,
    Custom,
}

/// A side's profile as configured: the name, and for `custom` the lowest
/// version and the suites.
#[derive(Clone, Debug, Default)]
pub struct Settings<'a> {
    pub profile: Profile,
    pub min_version: Option<&'a str>,
    pub ciphers: &'a [String],
}

/// OpenSSL's names of the TLS 1.2 suites rustls has, by IANA name (TLS 1.3
/// suites have one name in both).
const OPENSSL_NAMES: [(&str, &str); 6] = [
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// A suite's IANA name (`TLS_AES_128_GCM_SHA256`, `TLS_ECDHE_…`).
fn iana(suite: &SupportedCipherSuite) -> String {
    let name = suite.suite().as_str().unwrap_or("unknown");
    name.strip_prefix("TLS13_")
        .map_or_else(|| name.to_string(), |rest| format!("TLS_{rest}"))
}

/// The suite `name` (IANA or OpenSSL, any case) names among `all`.
fn named(name: &str, all: &[SupportedCipherSuite]) -> Option<SupportedCipherSuite> {
    let upper = name.to_ascii_uppercase();
    let wanted = OPENSSL_NAMES
        .iter()
        .find(|(o, _)| *o == upper)
        .map_or(upper.as_str(), |(_, i)| i);
    all.iter().copied().find(|s| iana(s) == wanted)
}

fn is_tls13(s: &SupportedCipherSuite) -> bool {
    s.version().version == ProtocolVersion::TLSv1_3
}

impl Settings<'_> {
    /// Refuses what cannot apply: `(field suffix, problem)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let custom = self.profile == Profile::Custom;
        if !custom && (self.min_version.is_some() || !self.ciphers.is_empty()) {
            return Err((
                "profile",
                "min_version and ciphers are for profile: custom".into(),
            ));
        }
        if !custom {
            return Ok(());
        }
        if !matches!(self.min_version, None | Some("1.2") | Some("1.3")) {
            return Err((
                "min_version",
                "1.2 or 1.3 (rustls has neither TLS 1.0 nor 1.1)".into(),
            ));
        }
        let all = rustls::crypto::aws_lc_rs::default_provider().cipher_suites;
        for c in self.ciphers {
            if named(c, &all).is_none() {
                let have: Vec<String> = all.iter().map(iana).collect();
                return Err((
                    "ciphers",
                    format!(
                        "{c:?}: rustls has no such suite (it has {have:?}; no CBC, 3DES, RC4 or static RSA)"
                    ),
                ));
            }
        }
        let suites = self.suites(&all);
        if !suites.iter().any(is_tls13) {
            return Err(("ciphers", "name at least one TLS 1.3 suite".into()));
        }
        Ok(())
    }

    /// The suites the profile keeps of `all`, in `all`'s order.
    fn suites(&self, all: &[SupportedCipherSuite]) -> Vec<SupportedCipherSuite> {
        let tls12 = match self.profile {
            Profile::Modern => false,
            Profile::Custom => self.min_version != Some("1.3"),
            Profile::Old | Profile::Intermediate => true,
        };
        let listed = |s: &SupportedCipherSuite| {
            self.ciphers.is_empty()
                || self
                    .ciphers
                    .iter()
                    .any(|c| named(c, all).is_some_and(|n| n.suite() == s.suite()))
        };
        all.iter()
            .copied()
            .filter(|s| (tls12 || is_tls13(s)) && listed(s))
            .collect()
    }

    /// `provider` keeping only the profile's suites.
    pub fn apply(&self, mut provider: CryptoProvider) -> CryptoProvider {
        provider.cipher_suites = self.suites(&provider.cipher_suites);
        provider
    }
}

/// The versions `provider`'s suites speak, newest first.
pub fn versions(provider: &CryptoProvider) -> Vec<&'static SupportedProtocolVersion> {
    let mut out = vec![&rustls::version::TLS13];
    if provider.cipher_suites.iter().any(|s| !is_tls13(s)) {
        out.push(&rustls::version::TLS12);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(s: &Settings<'_>) -> Vec<String> {
        let p = s.apply(rustls::crypto::aws_lc_rs::default_provider());
        p.cipher_suites.iter().map(iana).collect()
    }

    #[test]
    fn profiles_keep_what_they_say() {
        let modern = Settings {
            profile: Profile::Modern,
            ..Settings::default()
        };
        assert!(kept(&modern).iter().all(|n| !n.starts_with("TLS_ECDHE")));
        assert_eq!(kept(&modern).len(), 3);
        let inter = Settings::default();
        assert_eq!(kept(&inter).len(), 9);
        let ciphers = [
            "TLS_AES_256_GCM_SHA384".to_string(),
            "ecdhe-rsa-aes128-gcm-sha256".to_string(),
        ];
        let custom = Settings {
            profile: Profile::Custom,
            min_version: Some("1.2"),
            ciphers: &ciphers,
        };
        assert!(custom.check().is_ok());
        assert_eq!(
            kept(&custom),
            [
                "TLS_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
            ]
        );
        let p = custom.apply(rustls::crypto::aws_lc_rs::default_provider());
        assert_eq!(versions(&p).len(), 2);
        let p = modern.apply(rustls::crypto::aws_lc_rs::default_provider());
        assert_eq!(versions(&p).len(), 1);
    }

    #[test]
    fn what_rustls_cannot_do_is_refused_by_name() {
        let cbc = ["ECDHE-RSA-AES128-SHA".to_string()];
        let e = Settings {
            profile: Profile::Custom,
            ciphers: &cbc,
            ..Settings::default()
        }
        .check()
        .unwrap_err();
        assert!(e.1.contains("ECDHE-RSA-AES128-SHA"), "{e:?}");
        let only12 = ["ECDHE-RSA-AES128-GCM-SHA256".to_string()];
        assert!(
            Settings {
                profile: Profile::Custom,
                ciphers: &only12,
                ..Settings::default()
            }
            .check()
            .is_err()
        );
        assert!(
            Settings {
                profile: Profile::Custom,
                min_version: Some("1.0"),
                ..Settings::default()
            }
            .check()
            .is_err()
        );
        assert!(
            Settings {
                profile: Profile::Modern,
                min_version: Some("1.3"),
                ..Settings::default()
            }
            .check()
            .is_err()
        );
    }
}
