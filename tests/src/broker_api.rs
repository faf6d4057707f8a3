//! A stand-in for the OpenShift broker's REST API (the real broker cannot run
//! here): answers GETs from a table of path → (status, body) that tests fill from
//! the fixture files in `fixtures/broker/`, and remembers the Authorization
//! header of every request.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

#[derive(Clone, Default)]
pub struct BrokerApi {
    pub addr: Option<SocketAddr>,
    answers: Arc<Mutex<HashMap<String, (u16, String)>>>,
    pub authorizations: Arc<Mutex<Vec<String>>>,
    /// The listed apps, by domain: what `GET domains` and `GET domains/{ns}/applications` say.
    listed: Arc<Mutex<BTreeMap<String, BTreeMap<String, String>>>>,
}

/// A fixture file with its `{{KEY}}` placeholders filled in.
pub fn fixture(name: &str, values: &[(&str, &str)]) -> String {
    let path = crate::fixtures().join("../broker").join(name);
    let mut text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (k, v) in values {
        text = text.replace(&format!("{{{{{k}}}}}"), v);
    }
    text
}

impl BrokerApi {
    pub async fn start() -> BrokerApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut api = BrokerApi {
            addr: Some(listener.local_addr().expect("addr")),
            ..BrokerApi::default()
        };
        let served = api.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let api = served.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let api = api.clone();
                        async move {
                            if let Some(a) = req.headers().get("authorization") {
                                api.authorizations
                                    .lock()
                                    .expect("lock")
                                    .push(String::from_utf8_lossy(a.as_bytes()).into_owned());
                            }
                            let key = req
                                .uri()
                                .path_and_query()
                                .map_or("/".to_string(), |p| p.as_str().to_string());
                            let (status, body) = api
                                .answers
                                .lock()
                                .expect("lock")
                                .get(&key)
                                .cloned()
                                .unwrap_or((404, fixture("not_found.json", &[])));
                            let mut resp = http::Response::new(Full::new(Bytes::from(body)));
                            *resp.status_mut() =
                                http::StatusCode::from_u16(status).expect("status");
                            resp.headers_mut().insert(
                                "content-type",
                                http::HeaderValue::from_static("application/json"),
                            );
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        api.addr = api.addr.take();
        api
    }

    /// The REST base URL, as `reconcile.url` takes it.
    pub fn url(&self) -> String {
        format!("http://{}/broker/rest", self.addr.expect("started"))
    }

    /// What the broker says about one app: its aliases and one load-balancer gear per
    /// `(gear id, member address)`.
    pub fn set_app(&self, name: &str, ns: &str, aliases: &[&str], gears: &[(&str, SocketAddr)]) {
        let aliases: Vec<String> = aliases
            .iter()
            .map(|a| format!("{{\"id\": \"{a}\", \"has_private_ssl_certificate\": false}}"))
            .collect();
        let gears: Vec<String> = gears
            .iter()
            .map(|(id, addr)| {
                fixture(
                    "gear.json",
                    &[
                        ("GEAR_ID", id),
                        ("NAME", name),
                        ("NAMESPACE", ns),
                        ("ADDRESS", &addr.ip().to_string()),
                        ("PORT", &addr.port().to_string()),
                    ],
                )
            })
            .collect();
        let app = fixture(
            "application.json",
            &[
                ("NAME", name),
                ("NAMESPACE", ns),
                ("ALIASES", &aliases.join(",")),
            ],
        );
        let groups = fixture("gear_groups.json", &[("GEARS", &gears.join(","))]);
        let base = format!("/broker/rest/domains/{ns}/applications/{name}");
        self.list(ns, name, Some(&app));
        self.set(&base, 200, app);
        self.set(
            &format!("{base}/gear_groups?include=endpoints"),
            200,
            groups,
        );
    }

    /// Lists the app in its domain (`app`: its `application.json`), or takes it off
    /// the listings (`None`): the listings follow.
    pub fn list(&self, ns: &str, name: &str, app: Option<&str>) {
        let mut listed = self.listed.lock().expect("lock");
        let domain = listed.entry(ns.to_string()).or_default();
        match app {
            Some(app) => {
                let v: serde_json::Value = serde_json::from_str(app).expect("application.json");
                domain.insert(name.to_string(), v["data"].to_string());
            }
            None => {
                domain.remove(name);
            }
        }
        let domains: Vec<String> = listed
            .keys()
            .map(|d| {
                format!("{{\"id\": \"{d}-id\", \"name\": \"{d}\", \"suffix\": \"example.com\"}}")
            })
            .collect();
        let mut answers = self.answers.lock().expect("lock");
        answers.insert(
            "/broker/rest/domains".into(),
            (
                200,
                fixture("domains.json", &[("DOMAINS", &domains.join(","))]),
            ),
        );
        for (d, apps) in listed.iter() {
            let apps: Vec<&str> = apps.values().map(String::as_str).collect();
            answers.insert(
                format!("/broker/rest/domains/{d}/applications"),
                (
                    200,
                    fixture("applications.json", &[("APPLICATIONS", &apps.join(","))]),
                ),
            );
        }
    }

    /// Any answer for a path (with its query).
    pub fn set(&self, path_and_query: &str, status: u16, body: String) {
        self.answers
            .lock()
            .expect("lock")
            .insert(path_and_query.to_string(), (status, body));
    }
}
