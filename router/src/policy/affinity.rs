//! Cookie affinity (sticky sessions): the first answer to a client carries a cookie
//! naming the member that served it; later requests with that cookie go to the same
//! member while it is eligible (up by health and rotated in). A member that is down,
//! draining or rotated out, or gone from the app, moves the client: the request goes
//! where the balancer says and its answer carries a new cookie; never an error.
//!
//! The cookie's value is a keyed hash of the member's address (HMAC-SHA256, the first
//! 8 bytes in hex): it does not reveal the address, and a client cannot forge one
//! for a member it was not sent to. Both routers of a pair must use the same key to
//! honour each other's cookies: `affinity_key_file` names a file both read (without
//! it each router makes one in `state_dir/affinity.key`, which survives restarts
//! but differs between the two). `router check-pair` compares the keys'
//! fingerprints.
//!
//! With a blue/green split, a valid cookie keeps its client on its member in
//! whichever app of the split that member serves (sessions survive a shift of
//! weights); clients without one follow the weights.

use std::path::Path;
use std::sync::Arc;

use aws_lc_rs::hmac;
use h1_codec::fields::{FieldsRef, Name};
use http::header::HeaderValue;

use super::settings::{AffinitySettings, SameSite};

/// The secret the cookies are hashed with.
#[derive(Clone)]
pub struct AffinityKey(Arc<hmac::Key>, [u8; 8]);

impl std::fmt::Debug for AffinityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AffinityKey({})", self.fingerprint())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: an affinity key file holds at least 16 bytes (e.g. `head -c 32 /dev/urandom`)")]
    Short(std::path::PathBuf),
    #[error("no random bytes for a new affinity key")]
    Random,
}

impl AffinityKey {
    pub fn from_secret(secret: &[u8]) -> AffinityKey {
        let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let tag = hmac::sign(&key, b"router affinity key fingerprint");
        let mut fp = [0u8; 8];
        fp.copy_from_slice(&tag.as_ref()[..8]);
        AffinityKey(Arc::new(key), fp)
    }

    /// `file` if given (shared by a pair), else `state_dir/affinity.key`, made
    /// (32 random bytes, mode 0600) when absent.
    pub fn load(file: Option<&Path>, state_dir: &Path) -> Result<AffinityKey, KeyError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| KeyError::Io {
                path: p.to_path_buf(),
                source,
            })
        };
        let secret = match file {
            Some(f) => read(f)?,
            None => {
                let own = state_dir.join("affinity.key");
                if own.exists() {
                    read(&own)?
                } else {
                    // The kernel's generator (aws-lc's own seeds itself with
                    // jitter entropy: 440 M instructions at start).
                    let mut secret = [0u8; 32];
                    std::io::Read::read_exact(
                        &mut std::fs::File::open("/dev/urandom").map_err(|_| KeyError::Random)?,
                        &mut secret,
                    )
                    .map_err(|_| KeyError::Random)?;
                    std::fs::create_dir_all(state_dir)
                        .and_then(|()| durable_file::write(&own, &secret))
                        .map_err(|source| KeyError::Io {
                            path: own.clone(),
                            source,
                        })?;
                    secret.to_vec()
                }
            }
        };
        if secret.len() < 16 {
            return Err(KeyError::Short(
                file.map_or_else(|| state_dir.join("affinity.key"), Path::to_path_buf),
            ));
        }
        Ok(AffinityKey::from_secret(&secret))
    }

    /// The cookie value for a member.
    pub fn id(&self, member: &str) -> u64 {
        let tag = hmac::sign(&self.0, member.as_bytes());
        let mut id = [0u8; 8];
        id.copy_from_slice(&tag.as_ref()[..8]);
        u64::from_be_bytes(id)
    }

    /// Says which key this is without saying the key (the pair check compares it).
    pub fn fingerprint(&self) -> String {
        hex::encode(self.1)
    }
}

/// An app's compiled affinity: the cookie's name and its attributes, written once.
#[derive(Debug)]
pub struct Affinity {
    name: String,
    /// What follows the value, on plain HTTP and on HTTPS.
    plain: String,
    https: String,
    key: AffinityKey,
}

