//! The `router` binary as a child process, for what only a real process can show:
//! signals, `kill -9`, restarts, log output.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A configuration for the binary: `http` and an admin listener on loopback, the
/// spool `dir/spool` (scanned every 100 ms), state in `dir/state`, JSON logs (what
/// [`RouterProcess`] reads), access lines only if `access_lines`; `extra` appended.
pub fn spool_config(dir: &Path, http: &str, access_lines: bool, extra: &str) -> String {
    format!(
        "cloud_domain: example.com\nstate_dir: {d}/state\n\
         listen:\n  http: {http}\n  admin: 127.0.0.1:0\n\
         spi: {{ source: spool, spool: {{ path: {d}/spool, interval: 100ms }} }}\n\
         access_log: {{ format: json, enabled: {access_lines} }}\n{extra}",
        d = dir.display()
    )
}

/// `dir/spool/01.yaml` holding `first_event`, and `dir/router.yaml` holding
/// `config`; the configuration's path.
pub fn spool_router(dir: &Path, first_event: &str, config: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("spool")).expect("spool");
    std::fs::write(dir.join("spool/01.yaml"), first_event).expect("event");
    let cfg = dir.join("router.yaml");
    std::fs::write(&cfg, config).expect("config");
    cfg
}

pub struct RouterProcess {
    pub child: Child,
    pub http: SocketAddr,
    /// Set when the config has `listen.https` (logged before the admin listener).
    pub https: Option<SocketAddr>,
    /// Set when the config has `listen.http3` (UDP).
    pub http3: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    /// Every log line (the config must set `access_log.format: json`).
    pub logs: mpsc::UnboundedReceiver<serde_json::Value>,
    /// The lines logged up to the last "listening" line (read while starting).
    pub startup: Vec<serde_json::Value>,
}

impl RouterProcess {
    /// Starts `router --config CONFIG` and waits for its "listening" lines.
    pub async fn start(config: &Path) -> RouterProcess {
        let mut command = Command::new(crate::bin("router"));
        command.arg("--config").arg(config);
        RouterProcess::spawn(command).await
    }

    /// `router --config CONFIG ARGS...` (e.g. `upgrade`), waiting for its "listening"
    /// lines.
    pub async fn start_args(config: &Path, args: &[&str]) -> RouterProcess {
        let mut command = Command::new(crate::bin("router"));
        command.arg("--config").arg(config).args(args);
        RouterProcess::spawn(command).await
    }

    /// The same under `ulimit -n NOFILE` (soft and hard), as an operator's unit with
    /// a low `LimitNOFILE=` would run it.
    pub async fn start_with_nofile(config: &Path, nofile: u32) -> RouterProcess {
        let mut command = Command::new("bash");
        command
            .arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" --config \"$1\""))
            .arg(crate::bin("router"))
            .arg(config);
        RouterProcess::spawn(command).await
    }

    async fn spawn(mut command: Command) -> RouterProcess {
        let mut child = command
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn router");
        let (tx, mut logs) = mpsc::unbounded_channel::<serde_json::Value>();
        let stderr = child.stderr.take().expect("stderr");
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => panic!("not a JSON log line: {line}"),
                }
            }
        });
        let (mut http, mut https, mut http3, mut admin) = (None, None, None, None);
        let mut startup = Vec::new();
        while http.is_none() || admin.is_none() {
            let v = tokio::time::timeout(Duration::from_secs(20), logs.recv())
                .await
                .expect("router logs in time")
                .expect("router running");
            startup.push(v.clone());
            if v["message"] == "listening" {
                let addr: SocketAddr = v["addr"].as_str().expect("addr").parse().expect("addr");
                match v["listener"].as_str() {
                    Some("http") => http = Some(addr),
                    Some("https") => https = Some(addr),
                    Some("http3") => http3 = Some(addr),
                    Some("admin") => admin = Some(addr),
                    _ => {}
                }
            }
        }
        RouterProcess {
            child,
            http: http.expect("http"),
            https,
            http3,
            admin,
            logs,
            startup,
        }
    }

    pub fn pid(&self) -> String {
        self.child.id().expect("running").to_string()
    }

    /// Waits (up to 10 s) for a log line whose `message` contains `what`; returns it.
    pub async fn log_line(&mut self, what: &str) -> serde_json::Value {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let v = self.logs.recv().await.expect("router running");
                if v["message"].as_str().is_some_and(|m| m.contains(what)) {
                    return v;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no log line with {what:?}"))
    }

    /// Waits (up to 10 s) for the access line of the request for `path`
    /// (`access_log: {format: json, enabled: true}`).
    pub async fn access_line(&mut self, path: &str) -> serde_json::Value {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let v = self.logs.recv().await.expect("router running");
                if v["target"] == "access" && v["path"] == path {
                    return v;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no access line for {path}"))
    }

    /// A router started on `dir` (spool source, JSON access lines, `extra`
    /// appended to its configuration) with one app, `myapp-demo`, on member
    /// `b`; returned once a request through it reaches the member.
    pub async fn one_app(tag: &str, b: &crate::Backend, extra: &str) -> RouterProcess {
        let dir = crate::tempdir(tag);
        let config = spool_config(&dir, "127.0.0.1:0", true, extra);
        let first = crate::events::add_lb("myapp", "demo", b.addr);
        let r = RouterProcess::start(&spool_router(&dir, &first, &config)).await;
        let http = r.http;
        crate::eventually("route", Duration::from_secs(10), async || {
            let req = b"GET /warm HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\nConnection: close\r\n\r\n";
            let resp = crate::raw::exchange(http, req, Duration::from_secs(10)).await;
            crate::raw::status(&resp) == Some(200)
        })
        .await;
        r
    }

    /// Sends a signal (`TERM`, `KILL`, ...) with kill(1).
    pub fn signal(&self, name: &str) {
        let ok = std::process::Command::new("kill")
            .args([&format!("-{name}"), &self.pid()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// Waits for the process to exit (a signal sent: `after`), and asserts it
    /// exited cleanly.
    pub async fn exits_cleanly(&mut self, after: &str) {
        let exit = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the router did not exit within 15 s after {after}"))
            .expect("wait");
        assert!(exit.success(), "after {after}: {exit:?}");
    }

    /// Every log line not read yet, up to the end of the process's stderr
    /// (call after its exit: the reader ends at the pipe's end, so no line
    /// written before the exit is missed).
    pub async fn rest_of_logs(&mut self) -> Vec<serde_json::Value> {
        let mut lines = Vec::new();
        loop {
            let next = tokio::time::timeout(Duration::from_secs(10), self.logs.recv()).await;
            match next.expect("the router's stderr reaches its end after its exit") {
                Some(v) => lines.push(v),
                None => return lines,
            }
        }
    }

    /// The value of one sample line (`name{labels}`) of the admin `/metrics`.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let raw = crate::raw::exchange(
            self.admin?,
            b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
        .await;
        String::from_utf8_lossy(&raw).lines().find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == sample).then(|| value.parse().ok())?
        })
    }

    /// [`crate::metric_sum`] over the admin `/metrics`.
    pub async fn metric_sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let Some(admin) = self.admin else { return 0.0 };
        let raw = crate::raw::exchange(
            admin,
            b"GET /metrics HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
        .await;
        crate::metric_sum(&String::from_utf8_lossy(&raw), name, labels)
    }

    /// A raw HTTP/1.1 GET with `Connection: close`; the status code, if any.
    pub async fn status(&self, host: &str, path: &str) -> Option<u16> {
        crate::raw::status(
            &crate::raw::exchange(
                self.http,
                format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
                Duration::from_secs(10),
            )
            .await,
        )
    }
}
