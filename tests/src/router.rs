//! The router library started in-process, on port 0, with private directories.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use router::config::Config;
use tokio::sync::oneshot;

pub struct TestRouter {
    pub http: SocketAddr,
    /// The HTTPS listener, when the configuration has `listen.https`.
    pub https: Option<SocketAddr>,
    /// The HTTP/3 listener (UDP), when the configuration has `listen.http3`.
    pub http3: Option<SocketAddr>,
    /// The `tcp.listen` ports, in the configuration's order.
    pub tcp: Vec<SocketAddr>,
    pub admin: SocketAddr,
    /// `listen.metrics`, when the configuration sets it.
    pub metrics: Option<SocketAddr>,
    pub spool: PathBuf,
    pub state: PathBuf,
    pub root: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestRouter {
    /// A router with the default test configuration plus `extra` YAML (top-level keys).
    pub async fn start(extra: &str) -> TestRouter {
        TestRouter::start_in(crate::tempdir("router"), extra).await
    }

    /// [`TestRouter::start`] with one app, `myapp` in `demo`
    /// (`ha-myapp-demo.example.com`), on a new [`crate::Backend`], routed already.
    pub async fn with_backend(extra: &str) -> (TestRouter, crate::Backend) {
        let backend = crate::Backend::start().await;
        let r = TestRouter::start(extra).await;
        r.drop_event(
            "01.yaml",
            &crate::events::add_lb("myapp", "demo", backend.addr),
        );
        r.wait_route("ha-myapp-demo.example.com").await;
        // The route probe's connection closes asynchronously (its client's pool
        // is dropped): wait until the router saw it go, so that tests counting
        // connections per source start from zero.
        crate::eventually("no open connection", Duration::from_secs(10), async || {
            r.metric("router_open_connections{listener=\"http\"}").await == Some(0.0)
        })
        .await;
        (r, backend)
    }

    /// Starts on an existing root (to restart over the same state directory).
    pub async fn start_in(root: PathBuf, extra: &str) -> TestRouter {
        let spool = root.join("spool");
        let spi = format!(
            "spi:\n  source: spool\n  spool:\n    path: {}\n    interval: 20ms\n",
            spool.display()
        );
        TestRouter::start_with_spi(root, &spi, extra).await
    }

    /// Starts with the given `spi:` section (e.g. a STOMP source).
    pub async fn start_with_spi(root: PathBuf, spi: &str, extra: &str) -> TestRouter {
        TestRouter::start_full(root, spi, extra, "").await
    }

    /// Also listens for HTTPS (`extra` carries the `tls:` section).
    pub async fn start_https(root: PathBuf, extra: &str) -> TestRouter {
        let spool = root.join("spool");
        let spi = format!(
            "spi:\n  source: spool\n  spool:\n    path: {}\n    interval: 20ms\n",
            spool.display()
        );
        TestRouter::start_full(root, &spi, extra, "  https: 127.0.0.1:0\n").await
    }

    /// Also listens for HTTPS and HTTP/3 (`extra` carries the `tls:` section).
    pub async fn start_http3(root: PathBuf, extra: &str) -> TestRouter {
        let spool = root.join("spool");
        let spi = format!(
            "spi:\n  source: spool\n  spool:\n    path: {}\n    interval: 20ms\n",
            spool.display()
        );
        let listen = "  https: 127.0.0.1:0\n  http3: 127.0.0.1:0\n";
        TestRouter::start_full(root, &spi, extra, listen).await
    }

    /// Listens for HTTP on `http` (e.g. `"[::]:0"`) instead of 127.0.0.1.
    pub async fn start_http_on(http: &str, extra: &str) -> TestRouter {
        TestRouter::start_listening(&format!("  http: {http}\n"), extra).await
    }

    /// With `listen` lines added to the `listen:` block (e.g.
    /// `"  metrics: 0.0.0.0:0\n"`).
    pub async fn start_listening(listen: &str, extra: &str) -> TestRouter {
        let root = crate::tempdir("router");
        let spool = root.join("spool");
        let spi = format!(
            "spi:\n  source: spool\n  spool:\n    path: {}\n    interval: 20ms\n",
            spool.display()
        );
        TestRouter::start_full(root, &spi, extra, listen).await
    }

    /// `listen`: lines added to the `listen:` block (an `http:` line among them
    /// replaces the default one).
    async fn start_full(root: PathBuf, spi: &str, extra: &str, listen: &str) -> TestRouter {
        let spool = root.join("spool");
        let state = root.join("state");
        let http_line = if listen.contains("  http:") {
            ""
        } else {
            "  http: 127.0.0.1:0\n"
        };
        let yaml = format!(
            "cloud_domain: example.com\n\
             state_dir: {state}\n\
             listen:\n{http_line}  admin: 127.0.0.1:0\n{listen}\
             {spi}{extra}",
            state = state.display(),
        );
        let config = Config::parse(&yaml, "test.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let router = router::Router::bind(config).await.expect("bind");
        let http = router.http_addr();
        let https = router.https_addr();
        let http3 = router.http3_addr();
        let tcp = router.tcp_addrs();
        let admin = router.admin_addr().expect("admin");
        let metrics = router.metrics_addr();
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(router.run(async move {
            let _ = rx.await;
        }));
        let r = TestRouter {
            http,
            https,
            http3,
            tcp,
            admin,
            metrics,
            spool,
            state,
            root,
            stop: Some(tx),
            task: Some(task),
        };
        crate::eventually("router ready", Duration::from_secs(10), async || {
            r.admin_get("/readyz").await.0 == 200
        })
        .await;
        r
    }

    /// Drops an event body into the spool (atomically, as operators should).
    pub fn drop_event(&self, name: &str, body: &str) {
        let tmp = self.spool.join(format!(".{name}"));
        std::fs::write(&tmp, body).expect("write event");
        std::fs::rename(&tmp, self.spool.join(name)).expect("rename event");
    }

    /// Waits until the spool has no pending file.
    pub async fn wait_spool_empty(&self) {
        let spool = self.spool.clone();
        crate::eventually("spool drained", Duration::from_secs(10), async || {
            std::fs::read_dir(&spool)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
                        .all(|e| e.file_name().to_string_lossy().starts_with('.'))
                })
                .unwrap_or(false)
        })
        .await;
    }

