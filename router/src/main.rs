//! `router`: run the router, check a configuration file, or talk to the running
//! router's admin API (reconcile, app settings, the pair check).
//!
//! Exit codes: 0 on a clean stop, 64 (EX_USAGE) for a bad configuration, 1 when the
//! router cannot start (a port in use, an unreadable state directory).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use router::config::{Config, LogFormat};

/// mimalloc instead of glibc's malloc: a request's allocations (a few dozen small
/// ones) and a route table update's node copies (1 KiB nodes, freed in bulk when an
/// old table goes) cost much less in it (`bench/RESULTS.md`, "the allocator"), asked
/// for plain blocks where a word's alignment suffices (the `heap` crate).
#[global_allocator]
static ALLOCATOR: heap::Allocator = heap::Allocator;
use router::log_limit;
use tracing_subscriber::EnvFilter;

/// HA HTTP router for OpenShift-style applications, fed by routing-SPI events.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The configuration file.
    #[arg(long, short, global = true, default_value = "/etc/router/router.yaml")]
    config: PathBuf,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the router (the default).
    Run,
    /// Validate the configuration file and exit: 0 if valid, 64 with
    /// `file:line: field: problem` if not.
    CheckConfig,
    /// Run a reconcile in the running router now (its admin API, `listen.admin`,
    /// with `admin.token_file`'s token) and print the report as JSON.
    Reconcile {
        /// Fix what differs, whatever `reconcile.apply` says.
        #[arg(long)]
        apply: bool,
        /// Only report, whatever `reconcile.apply` says.
        #[arg(long, conflicts_with = "apply")]
        dry_run: bool,
    },
    /// Show an app's settings in the running router (its admin API), or replace
    /// them with a JSON file (`-`: standard input), or remove them.
    Settings {
        /// The app, `name-namespace`.
        app: String,
        #[arg(long, value_name = "FILE")]
        set: Option<PathBuf>,
        #[arg(long, conflicts_with = "set")]
        delete: bool,
    },
    /// Compare the app settings and the affinity key of the running router with
    /// the other router of the pair (its admin address, host:port): exit 0 when
    /// they are the same, 3 (with the differences) when not.
    CheckPair {
        /// The peer's admin address, e.g. 10.0.0.2:9090.
        peer: String,
    },
    /// Take over the listening sockets of the router running on the same
    /// `state_dir` (a new binary, no connection refused), then run; the old one
    /// drains and exits.
    Upgrade,
}

const EX_USAGE: u8 = 64;

