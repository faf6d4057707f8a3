//! A real Prometheus server (Debian's `prometheus`) scraping the router, for the
//! tests of what operators query. It listens on a port it reports itself (its
//! "Listening on" log line) and is killed by its PID when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    _dir: PathBuf,
}

impl Prometheus {
    /// Scrapes `/metrics` of each of `targets` every second; returns once it
    /// says it is ready.
    pub async fn start(targets: &[SocketAddr]) -> Prometheus {
        let dir = crate::tempdir("prometheus");
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: router\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("write config");
        let mut child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("prometheus (Debian package `prometheus`, installed by tests/run.sh)");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent
                    && line.contains("msg=\"Listening on\"")
                    && let Some(addr) = line.rsplit("address=").next()
                    && let Ok(addr) = addr.trim().parse::<SocketAddr>()
                {
                    sent = tx.send(addr).is_ok();
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                panic!("prometheus did not report its address within 30 s");
            }
        };
        let prom = Prometheus {
            child,
            addr,
            _dir: dir,
        };
        let ready = format!("http://{addr}/-/ready");
        crate::eventually("prometheus ready", Duration::from_secs(60), async || {
            crate::http_get(&ready).await.0 == 200
        })
        .await;
        prom
    }

    /// An instant query's result vector as (labels, value).
    pub async fn query(&self, q: &str) -> Vec<(serde_json::Value, f64)> {
        let url = format!(
            "http://{}/api/v1/query?query={}",
            self.addr,
            percent_encode(q)
        );
        let (status, body) = crate::http_get(&url).await;
        assert_eq!(status, 200, "query {q}: {body}");
        let doc: serde_json::Value = serde_json::from_str(&body).expect("json");
        doc["data"]["result"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .filter_map(|r| {
                        let v = r["value"][1].as_str()?.parse().ok()?;
                        Some((r["metric"].clone(), v))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
