//! The `portproxy` binary as a child process, its CLI, and the TCP peers its tests
//! need (echo, half-close, server-speaks-first, PROXY-header recorders).
//!
//! Multi-host cluster tests give each proxy its own loopback address
//! (`127.77.N.x`, N unique per test process and call), so tests run in parallel.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A running portproxy.
pub struct PortProxy {
    pub child: Child,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub metrics: SocketAddr,
    pub logs: mpsc::UnboundedReceiver<serde_json::Value>,
    /// The lines logged up to "portproxy ready".
    pub startup: Vec<serde_json::Value>,
}

impl PortProxy {
    /// Writes `yaml` (which must not set `admin_socket`, `metrics`, `state_dir` or
    /// `log_format`: they are added here) and starts the daemon in `dir`.
    pub async fn start(dir: &Path, yaml: &str) -> PortProxy {
        let (config, socket) = write_config(dir, yaml);
        Self::start_with(dir, &config, &socket, None).await
    }

    /// [`PortProxy::start`] under `ulimit -n NOFILE` (soft and hard), as a unit
    /// with a low `LimitNOFILE=` would run it.
    pub async fn start_with_nofile(dir: &Path, yaml: &str, nofile: u32) -> PortProxy {
        let (config, socket) = write_config(dir, yaml);
        Self::start_with(dir, &config, &socket, Some(nofile)).await
    }

    /// Starts the daemon again on the same files (a restart).
    pub async fn restart(self) -> PortProxy {
        let (dir, config, socket) = (self.dir.clone(), self.config.clone(), self.socket.clone());
        self.stop().await;
        Self::start_with(&dir, &config, &socket, None).await
    }

    async fn start_with(
        dir: &Path,
        config: &Path,
        socket: &Path,
        nofile: Option<u32>,
    ) -> PortProxy {
        let mut command = match nofile {
            None => Command::new(crate::bin("portproxy")),
            Some(n) => {
                let mut c = Command::new("bash");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(crate::bin("portproxy"));
                c
            }
        };
        let mut child = command
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn portproxy");
        let (tx, mut logs) = mpsc::unbounded_channel::<serde_json::Value>();
        let stderr = child.stderr.take().expect("stderr");
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => eprintln!("portproxy (not JSON): {line}"),
                }
            }
        });
        let mut metrics = None;
        let mut startup = Vec::new();
        loop {
            let v = tokio::time::timeout(Duration::from_secs(20), logs.recv())
                .await
                .expect("portproxy logs in time")
                .expect("portproxy exited before it was ready");
            startup.push(v.clone());
            let msg = v["fields"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if msg == "metrics listening" {
                metrics = v["fields"]["addr"].as_str().and_then(|a| a.parse().ok());
            }
            if msg == "portproxy ready" {
                break;
            }
        }
        PortProxy {
            child,
            dir: dir.to_path_buf(),
            config: config.to_path_buf(),
            socket: socket.to_path_buf(),
            metrics: metrics.expect("metrics address logged"),
            logs,
            startup,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    pub fn signal(&self, name: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// SIGTERM and wait for the exit (at most 20 s); returns the exit code.
    pub async fn stop(mut self) -> Option<i32> {
        self.signal("TERM");
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("portproxy exits after SIGTERM")
            .expect("wait");
        status.code()
    }

    /// Runs the CLI against this daemon: `(exit code, stdout, stderr)`.
    pub async fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let mut full = vec!["--socket".to_string(), self.socket.display().to_string()];
        full.extend(args.iter().map(|s| s.to_string()));
        cli(&full).await
    }

    /// The value of one sample (`name{labels}`) of `/metrics`.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let raw = crate::raw::exchange(
            self.metrics,
            b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
        .await;
        String::from_utf8_lossy(&raw).lines().find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == sample).then(|| value.parse().ok())?
        })
    }

    /// Waits for a log line whose message contains `needle`; returns it.
    pub async fn log_containing(&mut self, needle: &str, limit: Duration) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let v = tokio::time::timeout_at(deadline, self.logs.recv())
                .await
                .unwrap_or_else(|_| panic!("no log line containing {needle:?}"))
                .expect("portproxy running");
            if v.to_string().contains(needle) {
                return v;
            }
        }
    }
}