fn main() -> ExitCode {
    hold_signals(SigmaskHow::SIG_BLOCK);
    let cli = Cli::parse();
    let config = match Config::load(&cli.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    if let Some(Command::CheckConfig) = cli.command {
        println!("{}: ok", cli.config.display());
        return ExitCode::SUCCESS;
    }
    if let Some(Command::Settings { app, set, delete }) = &cli.command {
        return print_or_fail(
            "router settings",
            settings(&config, app, set.as_deref(), *delete),
        );
    }
    if let Some(Command::CheckPair { peer }) = &cli.command {
        return match check_pair(&config, peer) {
            Ok(differences) if differences.is_empty() => {
                println!("the same app settings and affinity key on both routers");
                ExitCode::SUCCESS
            }
            Ok(differences) => {
                for d in differences {
                    println!("{d}");
                }
                ExitCode::from(3)
            }
            Err(e) => {
                eprintln!("router check-pair: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(Command::Reconcile { apply, dry_run }) = cli.command {
        let apply = if apply {
            "?apply=true"
        } else if dry_run {
            "?apply=false"
        } else {
            ""
        };
        return match admin_call(&config, None, "POST", &format!("/reconcile{apply}"), b"") {
            Ok(body) => {
                println!("{body}");
                reconcile_exit(&body)
            }
            Err(e) => {
                eprintln!("router reconcile: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    init_logging(config.access_log.format);
    let inherited = match cli.command {
        Some(Command::Upgrade) => match router::upgrade::Inherited::take_over(&config.state_dir) {
            Ok(i) => Some(i),
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    match run(config, cli.config, inherited) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `router reconcile`'s exit code, for cron and monitoring: 0 in step with the
/// broker (or every difference fixed), 2 if some apps could not be checked, 3 if
/// differences remain (a dry run, or apps left for the next run).
fn reconcile_exit(report: &str) -> ExitCode {
    let Ok(r) = serde_json::from_str::<serde_json::Value>(report) else {
        return ExitCode::FAILURE;
    };
    let some = |k: &str| {
        r[k].as_object().is_some_and(|o| !o.is_empty())
            || r[k].as_array().is_some_and(|a| !a.is_empty())
    };
    if some("errors") {
        ExitCode::from(2)
    } else if some("differences") && (r["apply"] != true || some("deferred")) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints `result`'s text, or the error prefixed with `what`.
fn print_or_fail(what: &str, result: anyhow::Result<String>) -> ExitCode {
    match result {
        Ok(body) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{what}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `router settings APP [--set FILE | --delete]`.
fn settings(
    config: &Config,
    app: &str,
    set: Option<&std::path::Path>,
    delete: bool,
) -> anyhow::Result<String> {
    let path = format!("/apps/{app}/settings");
    match (set, delete) {
        (_, true) => admin_call(config, None, "DELETE", &path, b""),
        (Some(file), _) => {
            let body = if file == std::path::Path::new("-") {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)?;
                b
            } else {
                std::fs::read(file).with_context(|| format!("reading {}", file.display()))?
            };
            admin_call(config, None, "PUT", &path, &body)
        }
        (None, false) => admin_call(config, None, "GET", &path, b""),
    }
}

/// `router check-pair PEER`: what differs between the two routers' settings.
fn check_pair(config: &Config, peer: &str) -> anyhow::Result<Vec<String>> {
    let ours: serde_json::Value =
        serde_json::from_str(&admin_call(config, None, "GET", "/apps/settings", b"")?)?;
    let theirs: serde_json::Value = serde_json::from_str(&admin_call(
        config,
        Some(peer),
        "GET",
        "/apps/settings",
        b"",
    )?)?;
    let mut out = Vec::new();
    if ours["affinity_key"] != theirs["affinity_key"] {
        out.push(
            "affinity_key: the two routers hash affinity cookies with different keys (set affinity_key_file to the same secret on both)".to_string(),
        );
    }
    if ours["defaults"] != theirs["defaults"] {
        out.push(format!(
            "app_defaults: here {} , on {peer} {}",
            ours["defaults"], theirs["defaults"]
        ));
    }
    let empty = serde_json::Map::new();
    let (a, b) = (
        ours["apps"].as_object().unwrap_or(&empty),
        theirs["apps"].as_object().unwrap_or(&empty),
    );
    let apps: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for app in apps {
        if a.get(app) != b.get(app) {
            let show =
                |v: Option<&serde_json::Value>| v.map_or("(none)".to_string(), |v| v.to_string());
            out.push(format!(
                "{app}: here {}, on {peer} {}",
                show(a.get(app)),
                show(b.get(app))
            ));
        }
    }
    out.extend(pair_versions(config, peer));
    Ok(out)
}

/// With a pair's link (`pair.peer`): each shared entry whose version differs
/// between the two routers, and why (`GET /pair/state`); nothing without one.
fn pair_versions(config: &Config, peer: &str) -> Vec<String> {
    let state = |at| {
        admin_call(config, at, "GET", "/pair/state", b"")
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
    };
    let (Some(ours), Some(theirs)) = (state(None), state(Some(peer))) else {
        return Vec::new();
    };
    let empty = serde_json::Map::new();
    let (a, b) = (
        ours["versions"].as_object().unwrap_or(&empty),
        theirs["versions"].as_object().unwrap_or(&empty),
    );
    let why = if ours["peer_up"] != true || theirs["peer_up"] != true {
        "the link is down (router_pair_peer_up 0): it is taken when the link is back"
    } else {
        "the older side has not taken the newer yet (router_pair_lag_seconds), or could not apply it (its log says why)"
    };
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            let v = |m: &serde_json::Map<String, serde_json::Value>| {
                m.get(k).map_or("none".to_string(), |v| v.to_string())
            };
            format!("{k}: version {} here, {} on {peer}: {why}", v(a), v(b))
        })
        .collect()
}

/// Calls the running router's admin API (`listen.admin`, or the peer `at`,
/// `host:port`) with the admin token; the body of a 200 answer. Over TLS when
/// this router's admin listener is off loopback (the pair's are set alike),
/// verified against `admin.tls_ca` (else the system's CAs) for the peer's
/// host, or for this router's first `admin.hosts` name (else its address).
fn admin_call(
    config: &Config,
    at: Option<&str>,
    method: &str,
    path: &str,
    body: &[u8],
) -> anyhow::Result<String> {
    let listen = config
        .listen
        .admin
        .context("listen.admin is off: no admin API to ask")?;
    let (name, addr) = match at {
        Some(peer) => resolve(peer)?,
        None => {
            let ip = match listen.ip() {
                std::net::IpAddr::V4(a) if a.is_unspecified() => {
                    std::net::Ipv4Addr::LOCALHOST.into()
                }
                std::net::IpAddr::V6(a) if a.is_unspecified() => {
                    std::net::Ipv6Addr::LOCALHOST.into()
                }
                ip => ip,
            };
            let name = config.admin.hosts.first().cloned();
            (
                name.unwrap_or(ip.to_string()),
                std::net::SocketAddr::new(ip, listen.port()),
            )
        }
    };
    let token = router::startup::admin_token(config)?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    let raw = if listen.ip().is_loopback() {
        plain_exchange(addr, &request)?
    } else {
        tls_exchange(config, (&name, addr), &request)?
    };
    // Read by the router's one HTTP/1 decoder: the status from the head, the
    // body by its framing.
    let (head, body) = h1_codec::response::read_whole(&raw, method == "HEAD")
        .with_context(|| format!("{addr}{path}: not an HTTP/1.1 answer"))?;
    let body = String::from_utf8_lossy(&body);
    anyhow::ensure!(
        head.status == http::StatusCode::OK,
        "{addr}{path}: HTTP {}: {}",
        head.status.as_u16(),
        body.trim()
    );
    Ok(body.into_owned())
}

/// `host:port` as the name to verify and the first address it resolves to.
fn resolve(peer: &str) -> anyhow::Result<(String, std::net::SocketAddr)> {
    use std::net::ToSocketAddrs;
    let (host, _) = peer
        .rsplit_once(':')
        .with_context(|| format!("{peer}: an admin address is host:port"))?;
    let addr = peer
        .to_socket_addrs()
        .with_context(|| format!("{peer}: an admin address is host:port"))?
        .next()
        .with_context(|| format!("{peer}: no address"))?;
    Ok((host.trim_matches(['[', ']']).to_string(), addr))
}

fn plain_exchange(addr: std::net::SocketAddr, request: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.write_all(request)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    Ok(raw)
}

/// The exchange over TLS, the server verified as `name`.
fn tls_exchange(
    config: &Config,
    (name, addr): (&str, std::net::SocketAddr),
    request: &[u8],
) -> anyhow::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let connector = router::tls::client::connector(config.admin.tls_ca.as_deref(), true, provider)
        .context("admin.tls_ca")?;
    let server = rustls::pki_types::ServerName::try_from(name.to_string())
        .with_context(|| format!("{name}: not a name to verify a certificate for"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        let mut tls = connector
            .connect(server, tcp)
            .await
            .with_context(|| format!("TLS to {addr} as {name}"))?;
        tls.write_all(request).await?;
        let mut raw = Vec::new();
        // A server closing without close_notify still sent its whole answer
        // (its framing says so).
        match tls.read_to_end(&mut raw).await {
            Ok(_) => Ok(raw),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
            Err(e) => Err(e.into()),
        }
    })
}

/// Logs to stderr, text or JSON; lines that clients can cause are rate-limited (see
/// `router::log_limit`).
fn init_logging(format: LogFormat) {
    use std::sync::Arc;
    use tracing_subscriber::filter::{FilterExt, dynamic_filter_fn};
    use tracing_subscriber::prelude::*;

    let env = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let bucket = Arc::new(log_limit::LineLimit::new(log_limit::RATE, log_limit::BURST));
    // The environment filter first, so that disabled lines spend no token; the
    // bucket is asked on every event (a dynamic filter's answer is never cached).
    let filter = env.and(dynamic_filter_fn(move |m, _| {
        !log_limit::peer_driven(m.target()) || bucket.allow()
    }));
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Json => tracing_subscriber::registry()
            .with(layer.json().flatten_event(true).with_filter(filter))
            .init(),
        LogFormat::Text => tracing_subscriber::registry()
            .with(layer.with_filter(filter))
            .init(),
    }
}

fn run(
    config: Config,
    path: PathBuf,
    inherited: Option<router::upgrade::Inherited>,
) -> anyhow::Result<()> {
    // One thread, or one runtime per worker thread (the router starts those): a
    // current-thread runtime here, for the accept loops, the event source, the
    // admin API and the health checks. `work_stealing: true`: tokio's
    // multi-threaded runtime serves everything.
    let per_core = router::workers::count(config.worker_threads, config.work_stealing).is_some();
    let mut rt = if config.worker_threads == 1 || per_core {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    if config.worker_threads > 1 && !per_core {
        rt.worker_threads(config.worker_threads);
    }
    let rt = rt.enable_all().build().context("starting the runtime")?;
    rt.block_on(async {
        // Before anything else: SIGHUP's default action would end the process.
        let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("installing the SIGHUP handler")?;
        let usr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
            .context("installing the SIGUSR2 handler")?;
        let usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
            .context("installing the SIGUSR1 handler")?;
        // Handled from here on: one that came while starting is delivered now.
        hold_signals(SigmaskHow::SIG_UNBLOCK);
        let upgrade = inherited.is_some();
        let router = router::Router::bind_with(config, inherited).await?;
        tokio::spawn(upgrade_on_usr2(usr2, path.clone()));
        tokio::spawn(drain_on_usr1(usr1, router.drainer()));
        tokio::spawn(reload_on_hangup(hangups, path, router.reloader()));
        // State loaded, listeners bound: what `Type=notify` waits for. After an
        // upgrade this process is the service's main one now.
        if upgrade {
            service_notify::main_pid(std::process::id());
        }
        service_notify::ready();
        router
            .run(async {
                shutdown_signal().await;
                service_notify::stopping();
            })
            .await;
        Ok(())
    })
}

/// SIGHUP, SIGUSR1 and SIGUSR2 held (`SIG_BLOCK`) from the process's first
/// instruction until their handlers are installed (`SIG_UNBLOCK`): their
/// default action ends the process, and keepalived's handover sends SIGUSR1 to
/// whatever the pid file names, a router still starting included (the HA soak
/// saw one killed so, `bench/soak.sh`). Threads started meanwhile keep them
/// held; the thread that installed the handlers takes them.
fn hold_signals(how: SigmaskHow) {
    let mut set = SigSet::empty();
    for s in [Signal::SIGHUP, Signal::SIGUSR1, Signal::SIGUSR2] {
        set.add(s);
    }
    if let Err(e) = nix::sys::signal::sigprocmask(how, Some(&set), None) {
        eprintln!("router: holding SIGHUP, SIGUSR1 and SIGUSR2 while starting: {e}");
    }
}

/// SIGUSR1: the client connections open now drain (`Connection: close`, GOAWAY,
/// the quiet ones closed) while the listeners go on accepting: what
/// `keepalived/router-handover` asks of the router that has just lost its VIP,
/// so that its clients reconnect to the new holder while it still forwards their
/// packets here.
async fn drain_on_usr1(
    mut signals: tokio::signal::unix::Signal,
    drainer: router::request::connection::drain::Drainer,
) {
    while signals.recv().await.is_some() {
        tracing::info!("SIGUSR1: draining the client connections open now; still accepting");
        drainer.drain_open();
    }
}

/// SIGHUP: the file is read and validated whole; on any error the running
/// configuration stays and the error says file, line and field.
async fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    path: PathBuf,
    reloader: router::startup::Reloader,
) {
    while hangups.recv().await.is_some() {
        tracing::info!(file = %path.display(), "SIGHUP: reloading the configuration");
        let config = match Config::load(&path) {
            Ok(c) => c,
            Err(e) => {
                reloader.refused();
                tracing::error!(error = %e, "reload refused; the running configuration stays");
                continue;
            }
        };
        match reloader.apply(config) {
            Ok(not_live) => {
                for setting in &not_live {
                    tracing::warn!(
                        setting,
                        "changed in the file but cannot change while running; the running value stays until a restart or upgrade"
                    );
                }
                tracing::info!(needs_restart = ?not_live, "configuration reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "reload refused; the running configuration stays");
            }
        }
    }
}

/// SIGUSR2 (nginx's binary-upgrade signal; `systemctl kill -s USR2 router`): starts
/// the binary at this process's own path (`argv[0]`: after a package upgrade, the new
/// one) as `router --config FILE upgrade`. As a child it stays in the service's
/// cgroup; it takes the listeners over, tells systemd it is the main process now
/// (`MAINPID=`, the unit has `NotifyAccess=all`), and this process drains and exits.
async fn upgrade_on_usr2(mut usr2: tokio::signal::unix::Signal, path: PathBuf) {
    while usr2.recv().await.is_some() {
        let Some(exe) = std::env::args_os().next() else {
            continue;
        };
        tracing::info!(binary = %PathBuf::from(&exe).display(), "SIGUSR2: starting the new binary to take over");
        match tokio::process::Command::new(&exe)
            .arg("--config")
            .arg(&path)
            .arg("upgrade")
            .spawn()
        {
            // Not awaited: it outlives this process.
            Ok(child) => tracing::info!(pid = child.id(), "upgrade: new process started"),
            Err(e) => tracing::error!(error = %e, "upgrade: cannot start the new binary"),
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            tracing::warn!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_exit_codes() {
        let code = |r: &str| format!("{:?}", reconcile_exit(r));
        let ok = r#"{"differences":{},"errors":{},"apply":false,"deferred":[]}"#;
        let fixed = r#"{"differences":{"a-b":[{}]},"errors":{},"apply":true,"deferred":[]}"#;
        let left = r#"{"differences":{"a-b":[{}]},"errors":{},"apply":false,"deferred":[]}"#;
        let deferred =
            r#"{"differences":{"a-b":[{}]},"errors":{},"apply":true,"deferred":["a-b"]}"#;
        let errors = r#"{"differences":{},"errors":{"a-b":"x"},"apply":true,"deferred":[]}"#;
        assert_eq!(code(ok), format!("{:?}", ExitCode::SUCCESS));
        assert_eq!(code(fixed), format!("{:?}", ExitCode::SUCCESS));
        assert_eq!(code(left), format!("{:?}", ExitCode::from(3)));
        assert_eq!(code(deferred), format!("{:?}", ExitCode::from(3)));
        assert_eq!(code(errors), format!("{:?}", ExitCode::from(2)));
        assert_eq!(code("nope"), format!("{:?}", ExitCode::FAILURE));
    }
}
