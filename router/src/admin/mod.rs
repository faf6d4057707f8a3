//! The admin listener (`listen.admin`, loopback by default):
//!
//! | path | answer |
//! |---|---|
//! | `GET /` | the status page (HTML, embedded; see [`status`]) |
//! | `GET /status` | what the status page shows, as JSON |
//! | `GET /healthz` | 200 while the process runs |
//! | `GET /readyz` | 200 once the state is loaded and the listeners are up; 503 before, and from the moment shutdown begins (so keepalived moves the VIP away first) |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /routes` | the live route table as JSON: per app, its host names, members and endpoints (PEP 005's routing-table API) |
//! | `GET /backends` | every member: health, in-flight requests, idle connections, rotate state, apps |
//! | `POST /backends/{address:port}/rotate-out?timeout=2m` | no new requests for that member (persisted); answers once its in-flight requests have drained or the timeout (default 30s) passed, saying which |
//! | `POST /backends/{address:port}/rotate-in` | takes new requests again at once (persisted) |
//! | `POST /aliases/{name}/split` | body `{"app-ns": 90, "app2-ns": 10}`: the name's requests are shared between those apps by weight (persisted; `100/0` moves all at once) |
//! | `DELETE /aliases/{name}/split` | the name goes back to its own app |
//! | `GET /apps/{app}/stats` | the app's traffic: totals since it entered the table, and over the last one to two minutes requests per second, 5xx ratio, p50/p99 response time (see [`crate::metrics::apps`]) |
//! | `GET /apps/settings`, `GET`/`PUT`/`DELETE /apps/{app}/settings` | per-app settings: affinity, limits, access rules, timeouts, maintenance, members' protocol (see [`settings`]) |
//! | `GET /audit` | the last admin actions (who, what, result) |
//! | `/acme/*` | what a router pair's two routers put on and take from each other for ACME, token needed for reads too (see [`acme`]) |
//!
//! Any other path is 404, a wrong method 405. Rotate state survives restarts until
//! the opposite call; rotating out an address that is no member is a 404 (a typo
//! must not be remembered), rotating one in always works. The same holds for a
//! split: the name and every app it names must be in the table.
//!
//! With `admin.token_file`, every mutating call (POST, PUT, DELETE) needs
//! `Authorization: Bearer <token>` (401 without); reads stay open.
//!
//! Against a web page in an operator's browser (the listener is on loopback, which
//! the browser reaches), with or without a token ([`origin`]):
//! - a request whose `Host` is not a name of this listener (its address, a loopback
//!   name, this host's name, or one of `admin.hosts`) gets 421, except the monitoring
//!   paths (`/healthz`, `/readyz`, `/metrics`, scraped by host name): DNS rebinding
//!   cannot read or change anything;
//! - a mutating call whose `Origin` (or, without one, `Referer`) is not this very
//!   listener, or that the browser marks `Sec-Fetch-Site: cross-site`, gets 403: a
//!   cross-site form POST cannot rotate members out.
//!
//! Refused attempts are kept apart from the actions (`refused` in `/audit`, a ring of
//! their own, and `router_admin_refused_total{reason}`), so that a flood of them
//! cannot push an authorised action out of the audit trail.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

mod acme;
mod origin;
pub use origin::Names;
mod settings;
pub use settings::AllSettings;
mod status;

use crate::members::MemberRegistry;
use crate::metrics::Metrics;
use crate::request::limits::Limits;
use crate::request::listener::stopped;
use crate::ring::{Ring, unix_now};
use crate::table::split::{Split, SplitStore};
use crate::table::{EndpointInfo, RouteTable};

/// Largest admin request body (a split's weights).
const MAX_ADMIN_BODY: usize = 16 * 1024;

/// Longest rotate-out wait an operator may ask for.
const MAX_DRAIN_WAIT: Duration = Duration::from_secs(3600);
const DEFAULT_DRAIN_WAIT: Duration = Duration::from_secs(30);