impl Affinity {
    pub fn new(settings: AffinitySettings, key: AffinityKey) -> Affinity {
        let s = &settings;
        let mut plain = String::from("; Path=/; HttpOnly");
        if let Some(age) = s.max_age {
            plain.push_str(&format!("; Max-Age={}", age.as_secs()));
        }
        let mut https = format!("{plain}; Secure; SameSite={}", s.same_site.as_str());
        if s.partitioned {
            https.push_str("; Partitioned");
        }
        // SameSite=None without Secure is refused by browsers: plain HTTP omits it.
        if s.same_site != SameSite::None {
            plain.push_str("; SameSite=");
            plain.push_str(s.same_site.as_str());
        }
        Affinity {
            name: settings.cookie,
            plain,
            https,
            key,
        }
    }

    pub fn key(&self) -> &AffinityKey {
        &self.key
    }

    /// The member id the request's cookie names, if it carries a well-formed one.
    pub fn requested<'a>(&self, fields: impl Into<FieldsRef<'a>>) -> Option<u64> {
        let name = self.name.as_bytes();
        fields
            .into()
            .values(Name::Cookie)
            .flat_map(|v| v.split(|b| *b == b';'))
            .find_map(|pair| {
                let pair = pair.trim_ascii();
                let value = pair.strip_prefix(name)?.strip_prefix(b"=")?;
                parse_id(value)
            })
    }

    /// `Set-Cookie` naming the member whose id (under this key) is `id`; `https`:
    /// with `Secure`, `SameSite` and, if asked, `Partitioned`.
    pub fn set_cookie(&self, id: u64, https: bool) -> Option<HeaderValue> {
        let attributes = if https { &self.https } else { &self.plain };
        HeaderValue::from_str(&format!("{}={id:016x}{attributes}", self.name)).ok()
    }
}

fn parse_id(v: &[u8]) -> Option<u64> {
    if v.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(v).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use http::header::COOKIE;

    fn affinity(s: AffinitySettings) -> Affinity {
        Affinity::new(s, AffinityKey::from_secret(b"0123456789abcdef-pair-secret"))
    }

    #[test]
    fn the_cookie_names_the_member_without_its_address() {
        let a = affinity(AffinitySettings::default());
        let c = a
            .set_cookie(a.key().id("10.1.2.3:8080"), false)
            .expect("value");
        let c = c.to_str().expect("ascii");
        assert!(c.starts_with("route_affinity="), "{c}");
        assert!(!c.contains("10.1.2.3"), "{c}");
        assert!(c.ends_with("; Path=/; HttpOnly; SameSite=Lax"), "{c}");
        let value = c.split(['=', ';']).nth(1).expect("value");
        let mut h = HeaderMap::new();
        h.append(COOKIE, HeaderValue::from_static("a=1; other=2"));
        h.append(
            COOKIE,
            HeaderValue::from_str(&format!("x=y;  route_affinity={value}")).expect("header"),
        );
        assert_eq!(a.requested(&h), Some(a.key().id("10.1.2.3:8080")));
        // The same secret on the other router of the pair: the same value.
        let b = affinity(AffinitySettings::default());
        assert_eq!(b.key().id("10.1.2.3:8080"), a.key().id("10.1.2.3:8080"));
        assert_ne!(a.key().id("10.1.2.4:8080"), a.key().id("10.1.2.3:8080"));
    }

    #[test]
    fn malformed_or_foreign_cookies_name_nobody() {
        let a = affinity(AffinitySettings::default());
        for v in [
            "route_affinity=xyz",
            "route_affinity=",
            "route_affinityx=0011223344556677",
            "route_affinity=00112233445566778",
        ] {
            let mut h = HeaderMap::new();
            h.insert(COOKIE, HeaderValue::from_static(v));
            assert_eq!(a.requested(&h), None, "{v}");
        }
    }

    #[test]
    fn https_cookies_are_secure_with_same_site_and_partitioned_when_asked() {
        let a = affinity(AffinitySettings {
            cookie: "sticky".into(),
            max_age: Some(std::time::Duration::from_secs(3600)),
            same_site: SameSite::None,
            partitioned: true,
            ..AffinitySettings::default()
        });
        let https = a.set_cookie(a.key().id("m:1"), true).expect("value");
        let https = https.to_str().expect("ascii");
        assert!(
            https.ends_with("; Path=/; HttpOnly; Max-Age=3600; Secure; SameSite=None; Partitioned"),
            "{https}"
        );
        // SameSite=None without Secure is refused by browsers: plain HTTP omits it.
        let plain = a.set_cookie(a.key().id("m:1"), false).expect("value");
        assert!(
            plain.to_str().expect("ascii").ends_with("; Max-Age=3600"),
            "{plain:?}"
        );
    }
}
