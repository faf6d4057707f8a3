//! Every listening socket the configuration names, bound (or taken over from the
//! router this one replaces, see [`crate::upgrade`]).

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;

use super::StartError;
use crate::config::Config;
use crate::tls::tickets::SharedTicketer;
use crate::upgrade::Inherited;

/// The bound listeners.
pub(super) struct Listeners {
    pub(super) http: TcpListener,
    /// `tcp.listen`, in the configuration's order.
    pub(super) tcp: Vec<TcpListener>,
    pub(super) admin: Option<TcpListener>,
    /// `listen.metrics`: the read-only listener for scrapers.
    pub(super) metrics: Option<TcpListener>,
    pub(super) https: Option<(TcpListener, crate::tls::server::Acceptor)>,
    pub(super) http3: Option<crate::quic::listener::Bound>,
}

impl Listeners {
    /// Binds each listener, or takes the one `inherited` has under its name (a
    /// changed address then needs a restart, and says so).
    pub(super) fn bind(
        config: &Config,
        inherited: &mut Option<Inherited>,
        ticketer: Option<&Arc<SharedTicketer>>,
        (live_certs, staples): (
            &Arc<ArcSwap<crate::tls::store::Certs>>,
            &Arc<crate::tls::ocsp::Staples>,
        ),
        provider: &Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Listeners, StartError> {
        let mut bind = |name: &str, what, addr| bind_named(inherited, name, what, addr);
        let http_addr = config
            .listen
            .http
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 80)));
        let http = bind("http", "listen.http", http_addr)?;
        let tcp = config
            .tcp
            .listen
            .iter()
            .enumerate()
            .map(|(i, p)| bind(&format!("tcp.{i}"), "tcp.listen", p.address))
            .collect::<Result<Vec<_>, _>>()?;
        let [admin, metrics] = [
            ("admin", "listen.admin", config.listen.admin),
            ("metrics", "listen.metrics", config.listen.metrics),
        ]
        .map(|(name, what, addr)| addr.map(|a| bind(name, what, a)).transpose());
        let (admin, metrics) = (admin?, metrics?);
        say_where_admin_is(config.listen.admin);
        let resumption = handshakes(config, ticketer, provider, staples)?;
        let https = match config.listen.https {
            Some(addr) => {
                if config.tls.default_cert.is_none() {
                    tracing::warn!(
                        "listen.https without tls.default_cert: clients without SNI, or with a name that has no alias certificate, fail the handshake"
                    );
                }
                let acceptor = crate::tls::server::acceptor(
                    live_certs.clone(),
                    provider.clone(),
                    resumption.clone(),
                )?;
                Some((bind("https", "listen.https", addr)?, acceptor))
            }
            None => None,
        };
        let http3 = match config.listen.http3 {
            Some(addr) => Some(bind_http3(
                config,
                addr,
                inherited,
                ticketer,
                (live_certs, provider),
                resumption,
            )?),
            None => None,
        };
        if let Some(i) = &inherited {
            for name in i.unused() {
                tracing::warn!(
                    listener = name,
                    "the old router's listener is not in this configuration; closed"
                );
            }
        }
        Ok(Listeners {
            http,
            tcp,
            admin,
            metrics,
            https,
            http3,
        })
    }
}

/// What the admin listener's address means for operators.
fn say_where_admin_is(admin: Option<SocketAddr>) {
    match admin {
        Some(a) if !a.ip().is_loopback() => tracing::warn!(
            address = %a,
            "listen.admin is not on loopback: served over TLS only; the route table and rotate-out are reachable from this network (set admin.token_file; scrapers belong on listen.metrics)"
        ),
        None => tracing::info!("listen.admin is off: no /readyz for keepalived, no metrics"),
        _ => {}
    }
}

