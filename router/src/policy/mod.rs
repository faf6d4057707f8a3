//! Per-app policy: what an operator decides for an application beyond what the
//! routing SPI says (the SPI carries none of it): cookie affinity, a request rate
//! and a concurrency bound per client address, allow and deny lists, timeouts, a
//! maintenance switch, and the protocol spoken to its members.
//!
//! The request path reads it after routing and before balancing:
//! accepted → routed → **admitted** ([`Policy::admit`]) → balanced (sticky first,
//! see [`affinity`]) → forwarded. An app with no settings of its own and no
//! `app_defaults:` has no policy at all: the request path pays one map lookup.
//!
//! - [`settings`]: the contract as operators write it (JSON through the admin API,
//!   YAML for `app_defaults:`), checked before anything applies.
//! - [`store`]: an app's own settings, persisted in `state_dir/app-settings.json`.
//! - [`clients`]: the per-client state the limits need (token buckets, requests in
//!   flight), bounded, kept across table swaps.
//! - [`Policies`]: the one owner that compiles settings into the route table.

pub mod affinity;
pub mod clients;
pub mod fields;
pub mod hsts;
pub mod pages;
pub mod settings;
pub mod store;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use per_source::Client;
use spi_consumer::AppKey;

use self::affinity::{Affinity, AffinityKey};
use self::clients::{ClientSlot, Clients};
use self::fields::FieldRules;
use self::settings::{AppSettings, MembersProtocol, PlainHttp};
use self::store::SettingsStore;
use token_bucket::Rate;

/// Every app's compiled policy: those with settings of their own, and the one of
/// the others (none when `app_defaults:` is empty).
pub type Compiled = (
    crate::keyed::Keyed<AppKey, Arc<Policy>>,
    Option<Arc<Policy>>,
);

/// One app's settings, compiled for the request path.
#[derive(Debug)]
pub struct Policy {
    /// The `app` label of `router_app_requests_refused_total`: the app's
    /// `name-namespace` when it has settings of its own, `_default` otherwise (so
    /// the series stay as many as the apps an operator configured).
    pub label: Arc<str>,
    /// What applies (own settings over the defaults), as `/apps/.../settings` shows.
    pub effective: AppSettings,
    allow: Vec<ipnet::IpNet>,
    deny: Vec<ipnet::IpNet>,
    rate: Option<Rate>,
    max_in_flight: u32,
    pub affinity: Option<Affinity>,
    maintenance: Option<MaintenanceAnswer>,
    pub response_timeout: Option<Duration>,
    pub tunnel_idle_timeout: Option<Duration>,
    /// The members speak h2 (prior knowledge, or ALPN `h2` over TLS).
    pub h2: bool,
    /// Responses are compressed as clients ask (`compression`).
    pub compress: bool,
    /// HSTS and header actions (`hsts`, `headers`), if any.
    pub fields: Option<Arc<FieldRules>>,
    /// What plain HTTP gets (`plain_http`; `None`: `tls.redirect_http`).
    pub plain_http: Option<PlainHttp>,
    /// `max_request_body_bytes` (0: no limit).
    pub max_body: u64,
    /// `balance`, when the app has its own (see [`Picking`]).
    pub balance: Option<Picking>,
    /// The app's own pages for 502, 503 and 504 (`error_pages`).
    pub pages: Option<Arc<pages::ErrorPages>>,
}

/// An app's own balancer, compiled.
#[derive(Debug, Clone)]
pub enum Picking {
    /// Power of two choices on requests in flight, in place of `upstream.balance`.
    LeastRequest,
    /// Each member in turn, in place of `upstream.balance`.
    RoundRobin,
    /// A consistent hash of a key (see `crate::table::hash`).
    Hash(HashBy),
}

/// What a hashed app's requests are keyed by.
#[derive(Debug, Clone)]
pub enum HashBy {
    Source,
    Header(http::HeaderName),
    Cookie(Box<[u8]>),
}

