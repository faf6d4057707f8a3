//! What an operator sets for an app (`PUT /apps/{app}/settings`, or for every app
//! `app_defaults:` in the configuration file): the contract, as it is written in
//! JSON and YAML. Every field is optional; an app's own value wins over the
//! default, field by field ([`AppSettings::over`]).
//!
//! Checked here ([`AppSettings::check`]) so that the admin API answers 400 and the
//! configuration file refuses to load, naming the field, before anything applies.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fields::HeaderActions;
use super::hsts::Hsts;
use super::pages::MAX_PAGE;

/// Most CIDRs in one allow or deny list (checked per request, in order).
pub const MAX_CIDRS: usize = 256;
/// Highest request rate a limit may name, and its burst.
pub const MAX_RATE: u32 = 1_000_000;

/// One app's settings; `None` = not set here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AppSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<AffinitySettings>,
    /// Requests per second per client address, answered 429 above it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Requests (and tunnels) in flight at once per client address; 0 = no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_client: Option<u32>,
    /// Client addresses (CIDR, or one address) that may use the app; empty = all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Client addresses refused (403), checked after `allow`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
    /// Replaces `upstream.response_timeout` for this app.
    #[serde(
        with = "humantime_serde::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub response_timeout: Option<Duration>,
    /// Replaces `limits.tunnel_idle_timeout` for this app.
    #[serde(
        with = "humantime_serde::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub tunnel_idle_timeout: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<Maintenance>,
    /// How the router speaks to the app's members.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members_protocol: Option<MembersProtocol>,
    /// The app's aliases without a certificate of their own get one from the
    /// ACME CA of `acme.directory` (off unless set; see the README's ACME section).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acme: Option<bool>,
    /// Responses compressed as the client's `Accept-Encoding` asks (gzip,
    /// brotli, zstd; see `request::compress`): off unless set, for the BREACH
    /// trade the app can judge and the router cannot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compression: Option<bool>,
    /// `Strict-Transport-Security` on the app's HTTPS responses (never on
    /// plain HTTP); the router's value replaces the member's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hsts: Option<Hsts>,
    /// Fields set or deleted on requests before the member and on responses
    /// before the client, in order (see [`super::fields`]). `app_defaults`'
    /// actions run after the app's own: the router-wide ones win, as an
    /// OpenShift IngressController's win over a route's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<HeaderActions>,
    /// What a plain-HTTP request for the app gets (default: `tls.redirect_http`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plain_http: Option<PlainHttp>,
    /// The largest request body the app takes, in bytes (413 above it); 0 =
    /// no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_body_bytes: Option<u64>,
    /// How the app's members are chosen (default: `upstream.balance`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance: Option<AppBalance>,
    /// The app's own pages (HTML) for the router's 502, 503 and 504 about its
    /// members, in place of `error_pages:`' (see [`super::pages`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_pages: Option<std::collections::BTreeMap<u16, String>>,
}

/// An app's balancer: `"least_request"`, `"round_robin"`, `"source"`,
/// `{"header": NAME}` or `{"cookie": NAME}` (the last three hash their key
/// onto the members consistently, see `table::hash`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AppBalance {
    /// Power of two choices on requests in flight (the router's `p2c`).
    LeastRequest,
    RoundRobin,
    /// The client key (an IPv4 address, an IPv6 /64): haproxy's `balance source`.
    Source,
    /// A request field's value; without it, the route's balancer.
    Header(String),
    /// A cookie's value; without it, the route's balancer.
    Cookie(String),
}

/// OpenShift's `insecureEdgeTerminationPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlainHttp {
    /// To `https://` with the path and query (301 for GET and HEAD, 308
    /// otherwise, which keeps the method and body).
    Redirect,
    /// Served over plain HTTP as over HTTPS.
    Allow,
    /// Refused (403): the member is never reached over plain HTTP.
    None,
}

/// Cookie affinity (sticky sessions).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AffinitySettings {
    pub enabled: bool,
    /// The cookie's name.
    pub cookie: String,
    /// `Max-Age` of the cookie; none = a session cookie (gone with the browser).
    #[serde(
        with = "humantime_serde::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_age: Option<Duration>,
    /// `SameSite` on HTTPS (plain HTTP cookies carry none: `SameSite=None` needs
    /// `Secure`).
    pub same_site: SameSite,
    /// `Partitioned` (CHIPS) on HTTPS, for apps embedded in other sites.
    pub partitioned: bool,
}