/// The HTTP/3 listener (UDP) on `addr`: the old process's socket on an upgrade
/// (see `Inherited::udp_socket`), its QUIC and TLS settings, the pair's keys.
fn bind_http3(
    config: &Config,
    addr: SocketAddr,
    inherited: &mut Option<Inherited>,
    ticketer: Option<&Arc<SharedTicketer>>,
    (live_certs, provider): (
        &Arc<ArcSwap<crate::tls::store::Certs>>,
        &Arc<rustls::crypto::CryptoProvider>,
    ),
    resumption: crate::tls::server::Handshakes,
) -> Result<crate::quic::listener::Bound, StartError> {
    let tls = crate::tls::server::quic_config(live_certs, provider.clone(), resumption)?;
    let keys =
        crate::quic::PairKeys::derive(ticketer.map(|t| t.secret()).as_deref().map(Vec::as_slice));
    let (endpoint, server) = crate::quic::server_config(tls, keys, &config.http3, &config.limits)
        .map_err(StartError::Http3)?;
    let socket = match inherited.as_mut().and_then(|i| i.udp_socket("http3")) {
        Some(s) => s,
        None => crate::quic::listener::bind(addr).map_err(|source| StartError::Bind {
            what: "listen.http3",
            addr,
            source,
        })?,
    };
    Ok(crate::quic::listener::Bound {
        socket,
        endpoint,
        server,
        retry_above: config.http3.retry_above_handshakes,
    })
}

/// How the TLS listeners' handshakes resume sessions and ask for client
/// certificates.
fn handshakes(
    config: &Config,
    ticketer: Option<&Arc<SharedTicketer>>,
    provider: &Arc<rustls::crypto::CryptoProvider>,
    staples: &Arc<crate::tls::ocsp::Staples>,
) -> Result<crate::tls::server::Handshakes, StartError> {
    let resumption = match ticketer {
        _ if !config.tls.resumption => crate::tls::server::Resumption::Off,
        Some(t) => crate::tls::server::Resumption::Shared((*t).clone()),
        None => crate::tls::server::Resumption::Local,
    };
    Ok(crate::tls::server::Handshakes {
        resumption,
        client_auth: client_auth(config, provider)?,
        by_name: client_auth_by_name(config, provider)?,
        staples: staples.clone(),
    })
}

/// `tls.client_certificates`' verifier (none without the key), see [`verifier`].
fn client_auth(
    config: &Config,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>, StartError> {
    let Some(settings) = &config.tls.client_certificates else {
        return Ok(None);
    };
    Ok(Some(verifier(settings, provider)?))
}

/// `tls.client_certificates_by_name`' verifiers, in policy order, and which
/// name gets which.
fn client_auth_by_name(
    config: &Config,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<crate::tls::server::ByName, StartError> {
    let by_name = &config.tls.client_certificates_by_name;
    let verifiers = by_name
        .values()
        .map(|s| verifier(s, provider))
        .collect::<Result<Vec<_>, _>>()?;
    let policies = crate::tls::client_auth::Policies::new(by_name);
    Ok((verifiers, Arc::new(policies)))
}

/// A client-certificate verifier, its CRLs looked at every
/// [`crate::tls::client_auth::CRL_CHECK`].
fn verifier(
    settings: &crate::tls::client_auth::ClientAuthSettings,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, StartError> {
    let verifier = crate::tls::client_auth::Verifier::new(settings, provider.clone())?;
    let watched = Arc::downgrade(&verifier);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(crate::tls::client_auth::CRL_CHECK).await;
            match watched.upgrade() {
                Some(v) => v.refresh(),
                None => return,
            }
        }
    });
    Ok(verifier)
}

/// Listener `name` (`what`, its configuration key) on `addr`: the old router's
/// socket of that name after an upgrade (kept even if the address changed,
/// with a warning: a new address needs a restart), else a new one.
fn bind_named(
    inherited: &mut Option<Inherited>,
    name: &str,
    what: &'static str,
    addr: SocketAddr,
) -> Result<TcpListener, StartError> {
    let listener = match inherited.as_mut().and_then(|i| i.listener(name)) {
        Some(l) => {
            if let Ok(had) = l.as_ref().map(|l| l.local_addr())
                && let Ok(had) = had
                && addr.port() != 0
                && had != addr
            {
                tracing::warn!(listener = name, inherited = %had, configured = %addr, "kept the inherited socket; a new address needs a restart");
            }
            l
        }
        None => crate::request::connection::listener::bind(addr),
    };
    listener.map_err(|source| StartError::Bind { what, addr, source })
}
