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
//! | `POST /aliases/{name}/paths` | body `{"/api": {"app": "api-ns", "rewrite": "/"}}`: the name's requests under each prefix go to that app (longest prefix first, on segment boundaries; persisted; see [`crate::table::paths`]) |
//! | `DELETE /aliases/{name}/paths` | the name's path routes removed |
//! | `GET /apps/{app}/stats` | the app's traffic: totals since it entered the table, and over the last one to two minutes requests per second, 5xx ratio, p50/p99 response time (see [`crate::metrics::apps`]) |
//! | `GET /apps/settings`, `GET`/`PUT`/`DELETE /apps/{app}/settings` | per-app settings: affinity, limits, access rules, timeouts, maintenance, members' protocol (see [`settings`]) |
//! | `GET /audit` | the last admin actions (who, what, result) |
//! | `/acme/*` | what a router pair's two routers put on and take from each other for ACME, token needed for reads too (see [`acme`]) |
//! | `GET /pair/state` | the pair's shared entries' versions, this router's name and epoch, whether the peer answers: what `router check-pair` explains a difference with |
//! | `POST /pair/updates` | the pair's other router's shared-state entries (settings, splits, rotate states), applied when newer; answers this router's epoch (see [`pair`]) |
//! | `GET /ocsp/{file}` | a saved OCSP staple (`tls.ocsp`), for the pair's other router (see [`crate::tls::ocsp::stapler`]) |
//! | `POST /pair/counts` | the tokens the pair's other router's clients took from each app's rate limit, taken here too (see [`crate::pair::counts`]) |
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
mod aliases;
mod audit;
pub use audit::{Audit, AuditEntry};
mod backends;
mod listener;
pub use listener::{Role, tls_acceptor};
mod reconcile;
mod respond;
use respond::{asset, json, percent_decode, query_params, read_limited, text};
mod origin;
mod pair;
mod routes;
pub use origin::Names;
mod settings;
pub use settings::AllSettings;
mod status;

use crate::members::MemberRegistry;
use crate::metrics::Metrics;
use crate::request::connection::limits::Limits;
use crate::request::connection::listener::stopped;
use crate::ring::{Ring, unix_now};
use crate::table::paths::{PathRules, PathTable};
use crate::table::split::{Split, SplitStore};
use crate::table::{EndpointInfo, RouteTable};

/// Largest admin request body (a split's weights).
const MAX_ADMIN_BODY: usize = 16 * 1024;

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
    pub acme: Option<Arc<crate::issuer::shared::Shared>>,
    /// The pair's link (`pair.peer`): what is put here is shared with the
    /// other router, and what it puts is applied here (see [`pair`]).
    pub pair: Option<Arc<crate::pair::link::Link>>,
    /// Where the OCSP staples are saved (`tls.ocsp.stapling`): served as
    /// `GET /ocsp/{file}` to the pair's other router (see
    /// [`crate::tls::ocsp::stapler`]).
    pub ocsp_dir: Option<std::path::PathBuf>,
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

    /// `POST`/`DELETE /aliases/{name}/split` and `/aliases/{name}/paths`,
    /// each kept in the audit (`split`, `unsplit`, `paths`, `unpaths`).
    async fn alias_call(
        &self,
        rest: &str,
        req: Request<Incoming>,
        client: SocketAddr,
    ) -> Response<Full<Bytes>> {
        let method = req.method().clone();
        let post = method == Method::POST;
        if method != Method::POST && method != Method::DELETE {
            return text(StatusCode::METHOD_NOT_ALLOWED, "use POST or DELETE\n");
        }
        let body = post.then_some(req);
        let (name, r, action) = if let Some(name) = rest.strip_suffix("/split") {
            (name, self.split(name, body).await, ["unsplit", "split"])
        } else if let Some(name) = rest.strip_suffix("/paths") {
            (name, self.paths(name, body).await, ["unpaths", "paths"])
        } else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let action = action[usize::from(post)];
        self.audit
            .record(&client.ip().to_string(), action, name, r.status().as_str());
        r
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
        if path == "/pair/updates" || path == "/pair/counts" {
            if req.method() != Method::POST {
                return Ok(text(StatusCode::METHOD_NOT_ALLOWED, "use POST\n"));
            }
            if path == "/pair/counts" {
                return Ok(self.pair_counts(req).await);
            }
            return Ok(self.pair_updates(req).await);
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
        if let Some(rest) = path.strip_prefix("/aliases/") {
            return Ok(self.alias_call(rest, req, client).await);
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
                let mut r = if self.ready.load(Ordering::Acquire) {
                    text(StatusCode::OK, "ready\n")
                } else {
                    text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                };
                // Which process answers: a supervisor follows a binary upgrade
                // by it (`keepalived/router-supervise`), as systemd does by MAINPID=.
                r.headers_mut()
                    .insert("router-pid", header::HeaderValue::from(std::process::id()));
                r
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
            "/pair/state" => self.pair_state(),
            "/backends" => self.backends(),
            "/audit" => json(&serde_json::json!({
                "actions": self.audit.entries(),
                "refused": self.audit.refused(),
                "acme": self.audit.acme_entries(),
            })),
            _ if path.starts_with("/ocsp/") => self.ocsp_staple(&path["/ocsp/".len()..]),
            _ => match path
                .strip_prefix("/apps/")
                .and_then(|r| r.strip_suffix("/stats"))
            {
                Some(app) => self.app_stats(app),
                None => text(StatusCode::NOT_FOUND, "not found\n"),
            },
        }
    }

    /// `GET /ocsp/{file}`: a saved OCSP staple (public: what every handshake
    /// sends), for the pair's other router.
    fn ocsp_staple(&self, stem: &str) -> Response<Full<Bytes>> {
        let saved = self
            .ocsp_dir
            .as_deref()
            .and_then(|dir| crate::tls::ocsp::stapler::saved(dir, stem));
        match saved {
            Some(body) => {
                let mut r = Response::new(Full::new(Bytes::from(body)));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                r
            }
            None => text(StatusCode::NOT_FOUND, "no staple saved under that name\n"),
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
