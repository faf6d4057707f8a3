//! A changed configuration applied while the router runs (SIGHUP), and the proxy
//! settings each generation is built with.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::StartError;
use super::files::{admin_token, fit_file_descriptors, load_default_cert};
use crate::admin::Admin;
use crate::config::Config;
use crate::members::MemberRegistry;
use crate::metrics::Metrics;
use crate::request::Proxy;
use crate::request::connection::listener::{Live, Serving};
use crate::request::phases::upload::UploadSettings;
use crate::table::RouteTable;
use crate::tls::store::CertIndex;
use crate::upstream;

/// What a reload keeps: the parts every generation of the [`Proxy`] shares (a
/// reload changes only settings).
pub(super) struct Kept {
    pub(super) table: Arc<ArcSwap<RouteTable>>,
    pub(super) member_tls: Option<tokio_rustls::TlsConnector>,
    pub(super) redirect: Option<crate::request::phases::route::Redirect>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) certs: Option<Arc<ArcSwap<crate::tls::store::Certs>>>,
    pub(super) clients: Arc<crate::policy::clients::Clients>,
    pub(super) alt_svc: Option<http::HeaderValue>,
    pub(super) acme: Option<Arc<acme::Challenges>>,
    pub(super) traces: Option<Arc<spans::Spans>>,
    pub(super) compression: Arc<compress::Compression>,
    pub(super) access_sink: Option<Arc<crate::syslog::Sink>>,
    /// Whether clients are asked for certificates router-wide, and each
    /// name's policy: what the TLS listeners were built with (a change of
    /// `tls.client_certificates*` needs a restart).
    pub(super) client_auth: (bool, Arc<crate::tls::client_auth::Policies>),
}

impl Kept {
    pub(super) fn of(p: &Proxy) -> Kept {
        Kept {
            table: p.table.clone(),
            member_tls: p.member_tls.clone(),
            redirect: p.redirect.clone(),
            metrics: p.metrics.clone(),
            certs: p.certs.clone(),
            clients: p.clients.clone(),
            alt_svc: p.alt_svc.clone(),
            acme: p.acme.clone(),
            traces: p.traces.clone(),
            compression: p.compression.clone(),
            access_sink: p.access_sink.clone(),
            client_auth: (p.client_auth, p.client_policies.clone()),
        }
    }
}

/// The proxy with the settings of `config` (what a reload may change).
pub(super) fn with_settings(
    base: Kept,
    config: &Config,
    error_pages: Option<Arc<crate::policy::pages::ErrorPages>>,
) -> Proxy {
    Proxy {
        table: base.table,
        member_tls: base.member_tls,
        redirect: base.redirect,
        upstream: upstream::ConnectSettings {
            connect_timeout: config.upstream.connect_timeout,
        },
        metrics: base.metrics,
        response_timeout: config.upstream.response_timeout,
        queue_timeout: config.upstream.queue_timeout,
        upload: UploadSettings {
            buffer: config.limits.body_buffer_bytes,
            first: config.limits.header_read_timeout,
            stall: config.limits.body_timeout,
        },
        tunnel_idle_timeout: config.limits.tunnel_idle_timeout,
        forwarded: config.forwarded.clone(),
        certs: base.certs,
        access_log: config.access_log.enabled,
        access_stderr: config.access_log.stderr,
        clients: base.clients,
        alt_svc: base.alt_svc,
        acme: base.acme,
        traces: base.traces,
        compression: base.compression,
        access_sink: base.access_sink,
        error_pages,
        client_auth: base.client_auth.0,
        client_policies: base.client_auth.1,
        proxy_trusted: config.proxy_protocol.networks().into(),
    }
}

/// The pages of `error_pages:`, read now (a page that cannot be read stops
/// the start or the reload, naming its file).
pub(super) fn error_pages(
    config: &Config,
) -> Result<Option<Arc<crate::policy::pages::ErrorPages>>, StartError> {
    let Some(dir) = &config.error_pages else {
        return Ok(None);
    };
    let pages = crate::policy::pages::ErrorPages::load(dir)?;
    tracing::info!(dir = %dir.display(), pages = pages.len(), "error pages loaded");
    Ok(Some(Arc::new(pages)))
}

/// Applies a changed configuration file to the running router (SIGHUP, what
/// `systemctl reload` sends).
///
/// Live at once: `limits.*` (connection-level ones for connections accepted from
/// then on), `upstream` timeouts, `health.*` checks and thresholds, the default
/// certificate and the TLS handshake deadline, `access_log.enabled`, `forwarded` and
/// the admin token, `app_defaults`, `metrics.*`.
/// Everything else needs a restart (or an upgrade, see `docs/operations.md`); a reload that
/// changes it says so by name and keeps the running value.
#[derive(Clone)]
pub struct Reloader {
    pub(super) live: Live,
    pub(super) admin: Arc<Admin>,
    pub(super) registry: Arc<MemberRegistry>,
    pub(super) certs: Arc<Mutex<CertIndex>>,
    pub(super) provider: Arc<rustls::crypto::CryptoProvider>,
    pub(super) metrics: Arc<Metrics>,
    /// As started: settings that cannot change live are compared with it.
    pub(super) started: Arc<Config>,
}

