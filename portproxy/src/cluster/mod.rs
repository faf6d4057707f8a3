//! Simplenetes cluster mode.
//!
//! - `files`: the three Simplenetes files, parsed strictly.
//! - `table`: cluster port → this host's host ports, with `maxConn` counts that
//!   survive reloads.
//! - `wire`: the line protocol between proxies.
//! - `route`: where a cluster-port connection goes: this host first, then the others
//!   in `hosts.conf` order, spilling over on BUSY, refusal, "not here" or timeout.
//! - `ports`: the cluster-port listeners (one per port) and the client side of a
//!   connection, with the PROXY-header policy.
//! - `peer`: the proxy port, where peer proxies ask for one of our cluster ports.
//! - `reload`: watching the files and swapping tables and listener sets.
//!
//! Everything a connection reads about the cluster is in one [`Live`] value behind an
//! `ArcSwap`: one atomic load per connection, no lock shared with reloads.

pub mod files;
pub mod peer;
pub mod ports;
pub mod reload;
pub mod route;
mod settings;
pub mod table;
pub mod wire;

pub use settings::ClusterConfig;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use config_file::ConfigError;
use ipnet::IpNet;

use crate::server::Shared;
use files::{ProxyConf, parse_hosts_conf, parse_port_mappings, parse_proxy_conf};
use table::{ClusterTable, Counters};

/// The cluster as connections see it; replaced whole on reload.
#[derive(Debug)]
pub struct Live {
    pub proxy: ProxyConf,
    /// Where our listeners are bound (`HOST`, or the first host's address).
    pub bind_ip: IpAddr,
    /// Where host ports are reached (`PODHOST`, else `HOST`, else loopback when
    /// `HOST` is a wildcard).
    pub pod_host: IpAddr,
    /// Peer proxies in the order to try; this host (if listed) first.
    pub hosts: Vec<SocketAddr>,
    /// Which entry of `hosts` is this host.
    pub self_index: Option<usize>,
    /// Sources whose PROXY headers are honoured and who may use the proxy port.
    pub peer_ips: HashSet<IpAddr>,
    pub trusted: Vec<IpNet>,
    pub table: ClusterTable,
}

