//! `spi-consumer`: operator tools for the routing SPI.
//!
//! - `decode FILE...`: decode event files offline and print one line per event;
//! - `replay DIR`: publish every file of DIR (in name order) to a broker destination,
//!   persistent, each confirmed by a receipt;
//! - `echo`: subscribe and print each event as it arrives (like the platform's echo
//!   listener). On a queue this *consumes* the messages: point it at a topic, or at a
//!   queue of its own.
//!
//! Event bodies can hold private keys: nothing here prints them.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use spi_consumer::decode::{Decoded, decode};
use spi_consumer::source::stomp::tls::{TlsClient, TlsFiles};
use spi_consumer::source::stomp::{SessionConfig, StompSession};

#[derive(Parser)]
#[command(version, about = "Routing-SPI operator tools")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Decode event files and print what they say.
    Decode { files: Vec<PathBuf> },
    /// Publish the event files of a directory to a destination.
    Replay {
        dir: PathBuf,
        #[command(flatten)]
        broker: BrokerArgs,
    },
    /// Print events as they arrive.
    Echo {
        #[command(flatten)]
        broker: BrokerArgs,
        /// Exit after this many messages.
        #[arg(long)]
        count: Option<usize>,
        /// Durable subscription name (needs --client-id).
        #[arg(long)]
        durable: Option<String>,
        #[arg(long)]
        client_id: Option<String>,
    },
}

#[derive(Args)]
struct BrokerArgs {
    /// BrokerArgs `host:port`; repeat for a failover list.
    #[arg(long = "host", required = true)]
    hosts: Vec<String>,
    /// `/queue/...` or `/topic/...`.
    #[arg(long)]
    destination: String,
    #[arg(long)]
    login: Option<String>,
    /// File whose first line is the passcode.
    #[arg(long)]
    passcode_file: Option<PathBuf>,
    /// STOMP over TLS: the CA bundle that signs the broker's certificate.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Client certificate chain and key, if the broker asks for one.
    #[arg(long, requires = "key_file")]
    cert_file: Option<PathBuf>,
    #[arg(long, requires = "cert_file")]
    key_file: Option<PathBuf>,
}

impl BrokerArgs {
    fn session(&self, destination: String) -> anyhow::Result<SessionConfig> {
        let passcode = match &self.passcode_file {
            Some(p) => Some(
                std::fs::read_to_string(p)
                    .with_context(|| format!("{}", p.display()))?
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string(),
            ),
            None => None,
        };
        Ok(SessionConfig {
            hosts: self.hosts.clone(),
            login: self.login.clone(),
            passcode,
            vhost: "localhost".into(),
            client_id: None,
            destination,
            subscription_name: None,
            prefetch: 1,
            heartbeat: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
            tls: match &self.ca_file {
                Some(ca) => Some(TlsClient::load(&TlsFiles {
                    ca_file: ca.clone(),
                    cert_file: self.cert_file.clone(),
                    key_file: self.key_file.clone(),
                    server_name: None,
                })?),
                None => None,
            },
        })
    }
}

fn describe(body: &[u8]) -> String {
    match decode(body) {
        Ok(Decoded::Event(e)) => e.to_string(),
        Ok(Decoded::Ignored { action, reason }) => {
            format!("ignored {action} ({})", reason.as_str())
        }
        Err(e) => format!("undecodable: {e}"),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Cmd::Decode { files } => {
            let mut bad = 0;
            for f in files {
                let body = std::fs::read(&f).with_context(|| format!("{}", f.display()))?;
                let line = describe(&body);
                bad += usize::from(line.starts_with("undecodable"));
                println!("{}: {line}", f.display());
            }
            if bad > 0 {
                bail!("{bad} file(s) could not be decoded");
            }
        }
        Cmd::Replay { dir, broker } => {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .with_context(|| format!("{}", dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            files.sort();
            // Publishing needs no subscription of its own; use a private queue.
            let cfg =
                broker.session(format!("/queue/spi-consumer.replay.{}", std::process::id()))?;
            let mut session = StompSession::connect(&cfg, 0).await?;
            for f in &files {
                let body = std::fs::read(f).with_context(|| format!("{}", f.display()))?;
                session
                    .publish(&broker.destination, body, cfg.timeout)
                    .await
                    .with_context(|| format!("publishing {}", f.display()))?;
                println!("{}: published", f.display());
            }
            session.disconnect(cfg.timeout).await?;
        }
        Cmd::Echo {
            broker,
            count,
            durable,
            client_id,
        } => {
            let mut cfg = broker.session(broker.destination.clone())?;
            cfg.subscription_name = durable;
            cfg.client_id = client_id;
            let mut session = StompSession::connect(&cfg, 0).await?;
            let mut seen = 0;
            while count.is_none_or(|c| seen < c) {
                let m = session.next_message().await?;
                println!("{}", describe(&m.body));
                session.ack(&m).await?;
                seen += 1;
            }
            session.disconnect(cfg.timeout).await?;
        }
    }
    Ok(())
}