pub struct Admin {
    pub table: Arc<ArcSwap<RouteTable>>,
    pub registry: Arc<MemberRegistry>,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
    /// Blue/green splits, saved.
    pub splits: Arc<SplitStore>,
    /// Per-app settings, saved, and the affinity key.
    pub policies: Arc<crate::policy::Policies>,
    /// `admin.token_file`'s token: mutating calls need it (a reload replaces it).
    pub token: arc_swap::ArcSwapOption<String>,
    pub audit: Audit,
    /// Where `POST /reconcile` asks for a run (`None`: no `reconcile:` section).
    pub reconcile: Option<tokio::sync::mpsc::Sender<crate::reconcile::Job>>,
    /// The last table changes (the status page).
    pub recent: Arc<crate::table::recent::Recent>,
    /// The event source's kind (`spool`, `stomp`, `amqp`, `none`).
    pub source: &'static str,
    /// Where parked messages are (`spool/failed` or `state_dir/dead-letters`).
    pub dead_letters: std::path::PathBuf,
    /// A request body (a split's weights) must arrive within this
    /// (`limits.header_read_timeout`), or 408: a silent client cannot keep its
    /// admin connection.
    pub body_deadline: Duration,
    /// The names requests may carry in `Host` (see [`origin`]); a reload replaces
    /// them.
    pub names: ArcSwap<origin::Names>,
    /// The live certificates (with `listen.https`): where each alias's comes
    /// from (uploaded, ACME, the default) on the status page and `/routes`.
    pub certs: Option<Arc<ArcSwap<crate::tls::store::Certs>>>,
    /// ACME's state (`acme.directory` set): what a pair's peer puts and takes
    /// through `/acme/*` (see [`acme`]).
    pub acme: Option<Arc<crate::tls::acme::Shared>>,
}

/// `admin:` settings.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    /// A file whose first line is the token mutating calls must present
    /// (`Authorization: Bearer ...`). Without it, mutating calls are open to whoever
    /// reaches the admin listener (keep it on loopback), and the status page shows
    /// no buttons.
    pub token_file: Option<std::path::PathBuf>,
    /// Other names the admin listener answers to (`router-a.example.com`), besides
    /// its address, loopback names and this host's name: any other `Host` is 421.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// The certificate chain and key (PEM) the admin listener presents when it is
    /// bound off loopback, where it is served over TLS only; without them,
    /// `tls.default_cert` and `tls.default_key`.
    pub tls_cert: Option<std::path::PathBuf>,
    pub tls_key: Option<std::path::PathBuf>,
    /// The CA (PEM) that `router check-pair` and the other CLI calls trust for
    /// the admin listeners over TLS (the pair's own CA); without it, the system's.
    pub tls_ca: Option<std::path::PathBuf>,
}

/// The last admin actions, newest last, for `/audit` and the status page; the
/// refused attempts in a ring of their own, so that they never evict an action.
pub struct Audit {
    entries: Ring<AuditEntry>,
    refused: Ring<AuditEntry>,
    /// ACME's actions (orders, certificates taken from the pair's peer, the
    /// peer's calls): a ring of their own, so that renewals at scale never
    /// evict an operator's action.
    acme: Ring<AuditEntry>,
}

impl Default for Audit {
    fn default() -> Audit {
        Audit {
            entries: Ring::new(AUDIT_LEN),
            refused: Ring::new(AUDIT_LEN),
            acme: Ring::new(AUDIT_LEN),
        }
    }
}

/// How many actions [`Audit`] keeps.
const AUDIT_LEN: usize = 200;

#[derive(Clone, Debug, Serialize)]
pub struct AuditEntry {
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub client: String,
    pub action: String,
    pub target: String,
    pub result: String,
}

impl AuditEntry {
    fn now(client: &str, action: &str, target: &str, result: &str) -> AuditEntry {
        AuditEntry {
            at: unix_now(),
            client: client.into(),
            action: action.into(),
            target: target.into(),
            result: result.into(),
        }
    }
}

