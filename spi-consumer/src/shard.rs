//! Sharding (PEP 005: "able to be sharded under high load"): a router pair stores
//! only the apps its rule owns. Events for other apps are acknowledged and counted
//! (`spi_events_total{outcome="other_shard"}`), never stored; at start, apps in the
//! saved state that the rule no longer owns are dropped (and the drop is saved), so
//! changing the rule re-evaluates the state.
//!
//! The rule is a function of the app's name and namespace only, because that is all
//! most events carry: an endpoint or certificate event says nothing about the app's
//! aliases, so an alias-suffix rule could not place it when it arrives.
//!
//! - `namespaces`: names or `*` patterns (`team-*`, `*-prod`, `*`); the app's
//!   namespace must match one (an empty list matches every namespace);
//! - `hash: {count: N, index: i}`: FNV-1a (64-bit) of `name-namespace` in lower case,
//!   modulo N, must be i. Stable across versions and machines, so an operator can
//!   compute where any app lives (`docs/routing.md`, "Sharding", shows how).
//!
//! Both given: both must hold. Neither: every app is owned (no sharding).

use serde::Deserialize;

use crate::apply::AppKey;

/// `spi.shard`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub hash: Option<HashShard>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HashShard {
    pub count: u32,
    pub index: u32,
}

impl Shard {
    /// Whether this router stores `app`.
    pub fn owns(&self, app: &AppKey) -> bool {
        let ns = app.namespace.to_ascii_lowercase();
        (self.namespaces.is_empty()
            || self
                .namespaces
                .iter()
                .any(|p| glob(&p.to_ascii_lowercase(), &ns)))
            && self.hash.is_none_or(|h| {
                h.count > 0
                    && fnv1a(format!("{}-{}", app.name, app.namespace).to_ascii_lowercase())
                        % u64::from(h.count)
                        == u64::from(h.index)
            })
    }

    /// Whether any rule is set.
    pub fn is_set(&self) -> bool {
        !self.namespaces.is_empty() || self.hash.is_some()
    }

    /// Checks what types alone cannot: the field and the problem.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if let Some(h) = self.hash
            && (h.count == 0 || h.index >= h.count)
        {
            return Err((
                "spi.shard.hash",
                format!(
                    "index must be below count (count {}, index {})",
                    h.count, h.index
                ),
            ));
        }
        Ok(())
    }
}

/// FNV-1a, 64-bit: small, stable across builds, and easy to reproduce outside the
/// router (sharding, and the spool's names for long file names).
pub fn fnv1a(s: impl AsRef<[u8]>) -> u64 {
    s.as_ref().iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `*` matches any run of characters (including none); everything else itself.
fn glob(pattern: &str, s: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || s.len() < first.len() + last.len() || !s.ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(name: &str, ns: &str) -> AppKey {
        AppKey {
            name: name.into(),
            namespace: ns.into(),
        }
    }

    #[test]
    fn namespaces_by_name_or_pattern() {
        let s = Shard {
            namespaces: vec!["Billing".into(), "team-*".into(), "*-prod".into()],
            hash: None,
        };
        assert!(s.owns(&key("a", "billing")));
        assert!(s.owns(&key("a", "team-x")) && s.owns(&key("a", "team-")));
        assert!(s.owns(&key("a", "web-prod")));
        assert!(!s.owns(&key("a", "team")) && !s.owns(&key("a", "prod-web")));
        assert!(Shard::default().owns(&key("a", "anything")));
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "acb") && glob("*", ""));
    }

    #[test]
    fn fnv1a_is_the_published_function() {
        // Test vectors of the FNV reference (draft-eastlake-fnv).
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_bad_hash_rule_is_refused() {
        let bad = Shard {
            namespaces: vec![],
            hash: Some(HashShard { count: 2, index: 2 }),
        };
        assert!(bad.validate().is_err());
    }

    proptest! {
        /// With N hash shards, every app has exactly one owner, whatever its case.
        #[test]
        fn exactly_one_of_n_shards_owns_each_app(name in "[a-zA-Z0-9]{1,16}", ns in "[a-zA-Z0-9]{1,16}", n in 1u32..8) {
            let owners = (0..n)
                .filter(|&i| Shard { namespaces: vec![], hash: Some(HashShard { count: n, index: i }) }.owns(&key(&name, &ns)))
                .count();
            prop_assert_eq!(owners, 1);
            let lower = key(&name.to_ascii_lowercase(), &ns.to_ascii_lowercase());
            let s = Shard { namespaces: vec![], hash: Some(HashShard { count: n, index: 0 }) };
            prop_assert_eq!(s.owns(&key(&name, &ns)), s.owns(&lower));
        }
    }
}
