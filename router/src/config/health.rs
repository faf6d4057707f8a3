//! `health:`: active checks of members and passive ejection, and their checks.

use super::*;

/// Member health: active checks, passive ejection, what to do when all are down.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Active checks of every member (down members are probed even when off).
    pub checks: bool,
    /// Path of the HTTP check (`GET`).
    pub path: String,
    /// Statuses that pass: classes (`2xx`) or codes (`401`).
    pub statuses: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Each interval varies by up to ± this, so checks drift apart.
    #[serde(with = "humantime_serde")]
    pub jitter: Duration,
    /// Passes in a row that bring a down member back.
    pub rise: u32,
    /// Failures in a row that take a member down.
    pub fall: u32,
    /// A new member gets no traffic until its first check passes.
    pub gate_new: bool,
    /// Connect failures or resets in a row that eject a member at once; 0 = off.
    pub passive_failures: u32,
    /// With every member of an app down, send to them anyway (else 503).
    pub fail_open: bool,
    /// Host header of HTTP checks; default: the app's name `<app>-<ns>.<cloud_domain>`.
    pub host: Option<String>,
    /// Keep gears awake: send HTTP checks to this port of the member's address (the
    /// node's front end, usually 80) so that the platform's idler sees traffic.
    pub keep_awake_port: Option<u16>,
}

impl Default for HealthConfig {
    fn default() -> HealthConfig {
        HealthConfig {
            checks: true,
            path: Check::default().path,
            statuses: default_check_statuses(),
            interval: member_health::HealthSettings::default().interval,
            timeout: Check::default().timeout,
            jitter: member_health::HealthSettings::default().jitter,
            rise: member_health::HealthSettings::default().rise,
            fall: member_health::HealthSettings::default().fall,
            gate_new: true,
            passive_failures: member_health::HealthSettings::default().passive_failures,
            fail_open: true,
            host: None,
            keep_awake_port: None,
        }
    }
}

impl HealthConfig {
    /// The checker's settings (call after [`Config::parse`] validated them).
    pub fn settings(&self) -> member_health::HealthSettings {
        member_health::HealthSettings {
            active: self.checks,
            check: Check {
                path: self.path.clone(),
                statuses: self
                    .statuses
                    .iter()
                    .filter_map(|s| StatusMatch::parse(s))
                    .collect(),
                timeout: self.timeout,
                host: self.host.clone(),
                keep_awake_port: self.keep_awake_port,
            },
            interval: self.interval,
            jitter: self.jitter,
            rise: self.rise,
            fall: self.fall,
            gate_new: self.gate_new,
            passive_failures: self.passive_failures,
            slow_start: Duration::ZERO,
        }
    }
}

// The defaults of `health.*` are the health module's (one source).
pub(super) fn default_check_statuses() -> Vec<String> {
    Check::default()
        .statuses
        .iter()
        .map(ToString::to_string)
        .collect()
}

impl Config {
    /// `health`.
    pub(super) fn validate_health(&self) -> Result<(), Invalid> {
        let h = &self.health;
        if !h.path.starts_with('/') || h.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err((
                "health.path",
                "must be an origin-form path such as /health".into(),
            ));
        }
        if h.statuses.is_empty() {
            return Err(("health.statuses", "list at least one status".into()));
        }
        if let Some(bad) = h.statuses.iter().find(|s| StatusMatch::parse(s).is_none()) {
            return Err((
                "health.statuses",
                format!("{bad:?} is neither a class like 2xx nor a code like 401"),
            ));
        }
        if h.rise == 0 || h.fall == 0 {
            let field = if h.rise == 0 {
                "health.rise"
            } else {
                "health.fall"
            };
            return Err((field, "must be at least 1".into()));
        }
        if h.timeout > h.interval {
            return Err((
                "health.timeout",
                "must not be longer than health.interval".into(),
            ));
        }
        if let Some(host) = &h.host
            && (host.is_empty() || host.bytes().any(|b| b <= b' ' || b == 0x7f))
        {
            return Err(("health.host", "must be a host name".into()));
        }
        for (field, d) in [
            ("health.interval", h.interval),
            ("health.timeout", h.timeout),
        ] {
            if d.is_zero() {
                return Err((field, "must be longer than 0s".into()));
            }
        }
        Ok(())
    }
}