impl Audit {
    pub fn record(&self, client: &str, action: &str, target: &str, result: &str) {
        tracing::info!(client, action, target, result, "admin action");
        self.entries
            .push(AuditEntry::now(client, action, target, result));
    }

    pub fn entries(&self) -> Vec<AuditEntry> {
        self.entries.list()
    }

    /// An ACME action (`client`: the peer's address, or `issuer`).
    pub fn acme(&self, client: &str, action: &str, target: &str, result: &str) {
        tracing::info!(client, action, target, result, "ACME action");
        self.acme
            .push(AuditEntry::now(client, action, target, result));
    }

    pub fn acme_entries(&self) -> Vec<AuditEntry> {
        self.acme.list()
    }

    /// A refused attempt: logged, and kept in the refused ring only.
    pub fn refuse(&self, client: &str, target: &str, result: &str) {
        tracing::warn!(client, target, result, "admin call refused");
        self.refused
            .push(AuditEntry::now(client, "refused", target, result));
    }

    pub fn refused(&self) -> Vec<AuditEntry> {
        self.refused.list()
    }
}

#[derive(Serialize)]
struct RoutesDoc<'a> {
    apps: Vec<AppDoc<'a>>,
    /// Names shared between apps by weight: name → app → weight.
    splits: BTreeMap<&'a str, &'a BTreeMap<String, u32>>,
}

#[derive(Serialize)]
struct AppDoc<'a> {
    name: &'a str,
    namespace: &'a str,
    hosts: Vec<&'a str>,
    members: Vec<MemberDoc<'a>>,
    endpoints: &'a [EndpointInfo],
    aliases: &'a [String],
    certificates: &'a [String],
    /// Aliases served a certificate from the ACME CA (see `crate::issuer`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    acme_certificates: Vec<&'a str>,
    /// What applies of its settings (own over `app_defaults`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    settings: Option<&'a crate::policy::settings::AppSettings>,
}

#[derive(Serialize)]
struct MemberDoc<'a> {
    address: &'a str,
    in_flight: usize,
    /// Upgraded connections (WebSocket) open to it; they hold no request slot.
    tunnels: usize,
    tls: bool,
}

#[derive(Serialize)]
struct LiveMemberDoc<'a> {
    address: &'a str,
    health: &'static str,
    rotate: &'static str,
    in_flight: usize,
    tunnels: usize,
    idle_connections: usize,
    apps: &'a [String],
}

#[derive(Serialize)]
struct RotateDoc<'a> {
    address: &'a str,
    rotate: &'static str,
    /// Whether the address is a member of some route now.
    member: bool,
    /// rotate-out only: `drained` or `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'static str>,
    in_flight: usize,
    waited_ms: u128,
}

/// What a listener of the admin API serves.
#[derive(Clone)]
pub enum Role {
    /// `listen.admin`: everything in the module doc; over TLS when it is bound
    /// off loopback.
    Admin(Option<tokio_rustls::TlsAcceptor>),
    /// `listen.metrics`: `/metrics`, `/healthz` and `/readyz`, read only.
    Metrics,
}

impl Role {
    fn name(&self) -> &'static str {
        match self {
            Role::Admin(_) => "admin",
            Role::Metrics => "metrics",
        }
    }
}

/// The admin listener's TLS (off loopback): `key`, TLS 1.2 and 1.3, HTTP/1.1.
pub fn tls_acceptor(
    key: Arc<rustls::sign::CertifiedKey>,
    provider: Arc<rustls::crypto::CryptoProvider>,
) -> Result<tokio_rustls::TlsAcceptor, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