impl Reloader {
    /// Applies `config` (already parsed and validated whole). On error nothing
    /// changed; on success, the settings that need a restart and differ are returned.
    pub fn apply(&self, mut config: Config) -> Result<Vec<&'static str>, StartError> {
        fit_file_descriptors(&mut config);
        // Everything that can fail first: on error nothing has changed.
        let loaded = load_default_cert(&config.tls, &self.provider)
            .and_then(|cert| Ok((cert, admin_token(&config)?, error_pages(&config)?)));
        let (default_cert, token, pages) = match loaded {
            Ok(l) => l,
            Err(e) => {
                self.metrics.reloads.with_label_values(&["error"]).inc();
                return Err(e);
            }
        };
        self.admin.token.store(token.map(Arc::new));
        self.admin
            .names
            .store(Arc::new(crate::admin::Names::new(&config.admin.hosts)));
        let current = self.live.load_full();
        let proxy = with_settings(Kept::of(&current.proxy), &config, pages);
        self.registry.set_health(config.member_health());
        self.metrics.app_traffic.set_limits(config.metrics.limits());
        self.admin
            .policies
            .set_defaults(config.app_defaults.clone());
        self.admin
            .policies
            .set_required_hsts(config.hsts_required.clone());
        crate::table::publish_policies(&self.admin.table, &self.admin.policies);
        if let Some(l) = &default_cert {
            self.metrics.tls.set_expiry("default", l.not_after);
        }
        self.certs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_default(default_cert.map(|l| l.key));
        self.live.store(Arc::new(Serving {
            proxy: Arc::new(proxy),
            limits: config.limits.clone(),
            handshake_timeout: config.tls.handshake_timeout,
        }));
        self.metrics.reloads.with_label_values(&["ok"]).inc();
        Ok(not_live(&self.started, &config))
    }

    /// Counts a reload refused before [`apply`](Self::apply) (the file did not parse).
    pub fn refused(&self) {
        self.metrics.reloads.with_label_values(&["error"]).inc();
    }
}

/// The settings that differ between `a` and `b` and cannot change without a restart.
pub(super) fn not_live(a: &Config, b: &Config) -> Vec<&'static str> {
    macro_rules! fields {
        ($($name:literal => $($f:ident).+),* $(,)?) => {{
            let mut out = Vec::new();
            $(if format!("{:?}", a.$($f).+) != format!("{:?}", b.$($f).+) { out.push($name); })*
            out
        }};
    }
    fields! {
        "cloud_domain" => cloud_domain,
        "ha_dns_prefix" => ha_dns_prefix,
        "ha_dns_suffix" => ha_dns_suffix,
        "app_dns" => app_dns,
        "wildcard_aliases" => wildcard_aliases,
        "endpoint_types" => endpoint_types,
        "listen" => listen,
        "admin.tls_cert" => admin.tls_cert,
        "admin.tls_key" => admin.tls_key,
        "state_dir" => state_dir,
        "spi" => spi,
        "worker_threads" => worker_threads,
        "work_stealing" => work_stealing,
        "tcp" => tcp,
        "shutdown_grace" => shutdown_grace,
        "reconcile" => reconcile,
        "access_log.format" => access_log.format,
        "limits.max_admin_connections" => limits.max_admin_connections,
        "upstream.balance" => upstream.balance,
        "upstream.tls" => upstream.tls,
        "upstream.max_connections_per_backend" => upstream.max_connections_per_backend,
        "upstream.max_idle_per_backend" => upstream.max_idle_per_backend,
        "upstream.idle_timeout" => upstream.idle_timeout,
        "upstream.source_share" => upstream.source_share,
        "upstream.source_reserve" => upstream.source_reserve,
        "health.fail_open" => health.fail_open,
        "tls.session_ticket_key_file" => tls.session_ticket_key_file,
        "tls.session_ticket_rotation" => tls.session_ticket_rotation,
        "tls.resumption" => tls.resumption,
        "tls.replace_grace" => tls.replace_grace,
        "tls.redirect_http" => tls.redirect_http,
        "tls.groups" => tls.groups,
        "tls.profile" => tls.profile,
        "tls.min_version" => tls.min_version,
        "tls.ciphers" => tls.ciphers,
        "tls.client_certificates" => tls.client_certificates,
        "tls.client_certificates_by_name" => tls.client_certificates_by_name,
        "tls.ocsp" => tls.ocsp,
        "affinity_key_file" => affinity_key_file,
        "http3" => http3,
        "traces" => traces,
        "compression" => compression,
    }
}