impl Picking {
    fn of(b: &settings::AppBalance) -> Option<Picking> {
        use settings::AppBalance;
        Some(match b {
            AppBalance::LeastRequest => Picking::LeastRequest,
            AppBalance::RoundRobin => Picking::RoundRobin,
            AppBalance::Source => Picking::Hash(HashBy::Source),
            AppBalance::Header(n) => Picking::Hash(HashBy::Header(
                http::HeaderName::from_bytes(n.as_bytes()).ok()?,
            )),
            AppBalance::Cookie(n) => Picking::Hash(HashBy::Cookie(n.as_bytes().into())),
        })
    }
}

/// The 503 an app in maintenance answers.
#[derive(Debug, Clone)]
pub struct MaintenanceAnswer {
    pub retry_after: u64,
    pub page: Option<Bytes>,
}

/// Why a request was refused by its app's policy.
#[derive(Debug, Clone)]
pub enum Refused {
    /// Not in `allow`, or in `deny` (403).
    Address,
    /// The app is in maintenance (503 with `Retry-After` and the page).
    Maintenance(MaintenanceAnswer),
    /// Over `rate_limit` (429, `Retry-After` in whole seconds).
    Rate { retry_after: u64 },
    /// Over `max_connections_per_client` (429).
    MemberSlot,
    /// Plain HTTP for an app whose `plain_http` is `none` (403).
    PlainHttp,
    /// A declared body over `max_request_body_bytes` (413).
    BodyTooLarge,
}

impl Refused {
    /// The `reason` label of `router_app_requests_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            Refused::Address => "address",
            Refused::Maintenance(_) => "maintenance",
            Refused::Rate { .. } => "rate_limit",
            Refused::MemberSlot => "max_connections_per_client",
            Refused::PlainHttp => "plain_http",
            Refused::BodyTooLarge => "body_too_large",
        }
    }
}

impl Policy {
    /// Compiles checked settings (see [`AppSettings::check`]).
    pub fn new(label: Arc<str>, effective: AppSettings, key: &AffinityKey) -> Policy {
        let cidrs = |l: &Option<Vec<String>>| -> Vec<ipnet::IpNet> {
            l.iter()
                .flatten()
                .filter_map(|c| settings::parse_cidr(c))
                .collect()
        };
        Policy {
            label,
            allow: cidrs(&effective.allow),
            deny: cidrs(&effective.deny),
            rate: effective
                .rate_limit
                .filter(|r| r.requests_per_second > 0)
                .map(|r| Rate {
                    per_second: f64::from(r.requests_per_second),
                    burst: f64::from(r.burst.unwrap_or(r.requests_per_second)),
                }),
            max_in_flight: effective.max_connections_per_client.unwrap_or(0),
            affinity: effective
                .affinity
                .as_ref()
                .filter(|a| a.enabled)
                .map(|a| Affinity::new(a.clone(), key.clone())),
            maintenance: effective
                .maintenance
                .as_ref()
                .filter(|m| m.enabled)
                .map(|m| MaintenanceAnswer {
                    retry_after: m.retry_after.as_secs().max(1),
                    page: m.page.clone().map(Bytes::from),
                }),
            response_timeout: effective.response_timeout,
            tunnel_idle_timeout: effective.tunnel_idle_timeout,
            h2: effective.members_protocol == Some(MembersProtocol::H2),
            compress: effective.compression == Some(true),
            fields: FieldRules::of(effective.hsts.as_ref(), effective.headers.as_ref()),
            plain_http: effective.plain_http,
            max_body: effective.max_request_body_bytes.unwrap_or(0),
            balance: effective.balance.as_ref().and_then(Picking::of),
            pages: effective
                .error_pages
                .as_ref()
                .filter(|p| !p.is_empty())
                .map(|p| Arc::new(pages::ErrorPages::of_app(p))),
            effective,
        }
    }