impl Admin {
    /// `listen.metrics`: the three monitoring paths, `GET` (or `HEAD`) only;
    /// anything else is 404 or 405 and changes nothing.
    fn scrape<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        let path = req.uri().path();
        if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
            return text(
                StatusCode::NOT_FOUND,
                "this listener serves /metrics, /healthz and /readyz only\n",
            );
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        }
        self.read(path)
    }

    async fn handle(
        &self,
        req: Request<Incoming>,
        client: SocketAddr,
        local: SocketAddr,
    ) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_string();
        let mutating = matches!(*req.method(), Method::POST | Method::PUT | Method::DELETE);
        if let Some(refused) = self.refuse(&req, (client, local), &path, mutating) {
            return refused;
        }
        let req = match self.change(req, client, &path, mutating).await {
            Ok(answer) => return answer,
            Err(req) => req,
        };
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        }
        self.read(&path)
    }

    /// The refusal of a call from a browser's foreign page (a name not the
    /// listener's, a cross-site origin) or of a change without the token,
    /// counted and kept in the audit.
    fn refuse(
        &self,
        req: &Request<Incoming>,
        (client, local): (SocketAddr, SocketAddr),
        path: &str,
        mutating: bool,
    ) -> Option<Response<Full<Bytes>>> {
        if let Err(refusal) = self.names.load().check(req, local, mutating) {
            self.metrics.admin_refused(refusal.reason());
            self.audit
                .refuse(&client.ip().to_string(), path, refusal.reason());
            return Some(text(refusal.status(), refusal.message()));
        }
        // `/acme/*` reads carry private keys: the token for every call there.
        if (mutating || path.starts_with("/acme/")) && !self.authorized(req) {
            self.metrics.admin_refused("token");
            self.audit
                .refuse(&client.ip().to_string(), path, "401 no valid token");
            let mut r = text(
                StatusCode::UNAUTHORIZED,
                "this call needs Authorization: Bearer <admin.token_file's token>\n",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return Some(r);
        }
        None
    }

    /// The calls that change something (each kept in the audit), or the request
    /// back when `path` is none of them.
    async fn change(
        &self,
        req: Request<Incoming>,
        client: SocketAddr,
        path: &str,
        mutating: bool,
    ) -> Result<Response<Full<Bytes>>, Request<Incoming>> {
        if let Some(rest) = path.strip_prefix("/backends/") {
            if req.method() != Method::POST {
                return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "use POST\n"));
            }
            let r = self.rotate(rest, req.uri().query()).await;
            self.audit.record(
                &client.ip().to_string(),
                rest.rsplit('/').next().unwrap_or(""),
                rest.rsplit_once('/').map_or(rest, |(a, _)| a),
                r.status().as_str(),
            );
            return Ok(r);
        }
        if let Some(rest) = path.strip_prefix("/acme/") {
            let method = req.method().clone();
            let r = self.acme_call(rest, req).await;
            if mutating {
                self.audit.acme(
                    &client.ip().to_string(),
                    &format!("acme-{}", method.as_str().to_ascii_lowercase()),
                    rest,
                    r.status().as_str(),
                );
            }
            return Ok(r);
        }
        if path == "/reconcile" {
            if req.method() != Method::POST {
                return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "use POST\n"));
            }
            let r = self.reconcile(req.uri().query()).await;
            self.audit.record(
                &client.ip().to_string(),
                "reconcile",
                req.uri().query().unwrap_or(""),
                r.status().as_str(),
            );
            return Ok(r);
        }
        if let Some(name) = path
            .strip_prefix("/aliases/")
            .and_then(|r| r.strip_suffix("/split"))
        {
            let method = req.method().clone();
            let r = match method {
                Method::POST => self.split(name, Some(req)).await,
                Method::DELETE => self.split(name, None).await,
                _ => return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "use POST or DELETE\n")),
            };
            let action = if method == Method::POST {
                "split"
            } else {
                "unsplit"
            };
            self.audit
                .record(&client.ip().to_string(), action, name, r.status().as_str());
            return Ok(r);
        }
        if let Some(app) = path
            .strip_prefix("/apps/")
            .and_then(|r| r.strip_suffix("/settings"))
        {
            let method = req.method().clone();
            let r = self.app_settings(app, &method, req.into_body()).await;
            if mutating {
                let action = if method == Method::PUT {
                    "set-settings"
                } else {
                    "delete-settings"
                };
                self.audit
                    .record(&client.ip().to_string(), action, app, r.status().as_str());
            }
            return Ok(r);
        }
        Err(req)
    }

    /// The read-only paths.
    fn read(&self, path: &str) -> Response<Full<Bytes>> {
        match path {
            "/" => asset(status::PAGE, "text/html; charset=utf-8"),
            "/status.js" => asset(status::SCRIPT, "text/javascript; charset=utf-8"),
            "/status.css" => asset(status::STYLE, "text/css; charset=utf-8"),
            "/status" => json(&status::document(self)),
            "/apps/settings" => json(&self.all_settings()),
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => {
                if self.ready.load(Ordering::Acquire) {
                    text(StatusCode::OK, "ready\n")
                } else {
                    text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                }
            }
            "/metrics" => {
                let mut r = Response::new(Full::new(Bytes::from(self.metrics.render())));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                r
            }
            "/routes" => self.routes(),
            "/backends" => self.backends(),
            "/audit" => json(&serde_json::json!({
                "actions": self.audit.entries(),
                "refused": self.audit.refused(),
                "acme": self.audit.acme_entries(),
            })),
            _ => match path
                .strip_prefix("/apps/")
                .and_then(|r| r.strip_suffix("/stats"))
            {
                Some(app) => self.app_stats(app),
                None => text(StatusCode::NOT_FOUND, "not found\n"),
            },
        }
    }

    /// `GET /apps/{app}/stats`: the app's traffic (see
    /// [`crate::metrics::apps::AppStats`]); 404 for an app not in the table.
    fn app_stats(&self, app: &str) -> Response<Full<Bytes>> {
        let traffic = &self.metrics.app_traffic;
        let now = std::time::Instant::now();
        traffic.pass(now);
        match traffic.stats(app, now) {
            Some(stats) => json(&stats),
            None => text(StatusCode::NOT_FOUND, "no such app in the table\n"),
        }
    }

    fn backends(&self) -> Response<Full<Bytes>> {
        let table = self.table.load_full();
        let mut apps: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in table.routes() {
            for m in &r.members {
                apps.entry(&m.member.addr)
                    .or_default()
                    .push(format!("{}-{}", r.name, r.namespace));
            }
        }
        let live = self.registry.live();
        let members: Vec<LiveMemberDoc> = live
            .iter()
            .map(|b| LiveMemberDoc {
                address: &b.addr,
                health: b.health.get().as_str(),
                rotate: if b.rotated_out() { "out" } else { "in" },
                in_flight: b.in_flight(),
                tunnels: b.tunnels(),
                idle_connections: b.pool.idle_count(),
                apps: apps.get(&*b.addr).map_or(&[], |v| v.as_slice()),
            })
            .collect();
        // Rotated out but not a member now (removed, or not announced yet).
        let absent: Vec<String> = self
            .registry
            .rotated_out()
            .into_iter()
            .filter(|a| !live.iter().any(|b| *b.addr == **a))
            .collect();
        json(&serde_json::json!({
            "backends": members,
            "rotated_out_absent": absent,
        }))
    }

    /// `{address:port}/rotate-out` or `{address:port}/rotate-in`.
    async fn rotate(&self, rest: &str, query: Option<&str>) -> Response<Full<Bytes>> {
        let Some((raw, action)) = rest.rsplit_once('/') else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let out = match action {
            "rotate-out" => true,
            "rotate-in" => false,
            _ => return text(StatusCode::NOT_FOUND, "not found\n"),
        };
        let Some(addr) = percent_decode(raw).filter(|a| valid_member_address(a)) else {
            return text(
                StatusCode::BAD_REQUEST,
                "the member is written address:port, e.g. 10.0.0.1:35531\n",
            );
        };
        let mut wait = DEFAULT_DRAIN_WAIT;
        for (k, v) in query_params(query) {
            if k == "timeout" {
                match humantime::parse_duration(v) {
                    Ok(d) if d <= MAX_DRAIN_WAIT => wait = d,
                    _ => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            "timeout is a duration such as 90s or 2m, at most 1h\n",
                        );
                    }
                }
            }
        }
        if out && self.registry.find(&addr).is_none() {
            return text(
                StatusCode::NOT_FOUND,
                &format!("{addr} is not a member of any route\n"),
            );
        }
        let member = match self.registry.rotate(&addr, out) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(member = %addr, error = %e, "cannot persist rotate state");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("rotate state not saved, nothing changed: {e}\n"),
                );
            }
        };
        tracing::info!(member = %addr, rotate = if out { "out" } else { "in" }, "rotated by operator");
        let start = Instant::now();
        let result = match (&member, out) {
            (Some(b), true) => Some(if b.drain(wait).await {
                "drained"
            } else {
                "timeout"
            }),
            _ => None,
        };
        json(&RotateDoc {
            address: &addr,
            rotate: if out { "out" } else { "in" },
            member: member.is_some(),
            result,
            in_flight: member.as_ref().map_or(0, |m| m.in_flight()),
            waited_ms: start.elapsed().as_millis(),
        })
    }

    /// `POST /reconcile[?apply=true|false]`: one run now; answers with its report.
    async fn reconcile(&self, query: Option<&str>) -> Response<Full<Bytes>> {
        let Some(jobs) = &self.reconcile else {
            return text(
                StatusCode::NOT_FOUND,
                "reconcile is off: set reconcile.url in the configuration\n",
            );
        };
        let mut apply = None;
        for (k, v) in query_params(query) {
            if k == "apply" {
                apply = match v {
                    "true" | "1" => Some(true),
                    "false" | "0" => Some(false),
                    _ => return text(StatusCode::BAD_REQUEST, "apply is true or false\n"),
                };
            }
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = crate::reconcile::Job {
            apply,
            reply: Some(reply),
        };
        if jobs.send(job).await.is_err() {
            return text(StatusCode::SERVICE_UNAVAILABLE, "the router is stopping\n");
        }
        match answer.await {
            Ok(report) => json(&report),
            Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "the router is stopping\n"),
        }
    }

    /// Whether the request carries the admin token (always, without one).
    fn authorized(&self, req: &Request<Incoming>) -> bool {
        let token = self.token.load();
        let Some(token) = token.as_deref() else {
            return true;
        };
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        // Equal length and every byte compared: the time does not tell how much matched.
        given.len() == token.len()
            && given
                .bytes()
                .zip(token.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }

    /// `POST` (with the weights) or `DELETE` (`req` is `None`) `/aliases/{name}/split`.
    async fn split(&self, raw: &str, req: Option<Request<Incoming>>) -> Response<Full<Bytes>> {
        let Some(name) = percent_decode(raw)
            .and_then(|n| crate::request::route::normalize_host(&n).map(|n| n.to_string()))
        else {
            return text(StatusCode::BAD_REQUEST, "not a host name\n");
        };
        let weights = match req {
            Some(req) => {
                let body = match read_limited(req.into_body(), MAX_ADMIN_BODY, self.body_deadline)
                    .await
                {
                    Ok(b) => b,
                    Err(status) => {
                        return text(
                            status,
                            "the body is a JSON object under 16 KiB, sent within limits.header_read_timeout\n",
                        );
                    }
                };
                let weights: BTreeMap<String, u32> = match serde_json::from_slice(&body) {
                    Ok(w) => w,
                    Err(e) => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            &format!(
                                "the body is {{\"app-namespace\": weight, ...}} with whole weights: {e}\n"
                            ),
                        );
                    }
                };
                let split = match Split::new(weights.clone()) {
                    Ok(s) => s,
                    Err(e) => return text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
                };
                let table = self.table.load();
                if table.lookup(&name).is_none() {
                    return text(
                        StatusCode::NOT_FOUND,
                        &format!("{name} is not a name in the route table\n"),
                    );
                }
                if let Some(missing) = split.apps().find(|k| table.app(k).is_none()) {
                    return text(
                        StatusCode::NOT_FOUND,
                        &format!("{missing} is not an app in the route table\n"),
                    );
                }
                Some((weights, Arc::new(split)))
            }
            None => None,
        };
        if let Err(e) = self
            .splits
            .set(&name, weights.as_ref().map(|(w, _)| w.clone()))
        {
            tracing::error!(name, error = %e, "cannot persist the split");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("split not saved, nothing changed: {e}\n"),
            );
        }
        let key: Arc<str> = Arc::from(name.as_str());
        self.table.rcu(|t| {
            let mut next = RouteTable::clone(t);
            match &weights {
                Some((_, split)) => {
                    next.splits.insert(key.clone(), split.clone());
                }
                None => {
                    next.splits.remove(&key);
                }
            }
            Arc::new(next)
        });
        json(&serde_json::json!({
            "name": name,
            "split": weights.map(|(w, _)| w),
        }))
    }

    fn routes(&self) -> Response<Full<Bytes>> {
        let table = self.table.load_full();
        let certs = self.certs.as_ref().map(|c| c.load_full());
        let doc = RoutesDoc {
            apps: table
                .routes()
                .map(|r| AppDoc {
                    name: &r.name,
                    namespace: &r.namespace,
                    hosts: r.hosts.iter().map(|h| &**h).collect(),
                    members: r
                        .members
                        .iter()
                        .map(|m| MemberDoc {
                            address: &m.member.addr,
                            in_flight: m.member.in_flight(),
                            tunnels: m.member.tunnels(),
                            tls: m.tls,
                        })
                        .collect(),
                    endpoints: &r.endpoints,
                    aliases: &r.aliases,
                    certificates: &r.certificates,
                    acme_certificates: r
                        .aliases
                        .iter()
                        .filter(|a| certs.as_ref().is_some_and(|c| c.has_acme(a)))
                        .map(String::as_str)
                        .collect(),
                    settings: table.policy_for(&r.app).map(|p| &p.effective),
                })
                .collect(),
            splits: table
                .splits
                .iter()
                .map(|(name, s)| (&**name, &s.weights))
                .collect(),
        };
        json(&doc)
    }

    /// Serves until `stop`, with the client listeners' head timeout and size limits
    /// and at most `limits.max_admin_connections` connections (beyond, a client
    /// waits for one to end): idle or slow clients cannot hold it, nor take fds
    /// from the client listeners.
    pub async fn listen(
        self: Arc<Self>,
        listener: TcpListener,
        role: Role,
        limits: Limits,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut builder = http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(limits.max_header_bytes.max(8192));
        let name = role.name();
        let errors = self.metrics.accept_errors.with_label_values(&[name]);
        // Facing the network: one client (the one client key) holds at most a
        // quarter of the listener's connections, so a flood from one source
        // leaves room for the scraper and the peer.
        let shares = listener
            .local_addr()
            .is_ok_and(|a| !a.ip().is_loopback())
            .then(|| {
                let cap = (limits.max_admin_connections / 4).max(1);
                (per_source::PerSource::new(cap), limits.client_keys())
            });
        let mut admin = AdminListener {
            listener,
            role,
            shares,
            handshake_timeout: limits.header_read_timeout,
            slots: Arc::new(Semaphore::new(limits.max_admin_connections)),
            builder,
            admin: self,
        };
        accept::run(&mut admin, name, &errors, stopped(&mut stop)).await;
    }
}

