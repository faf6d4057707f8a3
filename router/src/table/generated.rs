//! The names the router makes for every app, `<prefix><app>-<ns><suffix>.<domain>`
//! (the HA name) and, with `app_dns`, `<app>-<ns>.<domain>`, resolved from the name
//! itself instead of being stored in the host map.
//!
//! Why: every app has one or two of these and most have no alias, so they were
//! nearly all of the host map's entries, and each event copied the map's nodes
//! its app's names sit in (the published table still shares them) and dropped the
//! old ones when that table went: about a third of the CPU per applied event at
//! 100 000 apps (`perf`, `bench-events --consume`). The host map now holds the
//! aliases only; a generated name is split back into its app's key and looked up
//! in the app map, which an event changes anyway.
//!
//! Exact, not a guess: names and namespaces are lower-case letters and digits (the
//! broker refuses others), so the first `-` after the prefix separates them. An
//! app whose key is not of that form keeps its names in the host map
//! ([`Generated::resolves`]), and a name resolves to a route only if that route
//! lists it among its generated names. An alias in the host map wins over a
//! generated name of another app.

use spi_consumer::AppKey;

use super::Naming;

/// How generated names are taken apart again; fixed for the process (changing the
/// naming needs a restart).
#[derive(Debug, Clone)]
pub struct Generated {
    ha_prefix: String,
    ha_suffix: String,
    /// `.` and the cloud domain.
    domain: String,
    app_dns: bool,
}

impl Generated {
    pub fn new(naming: &Naming) -> Generated {
        Generated {
            ha_prefix: naming.ha_prefix.to_ascii_lowercase(),
            ha_suffix: naming.ha_suffix.to_ascii_lowercase(),
            domain: format!(".{}", naming.cloud_domain.to_ascii_lowercase()),
            app_dns: naming.app_dns,
        }
    }

    /// `host` without the cloud domain; `None` if not under it. `host` is
    /// lower-case (see `request::route::normalize_host`).
    pub fn label<'h>(&self, host: &'h str) -> Option<&'h str> {
        host.strip_suffix(self.domain.as_str())
    }

    /// The app (name, namespace) `label` names as an HA name.
    pub fn ha_key<'h>(&self, label: &'h str) -> Option<(&'h str, &'h str)> {
        let inner = label.strip_prefix(self.ha_prefix.as_str())?;
        split(inner.strip_suffix(self.ha_suffix.as_str())?)
    }

    /// The app (name, namespace) `label` names as an app name (`app_dns`).
    pub fn app_key<'h>(&self, label: &'h str) -> Option<(&'h str, &'h str)> {
        split(label).filter(|_| self.app_dns)
    }

    /// Whether `key`'s generated names resolve back to it: a name and a namespace
    /// of lower-case letters and digits only.
    pub fn resolves(&self, key: &AppKey) -> bool {
        let ok = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        ok(&key.name) && ok(&key.namespace)
    }
}

/// `name-namespace` at its first `-` (a byte search: `split_once(char)` cost 200
/// instructions a request more in callgrind).
fn split(label: &str) -> Option<(&str, &str)> {
    let at = label.bytes().position(|b| b == b'-')?;
    Some((&label[..at], &label[at + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(prefix: &str, suffix: &str, app_dns: bool) -> Generated {
        Generated {
            ha_prefix: prefix.into(),
            ha_suffix: suffix.into(),
            domain: ".example.com".into(),
            app_dns,
        }
    }

    /// Both forms of `host`, as the lookup tries them.
    fn candidates(g: &Generated, host: &str) -> Vec<(String, String)> {
        let Some(label) = g.label(host) else {
            return Vec::new();
        };
        [g.ha_key(label), g.app_key(label)]
            .into_iter()
            .flatten()
            .map(|(n, ns)| (n.to_string(), ns.to_string()))
            .collect()
    }

    fn pair(n: &str, ns: &str) -> (String, String) {
        (n.into(), ns.into())
    }

    #[test]
    fn both_forms_are_taken_apart() {
        let g = generated("ha-", "", true);
        assert_eq!(
            candidates(&g, "ha-shop-acme.example.com"),
            [pair("shop", "acme"), pair("ha", "shop-acme")]
        );
        assert_eq!(
            candidates(&g, "shop-acme.example.com"),
            [pair("shop", "acme")]
        );
        let g = generated("", "-ha", false);
        assert_eq!(
            candidates(&g, "shop-acme-ha.example.com"),
            [pair("shop", "acme")]
        );
    }

    #[test]
    fn other_names_are_none() {
        let g = generated("ha-", "", true);
        for host in [
            "www.example.net",
            "example.com",
            ".example.com",
            "shop.example.com",
            "ha-shop-acme.example.com.evil",
            "ha-shop-acmeexample.com",
        ] {
            assert_eq!(candidates(&g, host), [], "{host}");
        }
    }

    proptest::proptest! {
        /// Any name a client sends (outside bytes): taken apart without a panic,
        /// and each form put together again gives that name back.
        #[test]
        fn any_name_is_taken_apart_into_what_makes_it(
            front in "(ha-)?[-a-z0-9.\\x{80}-\\x{10ffff}]{0,24}(-x)?",
            tail in proptest::sample::select(vec![".example.com", "example.com", ".example.org", ""]),
        ) {
            let g = generated("ha-", "-x", true);
            let host = format!("{front}{tail}");
            let Some(label) = g.label(&host) else {
                proptest::prop_assert_ne!(tail, ".example.com");
                return Ok(());
            };
            proptest::prop_assert_eq!(format!("{label}.example.com"), host.clone());
            if let Some((n, ns)) = g.ha_key(label) {
                proptest::prop_assert!(!n.contains('-'));
                proptest::prop_assert_eq!(format!("ha-{n}-{ns}-x"), label);
            }
            if let Some((n, ns)) = g.app_key(label) {
                proptest::prop_assert!(!n.contains('-'));
                proptest::prop_assert_eq!(format!("{n}-{ns}"), label);
            }
        }
    }

    #[test]
    fn only_plain_keys_resolve() {
        let g = generated("ha-", "", true);
        let key = |n: &str, ns: &str| AppKey {
            name: n.into(),
            namespace: ns.into(),
        };
        assert!(g.resolves(&key("shop2", "acme")));
        assert!(!g.resolves(&key("shop-2", "acme")));
        assert!(!g.resolves(&key("Shop", "acme")));
        assert!(!g.resolves(&key("shop", "")));
    }
}
