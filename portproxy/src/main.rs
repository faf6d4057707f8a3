//! `portproxy`: the node TCP proxy daemon and its operator CLI.
//!
//! Exit codes: 0 ok; 1 a refused change or a daemon that cannot start; 2 usage;
//! 64 (EX_USAGE) a bad configuration file; 69 (EX_UNAVAILABLE) the daemon cannot be
//! reached.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use portproxy::config::{Config, LogFormat};
use portproxy::gear::alloc::Allocation;
use portproxy::gear::{self, Gear};
use portproxy::metrics::Metrics;
use portproxy::numbers::PortRange;
use portproxy::server::{self, Shared};
use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc's malloc, as the router: a relayed connection's
/// three task allocations are aligned to 128 bytes, which glibc serves through
/// `posix_memalign`'s slow path (about 2 600 instructions a short connection,
/// `bench/RESULTS.md`, "The port proxy's instructions and system calls per
/// short connection").
#[global_allocator]
static ALLOCATOR: heap::Allocator = heap::Allocator;

/// Node TCP port proxy: OpenShift gear port mappings and Simplenetes cluster ports.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The configuration file.
    #[arg(
        long,
        short,
        global = true,
        default_value = "/etc/portproxy/portproxy.yaml"
    )]
    config: PathBuf,
    /// The daemon's admin socket (default: `admin_socket` of the configuration).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (the default).
    Run,
    /// Validate the configuration (and the Simplenetes files it names) and exit: 0 if
    /// valid, 64 with `file:line: field: problem` if not.
    CheckConfig,
    /// Map public ports to gear addresses: `add PORT IP:PORT [PORT IP:PORT…]`.
    /// Re-adding a mapping is a no-op; a port mapped elsewhere is an error (exit 1).
    Add {
        #[arg(required = true, num_args = 2.., value_names = ["PORT", "IP:PORT"])]
        pairs: Vec<String>,
    },
    /// Unmap public ports (unmapped ones are ignored). Open connections drain.
    Remove {
        #[arg(required = true, value_name = "PORT")]
        ports: Vec<String>,
    },
    /// Unmap every port of a gear's block; prints what was removed.
    RemoveUid {
        #[arg(value_name = "UID")]
        uid: String,
    },
    /// Print mappings as `PORT IP:PORT` lines (all, or the ports named).
    Show {
        #[arg(value_name = "PORT")]
        ports: Vec<String>,
    },
    /// Print a gear's port block and loopback address (OpenShift v2 formulas).
    Allocate {
        #[arg(long)]
        uid: u32,
        /// The address number within the gear's /25 (1–127).
        #[arg(long, default_value_t = 1)]
        host_id: u32,
    },
}

const EX_CONFIG: u8 = 64;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        None | Some(Command::Run) => run(&cli.config),
        Some(Command::CheckConfig) => check_config(&cli.config),
        Some(Command::Allocate { uid, host_id }) => allocate(&cli.config, uid, host_id),
        Some(Command::Add { ref pairs }) => {
            if pairs.len() % 2 != 0 {
                eprintln!(
                    "portproxy add: expected PORT IP:PORT pairs, got {} words",
                    pairs.len()
                );
                return ExitCode::from(2);
            }
            call(&cli, format!("add {}", pairs.join(" ")))
        }
        Some(Command::Remove { ref ports }) => call(&cli, format!("remove {}", ports.join(" "))),
        Some(Command::RemoveUid { ref uid }) => call(&cli, format!("remove-uid {uid}")),
        Some(Command::Show { ref ports }) => call(&cli, format!("show {}", ports.join(" "))),
    }
}

/// One request to the daemon.
fn call(cli: &Cli, request: String) -> ExitCode {
    if request.contains('\n') {
        eprintln!("portproxy: arguments must not contain newlines");
        return ExitCode::from(2);
    }
    let socket = match &cli.socket {
        Some(s) => s.clone(),
        None => match Config::load(&cli.config) {
            Ok(c) => c.admin_socket,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(EX_CONFIG);
            }
        },
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portproxy: {e}");
            return ExitCode::from(1);
        }
    };
    let (lines, code, err) = rt.block_on(gear::client::call(&socket, &request));
    for l in lines {
        println!("{l}");
    }
    if let Some(e) = err {
        eprintln!("portproxy: {e}");
    }
    ExitCode::from(code)
}