/// The admin listener's steps of the one accept loop (`accept::run`): at the
/// cap a client waits for a slot; off loopback, one client's share is capped
/// too (on loopback every client is this host).
struct AdminListener {
    listener: TcpListener,
    role: Role,
    /// Off loopback: each client's connections, by the one client key, and the
    /// rule that keys them.
    shares: Option<(Arc<per_source::PerSource>, per_source::KeyRule)>,
    /// A TLS client's handshake must finish within this
    /// (`limits.header_read_timeout`).
    handshake_timeout: Duration,
    slots: Arc<Semaphore>,
    builder: http1::Builder,
    admin: Arc<Admin>,
}

impl accept::Listener for AdminListener {
    type Source = TcpListener;
    type Admitted = Option<per_source::SourceSlot>;

    fn source(&mut self) -> &mut TcpListener {
        &mut self.listener
    }

    fn admit(
        &mut self,
        client: TcpStream,
        peer: SocketAddr,
    ) -> Option<(TcpStream, Self::Admitted)> {
        let Some((shares, keys)) = &self.shares else {
            return Some((client, None));
        };
        match shares.admit(keys.key(peer.ip())) {
            Some(slot) => Some((client, Some(slot))),
            None => {
                self.admin
                    .metrics
                    .refused
                    .with_label_values(&[self.role.name(), "source_limit"])
                    .inc();
                None
            }
        }
    }

