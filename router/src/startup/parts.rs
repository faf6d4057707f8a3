//! What `Router::bind` makes before anything serves: the per-app policies, the first
//! route table, the member registry, the names, the TLS state, the predecessor's
//! sockets, the reconcile client, the ACME state and the admin API.

use super::*;
use crate::table::paths::PathTable;

/// The app settings saved in the state directory, the configuration's defaults
/// and the affinity key.
pub(super) fn app_policies(
    config: &Config,
    metrics: &Metrics,
) -> Result<crate::policy::Policies, StartError> {
    let store = crate::policy::store::SettingsStore::open(&config.state_dir)?;
    let key = crate::policy::affinity::AffinityKey::load(
        config.affinity_key_file.as_deref(),
        &config.state_dir,
    )?;
    let clients = crate::policy::clients::Clients::new(metrics.app_untracked.clone());
    let policies = crate::policy::Policies::new(store, config.app_defaults.clone(), key, clients);
    policies.set_required_hsts(config.hsts_required.clone());
    Ok(policies)
}

/// The route table before any event: the saved blue/green splits and path
/// routes only.
pub(super) fn initial_table(splits: &SplitStore) -> RouteTable {
    RouteTable {
        splits: splits
            .all()
            .into_iter()
            .filter_map(|(name, w)| Some((Arc::from(name.as_str()), Arc::new(Split::new(w).ok()?))))
            .collect(),
        paths: splits
            .paths()
            .into_iter()
            .filter_map(|(name, rules)| match PathTable::new(rules) {
                Ok(t) => Some((Arc::from(name.as_str()), Arc::new(t))),
                Err(e) => {
                    tracing::error!(name, error = %e, "splits.json: path routes left out");
                    None
                }
            })
            .collect(),
        ..RouteTable::default()
    }
}

/// Every member's slots, pool and health, from `upstream` and `health`.
pub(super) fn member_registry(
    config: &Config,
    metrics: &Metrics,
    workers: Option<&Workers>,
) -> Result<Arc<MemberRegistry>, StartError> {
    Ok(Arc::new(MemberRegistry::new(MemberRegistryConfig {
        max_in_flight: config.upstream.max_connections_per_backend,
        max_per_source: config.upstream.max_per_source(),
        reserve_percent: config.upstream.source_reserve,
        pool: PoolSettings {
            max_idle: config.upstream.max_idle(),
            workers: workers.map_or(1, |w| w.threads()),
            idle_timeout: config.upstream.idle_timeout,
            opened: metrics.upstream_connections.clone(),
        },
        health: config.member_health(),
        metrics: metrics.health.clone(),
        rotate: crate::members::rotate::RotateStore::open(&config.state_dir)?,
        checkers: Some(tokio::runtime::Handle::current()),
    })))
}

/// How host names are made from apps (the route table's builder needs it).
pub(super) fn naming(config: &Config) -> Naming {
    Naming {
        cloud_domain: config.cloud_domain.to_ascii_lowercase(),
        ha_prefix: config.ha_dns_prefix.clone(),
        ha_suffix: config.ha_dns_suffix.clone(),
        app_dns: config.app_dns,
        wildcard_aliases: config.wildcard_aliases,
        endpoint_types: config.endpoint_types.clone(),
        balance: config.upstream.balance,
        fail_open: config.health.fail_open,
        tcp: config.tcp.listen.iter().map(|p| p.matcher()).collect(),
    }
}

/// The certificate index and the shared ticket key, if one is configured.
/// The live certificates, when there is an HTTPS listener.
pub(super) type LiveCerts = Option<Arc<ArcSwap<crate::tls::store::Certs>>>;
/// The client side's TLS state before any listener: the certificates and
/// their staples, the shared ticket key.
pub(super) struct TlsState {
    pub(super) certs: Arc<Mutex<CertIndex>>,
    pub(super) ticketer: Option<Arc<SharedTicketer>>,
    /// What handshakes read: the certificates, their OCSP staples.
    pub(super) live: Arc<ArcSwap<crate::tls::store::Certs>>,
    pub(super) staples: Arc<crate::tls::ocsp::Staples>,
    /// The saved staples read back: served from the first handshake.
    pub(super) stapler: Option<crate::tls::ocsp::stapler::Stapler>,
}

