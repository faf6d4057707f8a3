//! The router-wide HSTS admission (`hsts_required:`, OpenShift's
//! `requiredHSTSPolicies`): an app whose names match a policy's domains must
//! carry HSTS within its bounds, or its settings are refused (400) at
//! `PUT /apps/{app}/settings`, as OpenShift's admission refuses a route.
//!
//! Checked when an operator puts an app's settings (against its own over
//! `app_defaults`); not on the pair's link (both routers have the same
//! configuration) nor on a reload that changes the policies (the apps in
//! force stay; the next `PUT` is checked).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `Strict-Transport-Security` (RFC 6797).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hsts {
    /// `max-age`, in whole seconds; 0 tells browsers to forget the policy.
    #[serde(with = "humantime_serde")]
    pub max_age: Duration,
    #[serde(default)]
    pub include_subdomains: bool,
    #[serde(default)]
    pub preload: bool,
}

impl Hsts {
    /// The field's value.
    pub fn value(&self) -> String {
        let mut v = format!("max-age={}", self.max_age.as_secs());
        if self.include_subdomains {
            v.push_str("; includeSubDomains");
        }
        if self.preload {
            v.push_str("; preload");
        }
        v
    }
}

/// One policy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequiredHsts {
    /// Names the policy covers: `shop.com`, or `*.shop.com` (every name
    /// under it, any depth).
    pub domains: Vec<String>,
    /// The smallest `max-age` taken.
    #[serde(default, with = "humantime_serde::option")]
    pub min_max_age: Option<Duration>,
    /// The largest `max-age` taken.
    #[serde(default, with = "humantime_serde::option")]
    pub max_max_age: Option<Duration>,
    #[serde(default)]
    pub include_subdomains: Requirement,
    #[serde(default)]
    pub preload: Requirement,
}

/// What a policy says of a directive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Requirement {
    #[default]
    Any,
    Required,
    Forbidden,
}

impl Requirement {
    fn allows(self, set: bool) -> bool {
        match self {
            Requirement::Any => true,
            Requirement::Required => set,
            Requirement::Forbidden => !set,
        }
    }
}

impl RequiredHsts {
    /// Whether the policy covers `name` (lower case).
    fn covers(&self, name: &str) -> bool {
        self.domains.iter().any(|d| match d.strip_prefix("*.") {
            Some(suffix) => name
                .strip_suffix(suffix)
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            None => d == name,
        })
    }

    /// Why `hsts` does not meet the policy, if it does not.
    fn unmet(&self, hsts: Option<&Hsts>) -> Option<String> {
        let Some(h) = hsts else {
            return Some("HSTS is required".into());
        };
        if self.min_max_age.is_some_and(|m| h.max_age < m) {
            return Some(format!(
                "max_age is at least {}s",
                self.min_max_age?.as_secs()
            ));
        }
        if self.max_max_age.is_some_and(|m| h.max_age > m) {
            return Some(format!(
                "max_age is at most {}s",
                self.max_max_age?.as_secs()
            ));
        }
        if !self.include_subdomains.allows(h.include_subdomains) {
            return Some(
                format!("include_subdomains is {:?}", self.include_subdomains).to_lowercase(),
            );
        }
        if !self.preload.allows(h.preload) {
            return Some(format!("preload is {:?}", self.preload).to_lowercase());
        }
        None
    }

    /// A policy that cannot apply: the problem.
    pub fn check(&self) -> Result<(), String> {
        if self.domains.is_empty() {
            return Err("domains: at least one".into());
        }
        for d in &self.domains {
            let name = d.strip_prefix("*.").unwrap_or(d);
            let ok = !name.is_empty()
                && name.contains('.')
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !ok {
                return Err(format!("domains: {d:?} is no lower-case name or *.name"));
            }
        }
        if let (Some(min), Some(max)) = (self.min_max_age, self.max_max_age)
            && min > max
        {
            return Err("min_max_age is above max_max_age".into());
        }
        Ok(())
    }
}

/// Whether an app with `names` and the effective `hsts` meets `policies`:
/// `Err` names the name, the policy's place and what it asks.
pub fn admit<'a>(
    policies: &[RequiredHsts],
    names: impl Iterator<Item = &'a str> + Clone,
    hsts: Option<&Hsts>,
) -> Result<(), String> {
    for (i, policy) in policies.iter().enumerate() {
        if let Some(name) = names.clone().find(|n| policy.covers(n))
            && let Some(why) = policy.unmet(hsts)
        {
            return Err(format!("{name} falls under hsts_required[{i}]: {why}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RequiredHsts {
        RequiredHsts {
            domains: vec!["*.shop.com".into(), "shop.com".into()],
            min_max_age: Some(Duration::from_secs(86_400)),
            max_max_age: None,
            include_subdomains: Requirement::Required,
            preload: Requirement::Any,
        }
    }

    fn hsts(days: u64, sub: bool) -> Hsts {
        Hsts {
            max_age: Duration::from_secs(days * 86_400),
            include_subdomains: sub,
            preload: false,
        }
    }

    #[test]
    fn names_under_a_policy_need_hsts_within_its_bounds() {
        let p = [policy()];
        let names = ["www.shop.com", "ha-x-y.example.com"];
        assert!(admit(&p, names.iter().copied(), Some(&hsts(365, true))).is_ok());
        let e = admit(&p, names.iter().copied(), None).unwrap_err();
        assert!(
            e.contains("www.shop.com") && e.contains("hsts_required[0]"),
            "{e}"
        );
        assert!(admit(&p, names.iter().copied(), Some(&hsts(365, false))).is_err());
        assert!(admit(&p, names.iter().copied(), Some(&hsts(0, true))).is_err());
        // A name under no policy needs nothing.
        assert!(admit(&p, ["ha-x-y.example.com"].into_iter(), None).is_ok());
        assert!(admit(&p, ["notshop.com"].into_iter(), None).is_ok());
        assert!(admit(&p, ["shop.com"].into_iter(), None).is_err());
        assert!(policy().check().is_ok());
        let bad = RequiredHsts {
            domains: vec!["Shop.COM".into()],
            ..policy()
        };
        assert!(bad.check().is_err());
    }
}