    fn slots(&self) -> Arc<Semaphore> {
        self.slots.clone()
    }

    fn full(&mut self, client: TcpStream, _: &Self::Admitted) -> Option<TcpStream> {
        Some(client)
    }

    fn serve(
        &mut self,
        stream: TcpStream,
        client: SocketAddr,
        share: Self::Admitted,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let admin = self.admin.clone();
        let builder = self.builder.clone();
        let role = self.role.clone();
        let handshake_timeout = self.handshake_timeout;
        let Ok(local) = stream.local_addr() else {
            return;
        };
        tokio::spawn(async move {
            let metrics = matches!(role, Role::Metrics);
            let service = service_fn(move |req| {
                let admin = admin.clone();
                async move {
                    Ok::<_, Infallible>(if metrics {
                        admin.scrape(&req)
                    } else {
                        admin.handle(req, client, local).await
                    })
                }
            });
            if let Role::Admin(Some(tls)) = role {
                let stream = match tokio::time::timeout(handshake_timeout, tls.accept(stream)).await
                {
                    Ok(Ok(s)) => s,
                    _ => return,
                };
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            } else {
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            }
            drop((slot, share));
        });
    }
}

/// The body, up to `limit` bytes within `deadline`: 413 beyond, 408 late, 400 if it
/// breaks off.
async fn read_limited(
    body: Incoming,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, StatusCode> {
    use http_body_util::BodyExt;
    let read = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        }
        Ok(Err(_)) => Err(StatusCode::BAD_REQUEST),
        Err(_) => Err(StatusCode::REQUEST_TIMEOUT),
    }
}