    /// Waits until `host` is served with something other than 404.
    pub async fn wait_route(&self, host: &str) {
        crate::eventually(
            &format!("route for {host}"),
            Duration::from_secs(10),
            async || self.get(host, "/").await.0 != 404,
        )
        .await;
    }

    /// Waits until `/routes` lists `addr` as a member (sends no proxied request).
    pub async fn wait_member(&self, addr: SocketAddr) {
        crate::eventually(
            &format!("member {addr}"),
            Duration::from_secs(10),
            async || self.is_member(addr).await,
        )
        .await;
    }

    /// Whether some route lists `addr` among its members (routed), not merely
    /// among its endpoints.
    pub async fn is_member(&self, addr: SocketAddr) -> bool {
        let (_, text) = self.admin_get("/routes").await;
        let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
            return false;
        };
        let want = addr.to_string();
        doc["apps"].as_array().is_some_and(|apps| {
            apps.iter().any(|app| {
                app["members"].as_array().is_some_and(|ms| {
                    ms.iter()
                        .any(|m| m["address"].as_str() == Some(want.as_str()))
                })
            })
        })
    }

    /// GET through the router with a Host header; returns status and body.
    pub async fn get(&self, host: &str, path: &str) -> (u16, Bytes) {
        let client: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let req = Request::get(format!("http://{}{}", self.http, path))
            .header("host", host)
            .body(Empty::new())
            .expect("request");
        let resp = client.request(req).await.expect("request through router");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body)
    }

    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        crate::http_get(&format!("http://{}{}", self.admin, path)).await
    }

    /// POST to the admin API (empty body); returns status and body.
    pub async fn admin_post(&self, path: &str) -> (u16, String) {
        let client: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let req = Request::post(format!("http://{}{}", self.admin, path))
            .body(Empty::new())
            .expect("request");
        let resp = client.request(req).await.expect("admin POST");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Any call to the admin API, with a body and an optional bearer token.
    pub async fn admin_call(
        &self,
        method: &str,
        path: &str,
        body: &str,
        token: Option<&str>,
    ) -> (u16, String) {
        let client: Client<HttpConnector, http_body_util::Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{}", self.admin, path));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req
            .body(http_body_util::Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let resp = client.request(req).await.expect("admin call");
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// Sets `{"members_protocol": "h2"}` for `app` (`name-namespace`) through the
    /// admin API (no token configured), asserting it was taken.
    pub async fn set_members_h2(&self, app: &str) {
        let path = format!("/apps/{app}/settings");
        let (s, text) = self
            .admin_call("PUT", &path, r#"{"members_protocol": "h2"}"#, None)
            .await;
        assert_eq!(s, 200, "{text}");
    }

    /// `n` GETs for `host` over one keep-alive client; the statuses.
    pub async fn get_n(&self, host: &str, n: usize) -> Vec<u16> {
        let client: Client<HttpConnector, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let req = Request::get(format!("http://{}/", self.http))
                .header("host", host)
                .body(Empty::new())
                .expect("request");
            let resp = client.request(req).await.expect("request through router");
            out.push(resp.status().as_u16());
            let _ = resp.into_body().collect().await;
        }
        out
    }

    /// The member's entry in `GET /backends`, if it is listed.
    pub async fn backend_state(&self, addr: SocketAddr) -> Option<serde_json::Value> {
        let (_, body) = self.admin_get("/backends").await;
        let doc: serde_json::Value = serde_json::from_str(&body).ok()?;
        let want = addr.to_string();
        doc["backends"]
            .as_array()?
            .iter()
            .find(|b| b["address"] == want.as_str())
            .cloned()
    }

    /// Waits until the member's health is `health` (`up`, `down`, `unknown`).
    pub async fn wait_health(&self, addr: SocketAddr, health: &str) {
        crate::eventually(
            &format!("member {addr} {health}"),
            Duration::from_secs(10),
            async || {
                self.backend_state(addr)
                    .await
                    .is_some_and(|b| b["health"] == health)
            },
        )
        .await;
    }

    /// The value of one metric sample line (`name{labels}`) from `/metrics`.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let (_, text) = self.admin_get("/metrics").await;
        text.lines().find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == sample).then(|| value.parse().ok())?
        })
    }

    /// [`crate::metric_sum`] over this router's `/metrics`.
    pub async fn metric_sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let (_, text) = self.admin_get("/metrics").await;
        crate::metric_sum(&text, name, labels)
    }

    /// How much a counter sample grew since it read `before` (a sample not yet
    /// exported reads 0).
    pub async fn grown_since(&self, sample: &str, before: f64) -> f64 {
        self.metric(sample).await.unwrap_or(0.0) - before
    }

    /// Signals shutdown and waits for the router to stop.
    pub async fn stop(mut self) {
        self.shutdown().await;
    }

    async fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }

    /// Begins shutdown without waiting; returns the handle to await.
    pub fn begin_stop(&mut self) -> tokio::task::JoinHandle<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.take().expect("running")
    }
}

impl Drop for TestRouter {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
