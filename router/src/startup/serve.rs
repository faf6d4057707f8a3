//! What `Router::run` starts and waits on: the client and admin listeners (on the
//! workers when there are), HTTP/3, and the wait for a shutdown or an upgrade.

use super::*;
use rustls::crypto::CryptoProvider;

/// The admin listener (over `tls` when given) and the metrics listener, each
/// until `stop`.
pub(super) fn spawn_admin(
    (admin, metrics, tls): (
        Option<TcpListener>,
        Option<TcpListener>,
        Option<tokio_rustls::TlsAcceptor>,
    ),
    api: &Arc<Admin>,
    limits: &crate::config::Limits,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    [(admin, Role::Admin(tls)), (metrics, Role::Metrics)]
        .into_iter()
        .filter_map(|(listener, role)| {
            let listen = api
                .clone()
                .listen(listener?, role, limits.clone(), stop.clone());
            Some(tokio::spawn(listen))
        })
        .collect()
}

/// The client listeners served until `stop` (HTTP and HTTPS return their tasks,
/// awaited for the drain; TCP ports end with `stop`). With per-core workers the
/// client listeners accept on the first one (see [`crate::workers`]).
pub(super) fn serve_clients(
    (http, https, tcp): ClientListeners,
    config: &Config,
    live: &Live,
    workers: Option<&Arc<Workers>>,
    (stop, drainer): (
        &watch::Receiver<bool>,
        &crate::request::connection::drain::Drainer,
    ),
) -> (JoinHandle<()>, Option<JoinHandle<()>>) {
    let on = workers.map_or_else(tokio::runtime::Handle::current, |w| w.acceptor().clone());
    let listen = |l, name, tls| {
        on.spawn(crate::request::connection::serve::listen(
            l,
            name,
            tls,
            live.clone(),
            (stop.clone(), drainer.clone()),
            config.shutdown_grace,
            workers.cloned(),
        ))
    };
    let https_task = https.map(|(l, tls)| listen(l, "https", Some(tls)));
    for (rule, (listener, port)) in tcp.into_iter().zip(config.tcp.listen.clone()).enumerate() {
        tokio::spawn(crate::tcp::listen(
            listener,
            rule,
            port,
            live.clone(),
            stop.clone(),
        ));
    }
    (listen(http, "http", None), https_task)
}

/// The plain, TLS and TCP-port listeners.
pub(super) type ClientListeners = (
    TcpListener,
    Option<(TcpListener, crate::tls::server::Acceptor)>,
    Vec<TcpListener>,
);

/// What the serving loop reads of the running router.
pub(super) struct Running<'a> {
    pub(super) config: &'a Config,
    pub(super) admin: &'a Admin,
    pub(super) events: &'a Events,
    pub(super) reconcile: Option<&'a Arc<crate::reconcile::broker::Client>>,
}

/// Serves until `shutdown` (false) or until a successor has taken the listeners
/// (true), running the reconcile jobs asked for meanwhile. A successor that does
/// not confirm leaves this router serving, its event source opened again.
pub(super) async fn serve_until(
    shutdown: impl Future<Output = ()>,
    handover: Option<Handover>,
    mut jobs: tokio::sync::mpsc::Receiver<crate::reconcile::Job>,
    running: Running<'_>,
    sourcing: &mut Sourcing,
    sockets: &[(String, std::os::fd::RawFd)],
) -> bool {
    let Running {
        config,
        admin,
        events,
        reconcile,
    } = running;
    tokio::pin!(shutdown);
    loop {
        let request = async {
            match &handover {
                Some(h) => h.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => return false,
            Some(job) = jobs.recv() => {
                let Some(client) = reconcile else { continue };
                let run = reconcile_once(client.clone(), job.apply, config, admin, events, sourcing);
                let report = tokio::select! {
                    r = run => r,
                    _ = &mut shutdown => return false,
                };
                if let Some(reply) = job.reply {
                    let _ = reply.send(report);
                }
            }
            request = request => {
                tracing::info!("upgrade: a new router asks for the listeners; stopping the event source first");
                sourcing.stop().await;
                if request.hand_over(sockets, UPGRADE_READY_WAIT).await {
                    tracing::info!("upgrade: the new router serves; this one stops accepting and drains");
                    return true;
                }
                tracing::error!("upgrade: the new router did not confirm; this one carries on with its event source");
                sourcing.reopen(events, config, &admin.metrics, |_| {});
            }
        }
    }
}

/// How long an old router waits for its successor to load the state and serve.
pub(super) const UPGRADE_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The first serving generation: the proxy (its member TLS connector, the
/// HTTPS redirect when `https` listens, by default as `tls.redirect_http` says) and
/// the limits, with `kept` (what every later generation shares).
pub(super) fn serving(
    config: &Config,
    mut kept: Kept,
    (live_certs, provider): (
        &Arc<ArcSwap<crate::tls::store::Certs>>,
        &Arc<rustls::crypto::CryptoProvider>,
    ),
    https: Option<&tokio::net::TcpListener>,
) -> Result<Live, StartError> {
    // Members get their own profile (`upstream.tls.profile`) over the same groups.
    let members = (**provider).clone();
    let members = config.upstream.tls.profile().apply(CryptoProvider {
        cipher_suites: rustls::crypto::aws_lc_rs::default_provider().cipher_suites,
        ..members
    });
    kept.member_tls = Some(crate::tls::client::connector(
        config.upstream.tls.ca_file.as_deref(),
        config.upstream.tls.verify,
        Arc::new(members),
    )?);
    kept.redirect = https.map(|l| crate::request::phases::route::Redirect {
        https_port: l.local_addr().map(|a| a.port()).unwrap_or(443),
        certs: live_certs.clone(),
        by_default: config.tls.redirect_http,
    });
    let proxy = with_settings(kept, config, super::reload::error_pages(config)?);
    Ok(Arc::new(ArcSwap::from_pointee(Serving {
        proxy: Arc::new(proxy),
        limits: config.limits.clone(),
        handshake_timeout: config.tls.handshake_timeout,
    })))
}

/// The per-core workers (`worker_threads`), unless the work-stealing runtime
/// serves every connection.
pub(super) fn start_workers(
    config: &Config,
    metrics: &Metrics,
) -> Result<Option<Arc<Workers>>, StartError> {
    Ok(
        crate::workers::count(config.worker_threads, config.work_stealing)
            .map(|n| Workers::start(n, &metrics.worker_connections))
            .transpose()
            .map_err(StartError::Workers)?
            .map(Arc::new),
    )
}

/// The HTTP/3 listener's task: on the workers' acceptor runtime when there are
/// workers, else here; it stops on `stop` and drains for `grace`.
pub(super) fn spawn_http3(
    bound: crate::quic::listener::Bound,
    workers: Option<&Arc<Workers>>,
    live: &Live,
    (stop, drainer, grace): (
        &watch::Receiver<bool>,
        &crate::request::connection::drain::Drainer,
        std::time::Duration,
    ),
) -> tokio::task::JoinHandle<()> {
    let on = workers.map_or_else(tokio::runtime::Handle::current, |w| w.acceptor().clone());
    on.spawn(crate::quic::listener::listen(
        bound,
        live.clone(),
        (stop.clone(), drainer.clone()),
        grace,
    ))
}