fn json<T: Serialize>(doc: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(doc) {
        Ok(json) => {
            let mut r = Response::new(Full::new(Bytes::from(json)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
    }
}

/// `k=v` pairs of a query string (none without one).
fn query_params(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
}

/// `%3A` and friends, for clients that escape the `:` or brackets of an address.
/// A `%` not followed by two hex digits is refused (a typo must not be remembered).
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let malformed = b.iter().enumerate().any(|(i, c)| {
        *c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    percent_encoding::percent_decode(b)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// `host:port` as members are announced: an IP literal or a DNS name, and a port.
fn valid_member_address(a: &str) -> bool {
    if a.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    match a.rsplit_once(':') {
        Some((host, port)) => {
            port.parse::<u16>().is_ok()
                && !host.is_empty()
                && host
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.')
        }
        None => false,
    }
}

/// An embedded file of the status page: it may load only itself (no other origin,
/// no inline script), and is never framed.
fn asset(body: &'static str, kind: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::copy_from_slice(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_addresses() {
        assert_eq!(
            percent_decode("10.0.0.1%3A80").as_deref(),
            Some("10.0.0.1:80")
        );
        assert_eq!(percent_decode("%zz"), None);
        for good in ["10.0.0.1:80", "[::1]:8080", "node1.example.com:35531"] {
            assert!(valid_member_address(good), "{good}");
        }
        for bad in ["10.0.0.1", "10.0.0.1:99999", ":80", "a b:80", "x:y"] {
            assert!(!valid_member_address(bad), "{bad}");
        }
    }
}