impl Live {
    /// May `ip` send us a PROXY header?
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = unmap(ip);
        self.peer_ips.contains(&ip) || self.trusted.iter().any(|n| n.contains(&ip))
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// The running cluster mode.
pub struct Cluster {
    pub shared: Arc<Shared>,
    pub cfg: ClusterConfig,
    pub live: ArcSwap<Live>,
    counters: Counters,
    ports: ports::Listeners,
    peer_task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// The three files read and checked together.
pub struct Loaded {
    pub live: Live,
    pub warnings: Vec<String>,
}

/// Reads and checks `proxy.conf` and the two files it names.
pub fn load(
    cfg: &ClusterConfig,
    counters: &Counters,
) -> Result<Loaded, (&'static str, ConfigError)> {
    load_pinned(cfg, counters, None)
}

/// `load`, keeping `HOST` and `PORT` at `pinned` (they cannot change while running).
fn load_pinned(
    cfg: &ClusterConfig,
    counters: &Counters,
    pinned: Option<(Option<IpAddr>, u16)>,
) -> Result<Loaded, (&'static str, ConfigError)> {
    let proxy_file = cfg.proxy_conf.display().to_string();
    let dir = cfg.proxy_conf.parent().unwrap_or(Path::new("."));
    let text = config_file::read_text(&cfg.proxy_conf).map_err(|e| ("proxy_conf", e))?;
    let mut proxy = parse_proxy_conf(&text, &proxy_file, dir).map_err(|e| ("proxy_conf", e))?;
    let mut pinned_warning = None;
    if let Some((host, port)) = pinned
        && (proxy.host != host || proxy.port != port)
    {
        pinned_warning = Some(format!(
            "{proxy_file}: HOST/PORT changed; they take effect only after a restart (still {}:{port})",
            host.map(|h| h.to_string()).unwrap_or_else(|| "-".into())
        ));
        proxy.host = host;
        proxy.port = port;
    }
    let (hosts, mut warnings) = read_hosts(&proxy)?;
    warnings.extend(pinned_warning);
    let mappings = read_mappings(&proxy)?;
    warnings.extend(mappings.warnings);
    let table = ClusterTable::build(&mappings.value, counters);
    Ok(Loaded {
        live: assemble(cfg, proxy, hosts, table),
        warnings,
    })
}

/// A load error and the file kind it is about (`proxy_conf`, `hosts_conf`, …).
pub type LoadError = (&'static str, ConfigError);

fn read_hosts(proxy: &ProxyConf) -> Result<(Vec<SocketAddr>, Vec<String>), LoadError> {
    let file = proxy.hosts_conf.display().to_string();
    let text = config_file::read_text(&proxy.hosts_conf).map_err(|e| ("hosts_conf", e))?;
    let p = parse_hosts_conf(&text, &file).map_err(|e| ("hosts_conf", e))?;
    Ok((p.value, p.warnings))
}

fn read_mappings(
    proxy: &ProxyConf,
) -> Result<files::Parsed<Vec<files::Item>>, (&'static str, ConfigError)> {
    let file = proxy.ports_conf.display().to_string();
    let text = config_file::read_text(&proxy.ports_conf).map_err(|e| ("portmappings_conf", e))?;
    parse_port_mappings(&text, &file, proxy.port).map_err(|e| ("portmappings_conf", e))
}

/// Builds the live view: who we are among the hosts, and whom we trust.
///
/// This host is the `hosts.conf` entry equal to `HOST:PORT`; when `HOST` is unset or
/// a wildcard, it is the first entry (Simplenetes writes each host's file with the
/// host itself first). It is tried first; the others keep the file's order.
fn assemble(
    cfg: &ClusterConfig,
    proxy: ProxyConf,
    mut hosts: Vec<SocketAddr>,
    table: ClusterTable,
) -> Live {
    let explicit = proxy.host.filter(|h| !h.is_unspecified());
    let self_index = match explicit {
        Some(h) => hosts
            .iter()
            .position(|a| a.ip() == h && a.port() == proxy.port),
        None => (!hosts.is_empty()).then_some(0),
    };
    if let Some(i) = self_index {
        let me = hosts.remove(i);
        hosts.insert(0, me);
    }
    let self_index = self_index.map(|_| 0);
    let bind_ip = proxy
        .host
        .or_else(|| hosts.first().map(SocketAddr::ip))
        .unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let pod_host = proxy.pod_host.unwrap_or(if bind_ip.is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        bind_ip
    });
    let peer_ips = hosts.iter().map(|a| unmap(a.ip())).collect();
    Live {
        proxy,
        bind_ip,
        pod_host,
        hosts,
        self_index,
        peer_ips,
        trusted: cfg.trusted_sources.clone(),
        table,
    }
}

impl Cluster {
    /// Loads the files (any error refuses the start), binds the proxy port and every
    /// cluster port, and starts the reload loop.
    pub async fn start(shared: Arc<Shared>, cfg: ClusterConfig) -> anyhow::Result<Arc<Cluster>> {
        let counters = Counters::default();
        let loaded = load(&cfg, &counters).map_err(|(_, e)| anyhow::anyhow!("{e}"))?;
        for w in &loaded.warnings {
            tracing::warn!("{w}");
        }
        let live = loaded.live;
        let peer_addr = SocketAddr::new(live.bind_ip, live.proxy.port);
        let peer_listener = crate::server::bind(peer_addr)
            .map_err(|e| anyhow::anyhow!("cannot listen on the proxy port {peer_addr}: {e}"))?;
        let cluster_ports = files::ports_of(&live.proxy.cluster_ports);
        shared
            .metrics
            .mappings
            .with_label_values(&["cluster"])
            .set(live.table.items() as i64);
        let cluster = Arc::new(Cluster {
            shared: shared.clone(),
            cfg,
            live: ArcSwap::from_pointee(live),
            counters,
            ports: ports::Listeners::default(),
            peer_task: std::sync::Mutex::new(None),
        });
        let peer = peer::spawn(cluster.clone(), peer_listener);
        *cluster.peer_task.lock().unwrap_or_else(|p| p.into_inner()) = Some(peer);
        let (bound, failed) = cluster.ports.apply(&cluster, &cluster_ports);
        tracing::info!(
            proxy_port = %peer_addr,
            cluster_ports = bound,
            bind_failures = failed,
            hosts = cluster.live.load().hosts.len(),
            mappings = cluster.live.load().table.items(),
            "cluster mode up"
        );
        tokio::spawn(reload::run(cluster.clone()));
        Ok(cluster)
    }

    /// Stops every listener (shutdown); returns once their sockets are closed.
    pub async fn stop_listening(&self) {
        self.ports.stop_all().await;
        let peer = self
            .peer_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(p) = peer {
            p.abort();
            let _ = p.await;
        }
    }
}
