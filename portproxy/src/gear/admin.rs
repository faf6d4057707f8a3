//! The daemon's side of the operator socket.
//!
//! A Unix socket (mode 0600, so only its owner may change mappings), one request per
//! connection, text lines:
//!
//! ```text
//! → add 35531 127.0.250.1:8080 35532 127.0.250.1:8081
//! ← 35531 127.0.250.1:8080        (output lines, if any)
//! ← ok                            (or: error CODE MESSAGE)
//! ```
//!
//! Verbs: `add PORT IP:PORT…`, `remove PORT…`, `remove-uid UID`, `show [PORT…]`,
//! `ping`. CODE is the CLI's exit code: 1 for a refused change, 2 for a malformed
//! request.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::Gear;
use crate::numbers::strict_u32;

/// The longest request line (a batch of a few thousand mappings fits).
const MAX_REQUEST: u64 = 256 * 1024;

/// What the admin socket answers.
pub struct AdminAnswer {
    pub lines: Vec<String>,
    /// `None` = ok; else the exit code and the message.
    pub error: Option<(u8, String)>,
}

impl AdminAnswer {
    fn ok(lines: Vec<String>) -> AdminAnswer {
        AdminAnswer { lines, error: None }
    }
    fn err(code: u8, m: impl Into<String>) -> AdminAnswer {
        AdminAnswer {
            lines: Vec::new(),
            error: Some((code, m.into())),
        }
    }
}

/// Binds the socket at `path`: a stale socket file is replaced, a live one (another
/// daemon answering) is an error.
pub async fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if path.exists() {
        if UnixStream::connect(path).await.is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "{} is answered by another running portproxy",
                    path.display()
                ),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Requests served at once; a client beyond that is closed at once (the CLI
/// makes one request and waits; only a runaway script makes more).
const MAX_CLIENTS: usize = 32;

/// Serves requests until the task is dropped, through the one accept loop
/// (`accept::run`: its back-off on a failed accept, [`MAX_CLIENTS`] slots).
pub async fn listen(
    listener: UnixListener,
    gear: Option<Arc<Gear>>,
    errors: prometheus::IntCounter,
) {
    let mut capped = accept::Capped::new(listener, MAX_CLIENTS, move |stream, _, slot| {
        let gear = gear.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(30), one(stream, gear)).await;
            drop(slot);
        });
    });
    accept::run(&mut capped, "admin", &errors, std::future::pending()).await;
}

async fn one(stream: UnixStream, gear: Option<Arc<Gear>>) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    BufReader::new(r.take(MAX_REQUEST))
        .read_line(&mut line)
        .await?;
    let answer = if !line.ends_with('\n') {
        AdminAnswer::err(2, "request too long or not terminated by a newline")
    } else {
        match &gear {
            Some(g) => handle(g, &line).await,
            None if line.trim() == "ping" => AdminAnswer::ok(Vec::new()),
            None => AdminAnswer::err(1, "gear mode is off in this daemon's configuration"),
        }
    };
    let mut out = String::new();
    for l in &answer.lines {
        out.push_str(l);
        out.push('\n');
    }
    match &answer.error {
        None => out.push_str("ok\n"),
        Some((code, m)) => out.push_str(&format!("error {code} {}\n", m.replace('\n', " "))),
    }
    w.write_all(out.as_bytes()).await?;
    w.shutdown().await
}

/// Carries out one request line.
pub async fn handle(gear: &Gear, line: &str) -> AdminAnswer {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&verb, args)) = words.split_first() else {
        return AdminAnswer::err(2, "empty request");
    };
    let rules = gear.rules();
    match verb {
        "ping" => AdminAnswer::ok(Vec::new()),
        "add" => add(gear, rules, args).await,
        "remove" => {
            if args.is_empty() {
                return AdminAnswer::err(2, "usage: remove PORT…");
            }
            let mut ports = Vec::with_capacity(args.len());
            for a in args {
                match rules.port(a) {
                    Ok(p) => ports.push(p),
                    Err(e) => return AdminAnswer::err(1, e.to_string()),
                }
            }
            match gear.remove(&ports).await {
                Ok(_) => AdminAnswer::ok(Vec::new()),
                Err(e) => AdminAnswer::err(1, e.to_string()),
            }
        }
        "remove-uid" => remove_uid(gear, args).await,
        "show" => {
            let mut ports = Vec::with_capacity(args.len());
            for a in args {
                match crate::numbers::strict_port(a) {
                    Ok(p) => ports.push(p),
                    Err(e) => return AdminAnswer::err(1, e),
                }
            }
            let lines = gear
                .show(&ports)
                .await
                .iter()
                .map(|(p, t)| format!("{p} {t}"))
                .collect();
            AdminAnswer::ok(lines)
        }
        other => AdminAnswer::err(2, format!("unknown verb `{other}`")),
    }
}

/// `add PORT IP:PORT [PORT IP:PORT…]`: every pair checked before any is added.
async fn add(gear: &Gear, rules: &crate::gear::Rules, args: &[&str]) -> AdminAnswer {
    if args.is_empty() || !args.len().is_multiple_of(2) {
        return AdminAnswer::err(2, "usage: add PORT IP:PORT [PORT IP:PORT…]");
    }
    let mut pairs = Vec::with_capacity(args.len() / 2);
    for pair in args.chunks(2) {
        let port = match rules.port(pair[0]) {
            Ok(p) => p,
            Err(e) => return AdminAnswer::err(1, e.to_string()),
        };
        let target = match rules.target(pair[1]) {
            Ok(t) => t,
            Err(e) => return AdminAnswer::err(1, e.to_string()),
        };
        pairs.push((port, target));
    }
    match gear.add(&pairs).await {
        Ok(_) => AdminAnswer::ok(Vec::new()),
        Err(e) => AdminAnswer::err(1, e.to_string()),
    }
}

/// `remove-uid UID`: every mapping of the uid's port block, each removed one listed.
async fn remove_uid(gear: &Gear, args: &[&str]) -> AdminAnswer {
    let [uid] = args else {
        return AdminAnswer::err(2, "usage: remove-uid UID");
    };
    let uid = match strict_u32(uid) {
        Ok(u) => u,
        Err(e) => return AdminAnswer::err(1, format!("uid: {e}")),
    };
    let block = match gear
        .config()
        .allocation
        .port_block(uid, &gear.config().ports.0)
    {
        Ok(b) => b,
        Err(e) => return AdminAnswer::err(1, e.to_string()),
    };
    let ports: Vec<u16> = block.collect();
    match gear.remove(&ports).await {
        Ok(removed) => AdminAnswer::ok(removed.iter().map(|(p, t)| format!("{p} {t}")).collect()),
        Err(e) => AdminAnswer::err(1, e.to_string()),
    }
}