    /// Whether `client` may send this request to `app` now: `allow` and `deny`
    /// match its address, the limits count its key. The hold, if any, counts the
    /// request against `max_connections_per_client` until dropped.
    pub fn admit(
        &self,
        app: &AppKey,
        (client, declared): (Client, u64),
        clients: &Clients,
    ) -> Result<Option<ClientSlot>, Refused> {
        let (ip, client) = (client.ip, client.key);
        if (!self.allow.is_empty() && !self.allow.iter().any(|n| n.contains(&ip)))
            || self.deny.iter().any(|n| n.contains(&ip))
        {
            return Err(Refused::Address);
        }
        if let Some(m) = &self.maintenance {
            return Err(Refused::Maintenance(m.clone()));
        }
        if self.max_body > 0 && declared > self.max_body {
            return Err(Refused::BodyTooLarge);
        }
        if let Some(rate) = &self.rate {
            clients.take_token(app, client, rate)?;
        }
        if self.max_in_flight > 0 {
            return clients.hold(app, client, self.max_in_flight).map(Some);
        }
        Ok(None)
    }
}

/// The one owner of app settings: the saved ones, the configuration's defaults and
/// the affinity key; it compiles them for the route table (`RouteTable::policy_for`).
pub struct Policies {
    pub store: SettingsStore,
    defaults: Mutex<AppSettings>,
    /// `hsts_required:` (see [`hsts`]).
    required_hsts: Mutex<Vec<hsts::RequiredHsts>>,
    pub key: AffinityKey,
    /// Per-client state of every app's limits.
    pub clients: Arc<Clients>,
}

impl Policies {
    pub fn new(
        store: SettingsStore,
        defaults: AppSettings,
        key: AffinityKey,
        clients: Clients,
    ) -> Policies {
        Policies {
            store,
            defaults: Mutex::new(defaults),
            required_hsts: Mutex::new(Vec::new()),
            key,
            clients: Arc::new(clients),
        }
    }

    pub fn defaults(&self) -> AppSettings {
        self.defaults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// `hsts_required:` (at start and on reload).
    pub fn set_required_hsts(&self, required: Vec<hsts::RequiredHsts>) {
        *self.required_hsts.lock().unwrap_or_else(|p| p.into_inner()) = required;
    }

    /// Whether `settings` for an app answering to `names` meet
    /// `hsts_required:` (with the defaults under them): the refusal's text.
    pub fn admit_hsts<'a>(
        &self,
        names: impl Iterator<Item = &'a str> + Clone,
        settings: &AppSettings,
    ) -> Result<(), String> {
        let required = self.required_hsts.lock().unwrap_or_else(|p| p.into_inner());
        if required.is_empty() {
            return Ok(());
        }
        let effective = settings.over(&self.defaults());
        hsts::admit(&required, names, effective.hsts.as_ref())
    }

    /// New defaults (a reload); publish the policies again after it.
    pub fn set_defaults(&self, defaults: AppSettings) {
        *self.defaults.lock().unwrap_or_else(|p| p.into_inner()) = defaults;
    }

    /// The compiled policy of every app with settings of its own, and of the rest
    /// (what `table::publish_policies` puts in the live table).
    pub fn compiled(&self) -> Compiled {
        let defaults = self.defaults();
        let own = self
            .store
            .all()
            .into_iter()
            .filter_map(|(app, s)| {
                let key = AppKey::parse(&app)?;
                let policy = Policy::new(Arc::from(app.as_str()), s.over(&defaults), &self.key);
                Some((key, Arc::new(policy)))
            })
            .collect();
        let default = (!defaults.is_empty())
            .then(|| Arc::new(Policy::new(Arc::from("_default"), defaults, &self.key)));
        (own, default)
    }

    /// The effective settings of `app` (own over defaults) and its own.
    pub fn of(&self, app: &str) -> (AppSettings, Option<AppSettings>) {
        let own = self.store.get(app);
        let effective = own.clone().unwrap_or_default().over(&self.defaults());
        (effective, own)
    }
}