/// The certificate index (with the default certificate, which must load), the
/// shared ticket key if one is configured, and the OCSP stapler if on.
pub(super) fn tls_state(
    config: &Config,
    provider: &Arc<rustls::crypto::CryptoProvider>,
    metrics: &Metrics,
) -> Result<TlsState, StartError> {
    let default_cert = load_default_cert(&config.tls, provider)?;
    if let Some(l) = &default_cert {
        metrics.tls.set_expiry("default", l.not_after);
    }
    // The saved state is the first update: its certificates load lazily.
    let certs = Arc::new(Mutex::new(
        CertIndex::new(
            default_cert.map(|l| l.key),
            provider.clone(),
            metrics.tls.clone(),
            config.tls.replace_grace,
        )
        .restoring(),
    ));
    let ticketer = match &config.tls.session_ticket_key_file {
        Some(path) if config.tls.resumption => Some(Arc::new(SharedTicketer::open(
            path,
            config.tls.session_ticket_rotation,
        )?)),
        _ => None,
    };
    let (live, staples) = {
        let index = certs.lock().unwrap_or_else(|p| p.into_inner());
        (index.live(), index.staples())
    };
    let stapler = stapler(config, (&live, &staples), provider, metrics);
    Ok(TlsState {
        certs,
        ticketer,
        live,
        staples,
        stapler,
    })
}

/// The splits' store, the route table with the saved splits, the per-app policies.
pub(super) type RoutingState = (
    Arc<SplitStore>,
    Arc<ArcSwap<RouteTable>>,
    Arc<crate::policy::Policies>,
);

/// The route table with the saved splits and the per-app policies, and the
/// splits' store.
pub(super) fn routing_state(
    config: &Config,
    metrics: &Metrics,
) -> Result<RoutingState, StartError> {
    // The state directory holds the routing state, the rotate state and the splits.
    let splits = Arc::new(SplitStore::open(&config.state_dir)?);
    let table = Arc::new(ArcSwap::from_pointee(initial_table(&splits)));
    let policies = Arc::new(app_policies(config, metrics)?);
    crate::table::publish_policies(&table, &policies);
    Ok((splits, table, policies))
}

/// Where a successor asks for these sockets. Without it, an upgrade is a restart.
pub(super) async fn handover(
    config: &Config,
    inherited: bool,
) -> Result<Option<Handover>, StartError> {
    // Where a successor asks for these sockets. Without it, an upgrade is a restart.
    Ok(match Handover::bind(&config.state_dir, inherited).await {
        Ok(h) => Some(h),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(StartError::Handover(e));
        }
        Err(e) => {
            tracing::warn!(error = %e, "no upgrade socket: `router upgrade` cannot take over from this process");
            None
        }
    })
}

