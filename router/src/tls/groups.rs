//! The key-exchange groups the router's handshakes offer, in order of
//! preference (`tls.groups`), and the label a handshake is counted under.
//!
//! rustls with aws-lc-rs prefers the hybrid post-quantum `X25519MLKEM768`
//! (X25519 with ML-KEM-768, the group browsers offer first since 2024), then
//! `X25519`, `secp256r1`, `secp384r1`: that is the default. A client that offers
//! only X25519 (haproxy's and nginx's peers on Debian 12, OpenSSL 3.0) still
//! connects: the server picks the first of its groups the client has a share
//! or support for. An operator may drop the hybrid (its ClientHello share is
//! 1.2 KB, its CPU a little more) or pin a curve for compliance.

use rustls::NamedGroup;
use rustls::crypto::{CryptoProvider, SupportedKxGroup, aws_lc_rs};

/// Every group the provider can do, by the name `tls.groups` takes (case
/// ignored) and the `group` label of `router_tls_handshakes_total`.
const KNOWN: [(&str, NamedGroup); 6] = [
    ("x25519mlkem768", NamedGroup::X25519MLKEM768),
    ("secp256r1mlkem768", NamedGroup::secp256r1MLKEM768),
    ("mlkem768", NamedGroup::MLKEM768),
    ("x25519", NamedGroup::X25519),
    ("secp256r1", NamedGroup::secp256r1),
    ("secp384r1", NamedGroup::secp384r1),
];

/// `tls.groups`'s default: the provider's own order.
pub fn default_names() -> Vec<String> {
    ["x25519mlkem768", "x25519", "secp256r1", "secp384r1"]
        .map(String::from)
        .to_vec()
}

/// The `group` label a handshake is counted under (one of
/// `crate::metrics::TLS_GROUPS`): the group's name, or `none`.
pub fn label(group: Option<NamedGroup>) -> &'static str {
    group
        .and_then(|g| KNOWN.iter().find(|(_, k)| *k == g))
        .map_or("none", |(n, _)| n)
}

fn lookup(name: &str) -> Option<&'static dyn SupportedKxGroup> {
    let (_, group) = KNOWN.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?;
    aws_lc_rs::ALL_KX_GROUPS
        .iter()
        .copied()
        .find(|g| g.name() == *group)
}

/// Whether `names` can be offered: each a known group, once, at least one.
pub fn check(names: &[String]) -> Result<(), String> {
    if names.is_empty() {
        return Err("at least one group".into());
    }
    for (i, n) in names.iter().enumerate() {
        if lookup(n).is_none() {
            let known: Vec<&str> = KNOWN.iter().map(|(k, _)| *k).collect();
            return Err(format!(
                "{n:?}: not a group this router has (one of {known:?})"
            ));
        }
        if names[..i].iter().any(|m| m.eq_ignore_ascii_case(n)) {
            return Err(format!("{n:?} is named twice"));
        }
    }
    Ok(())
}

/// The aws-lc-rs provider offering `names` in that order (checked by [`check`];
/// an unknown name is skipped).
pub fn provider(names: &[String]) -> CryptoProvider {
    let mut provider = aws_lc_rs::default_provider();
    provider.kx_groups = names.iter().filter_map(|n| lookup(n)).collect();
    provider
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_providers_own_order() {
        let ours: Vec<NamedGroup> = provider(&default_names())
            .kx_groups
            .iter()
            .map(|g| g.name())
            .collect();
        let theirs: Vec<NamedGroup> = aws_lc_rs::default_provider()
            .kx_groups
            .iter()
            .map(|g| g.name())
            .collect();
        assert_eq!(ours, theirs);
        assert_eq!(ours[0], NamedGroup::X25519MLKEM768);
    }

    #[test]
    fn names_are_checked_and_ordered() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check(&names(&["X25519", "secp256r1"])).is_ok());
        assert!(check(&names(&[])).is_err());
        assert!(check(&names(&["x448"])).is_err());
        assert!(check(&names(&["x25519", "X25519"])).is_err());
        let p = provider(&names(&["secp384r1", "x25519"]));
        let order: Vec<NamedGroup> = p.kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(order, [NamedGroup::secp384r1, NamedGroup::X25519]);
        assert_eq!(label(Some(NamedGroup::X25519)), "x25519");
        assert_eq!(label(None), "none");
    }

    #[test]
    fn every_group_has_its_metric_label() {
        for (name, _) in KNOWN {
            assert!(crate::metrics::TLS_GROUPS.contains(&name), "{name}");
        }
    }
}
