//! The admin listener (`listen.admin`, loopback by default):
//!
//! | path | answer |
//! |---|---|
//! | `GET /healthz` | 200 while the process runs |
//! | `GET /readyz` | 200 once the state is loaded and the listeners are up; 503 before, and from the moment shutdown begins (so keepalived moves the VIP away first) |
//! | `GET /metrics` | Prometheus text format |
//! | `GET /routes` | the live route table as JSON: per app, its host names, members and endpoints (PEP 005's routing-table API) |
//!
//! Any other path is 404, any other method 405.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::table::{EndpointInfo, RouteTable};

pub struct Admin {
    pub table: Arc<ArcSwap<RouteTable>>,
    pub metrics: Arc<Metrics>,
    pub ready: Arc<AtomicBool>,
}

#[derive(Serialize)]
struct RoutesDoc<'a> {
    apps: Vec<AppDoc<'a>>,
}

#[derive(Serialize)]
struct AppDoc<'a> {
    name: &'a str,
    namespace: &'a str,
    hosts: Vec<&'a str>,
    members: Vec<MemberDoc<'a>>,
    endpoints: &'a [EndpointInfo],
    aliases: &'a [String],
    certificates: &'a [String],
}

#[derive(Serialize)]
struct MemberDoc<'a> {
    address: &'a str,
    in_flight: usize,
    tls: bool,
}

impl Admin {
    fn handle(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "use GET\n");
        }
        match req.uri().path() {
            "/healthz" => text(StatusCode::OK, "ok\n"),
            "/readyz" => {
                if self.ready.load(Ordering::Acquire) {
                    text(StatusCode::OK, "ready\n")
                } else {
                    text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                }
            }
            "/metrics" => {
                let mut r = Response::new(Full::new(Bytes::from(self.metrics.render())));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                r
            }
            "/routes" => self.routes(),
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        }
    }

    fn routes(&self) -> Response<Full<Bytes>> {
        let table = self.table.load_full();
        let doc = RoutesDoc {
            apps: table
                .routes()
                .map(|r| AppDoc {
                    name: &r.name,
                    namespace: &r.namespace,
                    hosts: r.hosts.iter().map(|h| &**h).collect(),
                    members: r
                        .members
                        .iter()
                        .map(|m| MemberDoc {
                            address: &m.backend.addr,
                            in_flight: m.backend.in_flight(),
                            tls: m.tls,
                        })
                        .collect(),
                    endpoints: &r.endpoints,
                    aliases: &r.aliases,
                    certificates: &r.certificates,
                })
                .collect(),
        };
        match serde_json::to_vec_pretty(&doc) {
            Ok(json) => {
                let mut r = Response::new(Full::new(Bytes::from(json)));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("application/json"),
                );
                r
            }
            Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
        }
    }

    /// Serves until `stop` turns true.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
        loop {
            let (stream, _) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "admin accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = stopped(&mut stop) => return,
            };
            let admin = self.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let r = admin.handle(&req);
                    async move { Ok::<_, Infallible>(r) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::copy_from_slice(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