/// The client `reconcile:` asks the broker with, if configured.
pub(super) fn reconcile_client(
    config: &Config,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<Arc<crate::reconcile::broker::Client>>, StartError> {
    Ok(config
        .reconcile
        .as_ref()
        .map(|r| r.client(provider.clone()).map(Arc::new))
        .transpose()?)
}

/// ACME's state (with `acme.directory`): what the issuer and the admin API's
/// `/acme/*` share.
pub(super) fn acme_state(
    config: &Config,
    live: &Live,
    certs: &Arc<std::sync::Mutex<CertIndex>>,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Option<Arc<crate::issuer::shared::Shared>> {
    let challenges = live.load().proxy.acme.clone()?;
    Some(Arc::new(crate::issuer::shared::Shared::new(
        &config.state_dir,
        challenges,
        certs.clone(),
        provider.clone(),
    )))
}

/// The pair's link (`pair.peer`, or `acme.peer`): its shared state, loaded
/// from `state_dir/pair.json`, and its peer, reached as `router check-pair`
/// reaches it. None without a pair.
pub(super) fn pair_link(
    config: &Config,
    metrics: &Metrics,
) -> Result<Option<Arc<crate::pair::link::Link>>, StartError> {
    let acme = (config.acme.peer.as_deref(), config.acme.node);
    let Some((addr, node)) = crate::pair::link::effective(&config.pair, acme) else {
        return Ok(None);
    };
    let off_loopback = config.listen.admin.is_some_and(|a| !a.ip().is_loopback());
    let peer = crate::pair::Peer::new(
        &addr,
        off_loopback,
        config.admin.tls_ca.as_deref(),
        super::admin_token(config)?,
        config.acme.peer_timeout.min(config.acme.request_timeout),
    )?;
    let state = crate::pair::State::open(&config.state_dir, node, config.pair.bounds())
        .map_err(StartError::PairState)?;
    let metrics = crate::pair::link::PairMetrics::new(&metrics.registry, &addr)?;
    Ok(Some(Arc::new(crate::pair::link::Link {
        peer: Arc::new(peer),
        state: Arc::new(state),
        metrics,
        epoch: crate::pair::link::new_epoch(),
        timeout: config.pair.timeout,
        interval: config.pair.interval,
        limit_interval: config.pair.limit_interval,
    })))
}

/// What every generation of the proxy shares (see [`Kept`]), as first made:
/// the table, the metrics, the HTTPS certificates, the clients' limits, the
/// `Alt-Svc` of the HTTP/3 listener, ACME's answers, spans and compression.
pub(super) fn kept(
    config: &Config,
    (table, metrics, certs): (Arc<ArcSwap<RouteTable>>, Arc<Metrics>, LiveCerts),
    clients: Arc<crate::policy::clients::Clients>,
    listeners: &super::listeners::Listeners,
) -> Result<Kept, StartError> {
    let metrics_registry = metrics.registry.clone();
    Ok(Kept {
        table,
        member_tls: None,
        redirect: None,
        traces: traces(config, &metrics)?,
        compression: Arc::new(compress::Compression::new(
            config.compression.clone(),
            &metrics.registry,
        )?),
        metrics,
        certs,
        clients,
        alt_svc: listeners
            .http3
            .as_ref()
            .and_then(|b| b.socket.local_addr().ok())
            .and_then(|a| config.http3.alt_svc_value(a.port())),
        acme: config.acme.directory.as_ref().map(|_| Arc::default()),
        access_sink: match &config.access_log.syslog {
            Some(s) => Some(
                crate::syslog::Sink::start(
                    s,
                    &config.access_log.template,
                    &config.access_log.capture,
                    &metrics_registry,
                )
                .map_err(StartError::Syslog)?,
            ),
            None => None,
        },
        client_auth: listeners
            .https
            .as_ref()
            .map(|(_, a)| (a.client_auth, a.policies.clone()))
            .unwrap_or_default(),
    })
}

/// Spans out over OTLP (`traces.endpoint`, see [`spans`]): the
/// request path's handle, its exporter task started. None when off.
pub(super) fn traces(
    config: &Config,
    metrics: &Metrics,
) -> Result<Option<Arc<spans::Spans>>, StartError> {
    if config.traces.endpoint.is_none() {
        return Ok(None);
    }
    let trace_metrics = spans::TraceMetrics::new(&metrics.registry)?;
    let (spans, queue) = spans::Spans::new(&config.traces, trace_metrics.clone());
    let identity = spans::export::Identity {
        service_name: config.traces.service_name.clone(),
        node: config
            .pair
            .node
            .or(config.acme.node)
            .map(|n| n.as_str().to_owned()),
        host_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into()),
    };
    tokio::spawn(spans::export::run(
        queue,
        config.traces.clone(),
        identity,
        trace_metrics,
    ));
    Ok(Some(spans))
}

/// What the admin API changes and shows: the splits, the app settings, the
/// live certificates, ACME's shared state, the pair's link.
pub(super) type AdminState = (
    Arc<SplitStore>,
    Arc<crate::policy::Policies>,
    LiveCerts,
    Option<Arc<crate::issuer::shared::Shared>>,
    Option<Arc<crate::pair::link::Link>>,
);

/// The admin API's state.
pub(super) fn admin_api(
    config: &Config,
    (table, registry, metrics): (Arc<ArcSwap<RouteTable>>, Arc<MemberRegistry>, Arc<Metrics>),
    (splits, policies, certs, acme, pair): AdminState,
    token: Option<String>,
    recent: Arc<crate::table::recent::Recent>,
    reconcile: Option<tokio::sync::mpsc::Sender<crate::reconcile::Job>>,
) -> Admin {
    Admin {
        table,
        registry: registry.clone(),
        metrics,
        ready: Arc::new(AtomicBool::new(false)),
        splits,
        policies,
        token: arc_swap::ArcSwapOption::from(token.map(Arc::new)),
        audit: Default::default(),
        reconcile,
        recent,
        source: match config.spi.source {
            SourceKind::Spool => "spool",
            SourceKind::Stomp => "stomp",
            SourceKind::Amqp => "amqp",
            SourceKind::None => "none",
        },
        // Where parked messages are: the spool's `failed/`, else the state's.
        body_deadline: config.limits.header_read_timeout,
        names: ArcSwap::from_pointee(crate::admin::Names::new(&config.admin.hosts)),
        certs,
        acme,
        pair,
        ocsp_dir: config
            .tls
            .ocsp
            .stapling
            .then(|| config.state_dir.join("ocsp")),
        dead_letters: match (&config.spi.source, &config.spi.spool) {
            (SourceKind::Spool, Some(s)) => s.path.join(spi_consumer::source::spool::FAILED),
            _ => config.state_dir.join("dead-letters"),
        },
    }
}

/// The OCSP stapler (`tls.ocsp.stapling`), its saved staples read back; none
/// when stapling is off.
pub(super) fn stapler(
    config: &Config,
    (live_certs, staples): (
        &Arc<arc_swap::ArcSwap<crate::tls::store::Certs>>,
        &Arc<crate::tls::ocsp::Staples>,
    ),
    provider: &rustls::crypto::CryptoProvider,
    metrics: &Metrics,
) -> Option<crate::tls::ocsp::stapler::Stapler> {
    if !config.tls.ocsp.stapling {
        return None;
    }
    let stapler = crate::tls::ocsp::stapler::Stapler::new(
        live_certs.clone(),
        staples.clone(),
        &config.state_dir,
        config.tls.ocsp.clone(),
        provider,
        metrics.tls.clone(),
    );
    let restored = stapler.restore();
    tracing::info!(restored, "OCSP stapling on");
    Some(stapler)
}

/// Router `b` of a pair asks `a` for its OCSP staples (`GET /ocsp/{name}`);
/// none on `a` or without a pair.
pub(super) fn ocsp_peer(
    pair: Option<&Arc<crate::pair::link::Link>>,
) -> Option<crate::tls::ocsp::stapler::AskPeer> {
    let link = pair.filter(|l| l.state.node() == crate::config::Node::B)?;
    let peer = link.peer.clone();
    Some(Arc::new(move |name: String| {
        let peer = peer.clone();
        Box::pin(async move {
            let path = format!("/ocsp/{name}");
            match peer.call(http::Method::GET, &path, Vec::new()).await {
                Ok((status, body)) if status == http::StatusCode::OK => Some(body.to_vec()),
                _ => None,
            }
        })
    }))
}

/// The first serving generation (see [`super::serve::serving`]) and the live
/// certificates it checks requests against (with an HTTPS listener).
pub(super) fn first_generation(
    config: &Config,
    (table, metrics, policies): (
        &Arc<ArcSwap<RouteTable>>,
        &Arc<Metrics>,
        &Arc<crate::policy::Policies>,
    ),
    listeners: &super::listeners::Listeners,
    (live_certs, provider): (
        &Arc<ArcSwap<crate::tls::store::Certs>>,
        &Arc<rustls::crypto::CryptoProvider>,
    ),
) -> Result<(LiveCerts, crate::request::connection::listener::Live), StartError> {
    let https_certs = listeners.https.is_some().then(|| live_certs.clone());
    let kept = kept(
        config,
        (table.clone(), metrics.clone(), https_certs.clone()),
        policies.clients.clone(),
        listeners,
    )?;
    let https = listeners.https.as_ref().map(|(l, _)| l);
    let live = super::serve::serving(config, kept, (live_certs, provider), https)?;
    Ok((https_certs, live))
}