impl Default for AffinitySettings {
    fn default() -> AffinitySettings {
        AffinitySettings {
            enabled: true,
            cookie: "route_affinity".into(),
            max_age: None,
            same_site: SameSite::Lax,
            partitioned: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SameSite {
    Lax,
    Strict,
    None,
}

impl SameSite {
    pub fn as_str(self) -> &'static str {
        match self {
            SameSite::Lax => "Lax",
            SameSite::Strict => "Strict",
            SameSite::None => "None",
        }
    }
}

/// A token bucket per client address: `requests_per_second` refill, `burst` deep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// 0 turns a default limit off for this app.
    pub requests_per_second: u32,
    /// Requests a client may send at once after a quiet spell; default: one
    /// second's worth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// The app answers 503 with `Retry-After` and the operator's page, without
/// touching its members.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Maintenance {
    pub enabled: bool,
    #[serde(with = "humantime_serde")]
    pub retry_after: Duration,
    /// The page (HTML); none = a one-line text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<String>,
}

impl Default for Maintenance {
    fn default() -> Maintenance {
        Maintenance {
            enabled: true,
            retry_after: Duration::from_secs(300),
            page: None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MembersProtocol {
    /// HTTP/1.1 to every member (the default).
    #[default]
    Http1,
    /// HTTP/2: prior knowledge (h2c) on plain members, ALPN `h2` on TLS ones.
    H2,
}

/// A setting that cannot apply, naming the field.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{field}: {problem}")]
pub struct SettingsError {
    pub field: String,
    pub problem: String,
}

fn bad(field: &str, problem: impl Into<String>) -> SettingsError {
    SettingsError {
        field: field.into(),
        problem: problem.into(),
    }
}

impl AppSettings {
    /// These settings over `defaults`: each field set here wins.
    pub fn over(&self, defaults: &AppSettings) -> AppSettings {
        let d = defaults.clone();
        let s = self.clone();
        AppSettings {
            affinity: s.affinity.or(d.affinity),
            rate_limit: s.rate_limit.or(d.rate_limit),
            max_connections_per_client: s
                .max_connections_per_client
                .or(d.max_connections_per_client),
            allow: s.allow.or(d.allow),
            deny: s.deny.or(d.deny),
            response_timeout: s.response_timeout.or(d.response_timeout),
            tunnel_idle_timeout: s.tunnel_idle_timeout.or(d.tunnel_idle_timeout),
            maintenance: s.maintenance.or(d.maintenance),
            members_protocol: s.members_protocol.or(d.members_protocol),
            acme: s.acme.or(d.acme),
            compression: s.compression.or(d.compression),
            hsts: s.hsts.or(d.hsts),
            headers: merged(s.headers, d.headers),
            plain_http: s.plain_http.or(d.plain_http),
            max_request_body_bytes: s.max_request_body_bytes.or(d.max_request_body_bytes),
            balance: s.balance.or(d.balance),
            error_pages: s.error_pages.or(d.error_pages),
        }
    }

    /// One short phrase per setting that does something, for the status page.
    pub fn summary(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(a) = self.affinity.as_ref().filter(|a| a.enabled) {
            out.push(format!("affinity {}", a.cookie));
        }
        if let Some(r) = self.rate_limit.filter(|r| r.requests_per_second > 0) {
            out.push(format!("rate {}/s", r.requests_per_second));
        }
        if let Some(n) = self.max_connections_per_client.filter(|n| *n > 0) {
            out.push(format!("{n} at once per client"));
        }
        if let Some(l) = self.allow.as_ref().filter(|l| !l.is_empty()) {
            out.push(format!("allow {}", l.join(" ")));
        }
        if let Some(l) = self.deny.as_ref().filter(|l| !l.is_empty()) {
            out.push(format!("deny {}", l.join(" ")));
        }
        if let Some(t) = self.response_timeout {
            out.push(format!(
                "response timeout {}",
                humantime::format_duration(t)
            ));
        }
        if let Some(t) = self.tunnel_idle_timeout {
            out.push(format!("tunnel idle {}", humantime::format_duration(t)));
        }
        if self.maintenance.as_ref().is_some_and(|m| m.enabled) {
            out.push("maintenance".into());
        }
        if self.members_protocol == Some(MembersProtocol::H2) {
            out.push("h2 to members".into());
        }
        if self.acme == Some(true) {
            out.push("ACME certificates".to_string());
        }
        if self.compression == Some(true) {
            out.push("compressed".to_string());
        }
        if let Some(h) = &self.hsts {
            out.push(format!("HSTS {}", h.value()));
        }
        if let Some(h) = self.headers.as_ref() {
            let n = h.request.len() + h.response.len();
            if n > 0 {
                out.push(format!("{n} header actions"));
            }
        }
        if let Some(p) = self.plain_http {
            out.push(format!(
                "plain HTTP {}",
                serde_json::to_value(p)
                    .map(|v| v.as_str().unwrap_or_default().to_string())
                    .unwrap_or_default()
            ));
        }
        if let Some(n) = self.max_request_body_bytes.filter(|n| *n > 0) {
            out.push(format!("bodies up to {n} bytes"));
        }
        if let Some(b) = &self.balance {
            out.push(format!("balance {b:?}").to_lowercase());
        }
        if let Some(p) = self.error_pages.as_ref().filter(|p| !p.is_empty()) {
            let statuses: Vec<String> = p.keys().map(u16::to_string).collect();
            out.push(format!("own pages for {}", statuses.join(" ")));
        }
        out
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == AppSettings::default()
    }

    /// Refuses what cannot apply; the field names are the JSON/YAML ones.
    pub fn check(&self) -> Result<(), SettingsError> {
        if let Some(a) = &self.affinity {
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if a.cookie.is_empty() || a.cookie.len() > 64 || !a.cookie.bytes().all(token) {
                return Err(bad(
                    "affinity.cookie",
                    "a cookie name: 1 to 64 letters, digits or !#$%&'*+-.^_`|~",
                ));
            }
            if a.max_age.is_some_and(|m| m.as_secs() == 0) {
                return Err(bad("affinity.max_age", "at least 1s"));
            }
        }
        if let Some(r) = &self.rate_limit {
            if r.requests_per_second > MAX_RATE {
                return Err(bad(
                    "rate_limit.requests_per_second",
                    format!("at most {MAX_RATE}"),
                ));
            }
            if r.burst.is_some_and(|b| b == 0 || b > MAX_RATE) {
                return Err(bad("rate_limit.burst", format!("1 to {MAX_RATE}")));
            }
        }
        for (field, list) in [("allow", &self.allow), ("deny", &self.deny)] {
            let list = list.as_deref().unwrap_or_default();
            if list.len() > MAX_CIDRS {
                return Err(bad(field, format!("at most {MAX_CIDRS} entries")));
            }
            for entry in list {
                parse_cidr(entry).ok_or_else(|| {
                    bad(
                        field,
                        format!("{entry:?} is no address or CIDR (192.0.2.0/24, 2001:db8::/32)"),
                    )
                })?;
            }
        }
        for (field, t) in [
            ("response_timeout", self.response_timeout),
            ("tunnel_idle_timeout", self.tunnel_idle_timeout),
        ] {
            if t.is_some_and(|t| t < Duration::from_millis(100) || t > Duration::from_secs(86_400))
            {
                return Err(bad(field, "from 100ms to 24h"));
            }
        }
        if let Some(m) = &self.maintenance
            && m.page.as_ref().is_some_and(|p| p.len() > MAX_PAGE)
        {
            return Err(bad(
                "maintenance.page",
                format!("at most {} KiB", MAX_PAGE / 1024),
            ));
        }
        self.check_http()
    }

    /// The HTTP fields' settings: `hsts`, `balance`, `error_pages`, `headers`.
    fn check_http(&self) -> Result<(), SettingsError> {
        if let Some(h) = &self.hsts
            && h.max_age > Duration::from_secs(MAX_HSTS_AGE)
        {
            return Err(bad("hsts.max_age", "at most 2 years (63072000s)"));
        }
        match &self.balance {
            Some(AppBalance::Header(name))
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() =>
            {
                return Err(bad("balance.header", format!("{name:?} is no field name")));
            }
            Some(AppBalance::Cookie(name))
                if name.is_empty()
                    || name.len() > 64
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_graphic() && !b"=;,\"".contains(&b)) =>
            {
                return Err(bad("balance.cookie", format!("{name:?} is no cookie name")));
            }
            _ => {}
        }
        if let Some(p) = &self.error_pages {
            super::pages::check(p).map_err(|(field, problem)| bad(&field, problem))?;
        }
        if let Some(h) = &self.headers {
            super::fields::check("headers.request", &h.request, super::fields::Way::Request)
                .map_err(|(field, problem)| bad(&field, problem))?;
            super::fields::check(
                "headers.response",
                &h.response,
                super::fields::Way::Response,
            )
            .map_err(|(field, problem)| bad(&field, problem))?;
        }
        Ok(())
    }
}

/// The longest HSTS `max-age` taken: two years, what the preload list asks
/// at most of (one year is its minimum).
pub const MAX_HSTS_AGE: u64 = 2 * 365 * 24 * 3600;

/// An app's header actions with the defaults' after them (both apply; the
/// defaults' run last and so win for the same name).
fn merged(own: Option<HeaderActions>, defaults: Option<HeaderActions>) -> Option<HeaderActions> {
    match (own, defaults) {
        (Some(mut own), Some(d)) => {
            own.request.extend(d.request);
            own.response.extend(d.response);
            Some(own)
        }
        (own, d) => own.or(d),
    }
}

/// `192.0.2.0/24`, `2001:db8::/32`, or one address (`192.0.2.7` = `/32`).
pub fn parse_cidr(s: &str) -> Option<ipnet::IpNet> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .ok()
        .or_else(|| s.parse::<std::net::IpAddr>().ok().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apps_own_value_wins_field_by_field() {
        let defaults = AppSettings {
            rate_limit: Some(RateLimit {
                requests_per_second: 10,
                burst: None,
            }),
            deny: Some(vec!["10.0.0.0/8".into()]),
            ..AppSettings::default()
        };
        let own = AppSettings {
            deny: Some(vec![]),
            max_connections_per_client: Some(4),
            ..AppSettings::default()
        };
        let e = own.over(&defaults);
        assert_eq!(e.rate_limit, defaults.rate_limit);
        assert_eq!(e.deny, Some(vec![]));
        assert_eq!(e.max_connections_per_client, Some(4));
    }

    #[test]
    fn bad_values_name_their_field() {
        let json = |s: &str| serde_json::from_str::<AppSettings>(s).map_err(|e| e.to_string());
        let check = |s: &str| json(s).and_then(|a| a.check().map_err(|e| e.to_string()));
        assert!(check(r#"{"allow": ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]}"#).is_ok());
        assert_eq!(
            check(r#"{"deny": ["10.0.0.0/33"]}"#).err().as_deref(),
            Some("deny: \"10.0.0.0/33\" is no address or CIDR (192.0.2.0/24, 2001:db8::/32)")
        );
        assert!(
            check(r#"{"affinity": {"cookie": "a b"}}"#)
                .unwrap_err()
                .starts_with("affinity.cookie")
        );
        assert!(
            check(r#"{"rate_limit": {"requests_per_second": 5, "burst": 0}}"#)
                .unwrap_err()
                .starts_with("rate_limit.burst")
        );
        assert!(
            check(r#"{"response_timeout": "1ms"}"#)
                .unwrap_err()
                .starts_with("response_timeout")
        );
        assert!(
            check(r#"{"colour": "blue"}"#)
                .unwrap_err()
                .contains("unknown field")
        );
        let page = format!(
            r#"{{"maintenance": {{"page": "{}"}}}}"#,
            "x".repeat(MAX_PAGE + 1)
        );
        assert!(check(&page).unwrap_err().starts_with("maintenance.page"));
    }

    #[test]
    fn round_trips_through_json_with_only_what_is_set() {
        let a: AppSettings = serde_json::from_str(
            r#"{"affinity": {}, "response_timeout": "2m", "members_protocol": "h2"}"#,
        )
        .expect("parse");
        assert_eq!(a.affinity, Some(AffinitySettings::default()));
        let back = serde_json::to_string(&a).expect("json");
        assert!(!back.contains("rate_limit"), "{back}");
        assert_eq!(
            serde_json::from_str::<AppSettings>(&back).expect("again"),
            a
        );
    }
}
