//! The exporter task: finished spans from the queue, in batches, encoded as
//! OTLP protobuf and POSTed to the collector (OTLP/HTTP, `traces.endpoint`)
//! on one kept-alive connection. A batch the collector does not take in
//! `traces.timeout` with a 2xx (down, slow, refusing, 429 or 503 included) is
//! dropped and counted: retrying would hold spans the queue needs for newer
//! requests, and a collector in trouble is better given less.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc::Receiver;

use super::{Clock, Queue, SpanRecord, TraceMetrics, TracesConfig};

/// Where spans go: `http://host:port/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, as connected to and sent as `Host`.
    pub authority: String,
    pub path: String,
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let uri: http::Uri = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(format!(
                    "{s:?}: https is not supported; send to a collector on this node or its pod network over http"
                ));
            }
            _ => return Err(format!("{s:?}: an http:// URL")),
        }
        let authority = uri.authority().ok_or(format!("{s:?}: no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        let path = match uri.path() {
            "" | "/" => "/v1/traces".to_owned(),
            p => p.to_owned(),
        };
        Ok(Endpoint {
            authority: format!("{}:{port}", authority.host()),
            path,
        })
    }
}

/// What names the router in every span's resource.
#[derive(Clone, Debug)]
pub struct Identity {
    pub service_name: String,
    /// The pair's node (`a`, `b`), if in a pair.
    pub node: Option<String>,
    pub host_name: String,
}

impl Identity {
    /// The resource's body, encoded once (see [`crate::wire::resource`]).
    pub fn resource(&self) -> Vec<u8> {
        let instance = match &self.node {
            Some(node) => format!("{}/{node}", self.host_name),
            None => self.host_name.clone(),
        };
        let mut v = vec![
            ("service.name", self.service_name.as_str()),
            ("service.version", env!("CARGO_PKG_VERSION")),
            ("service.instance.id", instance.as_str()),
            ("host.name", self.host_name.as_str()),
        ];
        if let Some(node) = &self.node {
            v.push(("router.pair.node", node));
        }
        crate::wire::resource(&v)
    }
}

/// Runs until the request path's side is dropped.
pub async fn run(queue: Queue, config: TracesConfig, identity: Identity, metrics: TraceMetrics) {
    let Some(endpoint) = config
        .endpoint
        .as_deref()
        .and_then(|e| Endpoint::parse(e).ok())
    else {
        return;
    };
    let resource = identity.resource();
    let mut conn: Option<SendRequest<Full<Bytes>>> = None;
    let Queue { mut rx, full } = queue;
    let mut batch = Vec::with_capacity(config.batch);
    loop {
        if rx.recv_many(&mut batch, config.batch).await == 0 {
            return;
        }
        if batch.len() < config.batch {
            // The rest of the batch: what waits once the interval has passed,
            // or once the request path says a batch's worth does.
            let _ = tokio::time::timeout(config.interval, full.notified()).await;
            take_waiting(&mut rx, &mut batch, config.batch);
        }
        Clock::now().date(&mut batch);
        let body = crate::wire::encode(&batch, &resource);
        let n = batch.len();
        batch.clear();
        let sent = tokio::time::timeout(config.timeout, post(&mut conn, &endpoint, body)).await;
        match sent {
            Ok(Ok(())) => metrics.exported.inc_by(n as u64),
            Ok(Err(why)) => {
                conn = None;
                tracing::warn!(endpoint = %endpoint.authority, spans = n, why, "span export failed");
                metrics.dropped("export_failed", n);
            }
            Err(_) => {
                conn = None;
                tracing::warn!(endpoint = %endpoint.authority, spans = n, "span export timed out");
                metrics.dropped("export_failed", n);
            }
        }
    }
}

/// What waits in the queue, into `batch` up to `max`, without waiting and
/// without asking to be woken: the waker left with the queue is one that
/// does nothing, so spans pushed until the exporter waits again wake no one.
#[expect(clippy::vec_box, reason = "a batch is of the boxes the queue carries")]
fn take_waiting(rx: &mut Receiver<Box<SpanRecord>>, batch: &mut Vec<Box<SpanRecord>>, max: usize) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    while batch.len() < max {
        let room = max - batch.len();
        match rx.poll_recv_many(&mut cx, batch, room) {
            std::task::Poll::Ready(n) if n > 0 => {}
            _ => return,
        }
    }
}

/// One export request on the kept connection (a new one if there is none).
async fn post(
    conn: &mut Option<SendRequest<Full<Bytes>>>,
    endpoint: &Endpoint,
    body: Vec<u8>,
) -> Result<(), String> {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        let stream = tokio::net::TcpStream::connect(&endpoint.authority)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (send, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        tokio::spawn(async move {
            let _ = driver.await;
        });
        *conn = Some(send);
    }
    let send = conn.as_mut().ok_or("no connection")?;
    send.ready().await.map_err(|e| format!("connection: {e}"))?;
    let req = http::Request::post(&endpoint.path)
        .header(http::header::HOST, &endpoint.authority)
        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status();
    // Read the (small) answer whole so the connection can carry the next batch.
    let _ = resp.into_body().collect().await;
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("collector answered {status}"))
    }
}