/// `dir/portproxy.yaml` holding `yaml` plus the state, socket, metrics and log
/// lines every test daemon has; the config's and the admin socket's paths.
fn write_config(dir: &Path, yaml: &str) -> (PathBuf, PathBuf) {
    let socket = dir.join("admin.sock");
    let config = dir.join("portproxy.yaml");
    let full = format!(
        "state_dir: {}\nadmin_socket: {}\nmetrics: 127.0.0.1:0\nlog_format: json\n{yaml}",
        dir.join("state").display(),
        socket.display()
    );
    std::fs::write(&config, full).expect("write config");
    (config, socket)
}

/// Runs `portproxy ARGS…`: `(exit code, stdout, stderr)`.
pub async fn cli(args: &[String]) -> (i32, String, String) {
    let out = Command::new(crate::bin("portproxy"))
        .args(args)
        .output()
        .await
        .expect("run portproxy");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub use crate::free_port;

/// A loopback /24 of our own, `127.77.N.0` or `127.78.N.0`: claimed, not guessed.
/// Each call takes the next N whose marker (`.254`, port 47999) this process can
/// bind and keeps the marker bound for the process's life, so test processes
/// running at once never share a subnet.
pub fn loopback_net() -> [u8; 3] {
    use std::sync::Mutex;
    static CLAIMED: Mutex<Vec<std::net::TcpListener>> = Mutex::new(Vec::new());
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    loop {
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(n < 500, "no loopback /24 left to claim");
        let net = [127, 77 + (n / 250) as u8, (n % 250) as u8 + 1];
        if let Ok(marker) = std::net::TcpListener::bind((ip(net, 254), 47999)) {
            CLAIMED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(marker);
            return net;
        }
    }
}

pub fn ip(net: [u8; 3], last: u8) -> IpAddr {
    IpAddr::from([net[0], net[1], net[2], last])
}

/// A TCP server on `ip` (port 0) that runs `serve` on every connection.
pub async fn tcp_server<F, Fut>(ip: IpAddr, serve: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind((ip, 0)).await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve(s));
        }
    });
    addr
}

/// Echoes every byte as it comes, both directions at once; EOF in → EOF out.
pub async fn echo(s: TcpStream) {
    let (mut r, mut w) = s.into_split();
    let _ = tokio::io::copy(&mut r, &mut w).await;
    let _ = w.shutdown().await;
}

/// Says `banner` first, then echoes.
pub fn banner_echo(
    banner: &'static str,
) -> impl Fn(TcpStream) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
+ Send
+ Sync
+ 'static {
    move |mut s: TcpStream| {
        Box::pin(async move {
            if s.write_all(banner.as_bytes()).await.is_ok() {
                echo(s).await;
            }
        })
    }
}

/// Records what each connection sent (until EOF or 64 KiB) and answers `reply`.
pub async fn recorder(
    ip: IpAddr,
    reply: &'static [u8],
) -> (SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let addr = tcp_server(ip, move |mut s| {
        let tx = tx.clone();
        async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // Read what arrives within 300 ms of the last byte (the clients here send
            // one message, then wait for the reply).
            loop {
                match tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await {
                    Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
                }
                if got.len() > 64 * 1024 {
                    break;
                }
            }
            let _ = tx.send(got);
            let _ = s.write_all(reply).await;
            let _ = s.shutdown().await;
        }
    })
    .await;
    (addr, rx)
}

/// Connects to `to` from source address `from` (port 0).
pub async fn connect_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = if from.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    s.bind(SocketAddr::new(from, 0))?;
    s.connect(to).await
}

/// Sends `data`, half-closes, reads to EOF (at most `limit`).
pub async fn send_and_read(s: &mut TcpStream, data: &[u8], limit: Duration) -> Vec<u8> {
    s.write_all(data).await.expect("write");
    s.shutdown().await.expect("shutdown");
    let mut got = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut got))
        .await
        .expect("reply in time");
    got
}
