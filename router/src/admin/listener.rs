//! The admin and metrics listeners: their roles, TLS off loopback, and their steps of
//! the one accept loop (`accept::run`).

use super::*;

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
pub(super) struct AdminListener {
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
    type Passed = Option<per_source::SourceSlot>;

    fn source(&mut self) -> &mut TcpListener {
        &mut self.listener
    }

    fn gate(&mut self, client: TcpStream, peer: SocketAddr) -> Option<(TcpStream, Self::Passed)> {
        let Some((shares, keys)) = &self.shares else {
            return Some((client, None));
        };
        match shares.slot(keys.key(peer.ip())) {
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

    fn full(&mut self, client: TcpStream, _: &Self::Passed) -> Option<TcpStream> {
        Some(client)
    }

    fn serve(
        &mut self,
        stream: TcpStream,
        client: SocketAddr,
        share: Self::Passed,
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