fn allocate(path: &Path, uid: u32, host_id: u32) -> ExitCode {
    // Without a configuration file the node.conf defaults apply.
    let (alloc, ports) = if path.exists() {
        match Config::load(path) {
            Ok(c) => c
                .gear
                .map(|g| (g.allocation, g.ports))
                .unwrap_or((Allocation::default(), PortRange(35531..=65535))),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(EX_CONFIG);
            }
        }
    } else {
        (Allocation::default(), PortRange(35531..=65535))
    };
    match (alloc.port_block(uid, &ports.0), alloc.address(uid, host_id)) {
        (Ok(block), Ok(ip)) => {
            println!("ports {}-{}", block.start(), block.end());
            println!("address {ip}");
            ExitCode::SUCCESS
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("portproxy allocate: {e}");
            ExitCode::from(1)
        }
    }
}

fn check_config(path: &Path) -> ExitCode {
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    if let Some(c) = &config.cluster {
        match portproxy::cluster::load(c, &Default::default()) {
            Ok(l) => {
                for w in l.warnings {
                    eprintln!("warning: {w}");
                }
            }
            Err((_, e)) => {
                eprintln!("{e}");
                return ExitCode::from(EX_CONFIG);
            }
        }
    }
    println!("{}: ok", path.display());
    ExitCode::SUCCESS
}

fn run(path: &Path) -> ExitCode {
    let config = match Config::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the runtime");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(daemon(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(1)
        }
    }
}

async fn daemon(config: Config) -> anyhow::Result<()> {
    let nofile = server::raise_nofile_limit();
    tracing::info!(nofile, "open-files limit");
    let metrics = Metrics::new().context("metrics registry")?;
    let mut limits = config.limits.clone();
    if let Some(configured) = limits.fit(nofile, 0) {
        tracing::warn!(
            nofile,
            configured,
            effective = limits.max_connections,
            "limits.max_connections do not fit in the open-files limit (two descriptors a relay, an eighth kept for listeners and files); lowered"
        );
    }
    tracing::info!(
        max_connections = limits.max_connections,
        per_source = limits.per_source(),
        "connection limits"
    );
    // A cluster's ingress carries every client's connections: no per-source cap.
    let trusted = config
        .cluster
        .as_ref()
        .map(|c| c.trusted_sources.clone())
        .unwrap_or_default();
    let shared = Shared::with_unlimited(limits, metrics.clone(), trusted);
    if let Some(addr) = config.metrics {
        let l = portproxy::metrics::bind(addr)
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        tracing::info!(addr = %l.local_addr()?, "metrics listening");
        tokio::spawn(portproxy::metrics::listen(l, metrics.clone()));
    }
    let gear = match config.gear.clone() {
        Some(g) => {
            let store = gear::store::Store::open(&config.state_dir)
                .with_context(|| format!("state directory {}", config.state_dir.display()))?;
            Some(Gear::start(shared.clone(), g, store).await?)
        }
        None => None,
    };
    let admin = gear::admin::bind(&config.admin_socket)
        .await
        .with_context(|| format!("admin socket {}", config.admin_socket.display()))?;
    tokio::spawn(gear::admin::listen(
        admin,
        gear.clone(),
        metrics.accept_errors.clone(),
    ));
    let cluster = match config.cluster.clone() {
        Some(c) => Some(portproxy::cluster::Cluster::start(shared.clone(), c).await?),
        None => None,
    };
    tracing::info!(admin_socket = %config.admin_socket.display(), "portproxy ready");
    service_notify::ready();

    wait_for_stop().await;
    service_notify::stopping();
    if let Some(g) = &gear {
        g.stop_listening().await;
    }
    if let Some(c) = &cluster {
        c.stop_listening().await;
    }
    tracing::info!(grace = ?config.shutdown_grace, open = shared.admission.open(), "stopped listening; draining open connections");
    let _ = std::fs::remove_file(&config.admin_socket);
    drain(&shared, config.shutdown_grace).await;
    Ok(())
}

async fn drain(shared: &Arc<Shared>, grace: std::time::Duration) {
    shared.tracker.close();
    if tokio::time::timeout(grace, shared.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = shared.admission.open(),
            "shutdown grace over; cutting open connections"
        );
        shared.kill.cancel();
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(2), shared.tracker.wait()).await;
    }
    tracing::info!("stopped");
}

async fn wait_for_stop() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers, run until killed.
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
