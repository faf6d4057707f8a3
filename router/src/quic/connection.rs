//! One HTTP/3 connection: its handshake within the deadline, then its requests,
//! each on a task of its own through [`Proxy::response`], until it is idle, stalled,
//! the client closes it, or the router stops.
//!
//! [`Proxy::response`]: crate::request::Proxy::response

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderMap, Response, header};
use http_body_util::BodyExt as _;
use prometheus::IntCounter;
use tokio::sync::watch;

use crate::request::activity::{Activity, ConnectionSlot};
use crate::request::body::ProxyBody;
use crate::request::client_conn::ClientConn;
use crate::request::lifecycle::{Event, Signal, Watch, next_event};
use crate::request::listener::{Serving, stopped};

type H3Conn = h3::server::Connection<h3_quinn::Connection, Bytes>;
type Resolver = h3::server::RequestResolver<h3_quinn::Connection, Bytes>;
type SendStream = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// H3_NO_ERROR (RFC 9114 §8.1): a graceful close.
const NO_ERROR: u32 = 0x100;

/// Handshakes in progress, counted by a guard each (dropped when its handshake
/// ends, whichever way).
pub(super) struct Handshaking(Arc<AtomicUsize>);

impl Handshaking {
    pub(super) fn begin(count: &Arc<AtomicUsize>) -> Handshaking {
        count.fetch_add(1, Ordering::Relaxed);
        Handshaking(count.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a connection's task needs, made by the listener.
pub(super) struct QuicConnection {
    pub(super) serving: Arc<Serving>,
    pub(super) place: ConnectionSlot,
    pub(super) local_port: u16,
    pub(super) stop: watch::Receiver<bool>,
    /// Set when the drain's grace period is over: close now.
    pub(super) kill: watch::Receiver<bool>,
    /// `router_http3_handshakes_total{result="ok"}`.
    pub(super) ok: IntCounter,
}

impl QuicConnection {
    /// `connecting`: the handshake quinn began for the client at `peer` (accepted
    /// by the listener, so that this task never holds the larger `Incoming`);
    /// `local`: the address it came to.
    pub(super) async fn run(
        self,
        connecting: quinn::Connecting,
        peer: std::net::SocketAddr,
        local: Option<std::net::SocketAddr>,
        handshaking: Handshaking,
    ) {
        let metrics = self.serving.proxy.metrics.clone();
        let quic = match tokio::time::timeout(self.serving.handshake_timeout, connecting).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                metrics.http3.with_label_values(&["failed"]).inc();
                tracing::debug!(client = %peer, error = %e, "QUIC handshake failed");
                return;
            }
            Err(_) => {
                metrics.http3.with_label_values(&["timeout"]).inc();
                return;
            }
        };
        drop(handshaking);
        self.ok.inc();
        let limits = &self.serving.limits;
        // Boxed: the setup future (4 KB) and the connection (1.7 KB) would otherwise
        // size every connection's task for both (type sizes, bench/RESULTS.md).
        let h3 = Box::pin(
            h3::server::builder()
                .max_field_section_size(limits.max_header_bytes as u64)
                .build::<_, Bytes>(h3_quinn::Connection::new(quic.clone())),
        )
        .await;
        let h3 = match h3 {
            Ok(h3) => Box::new(h3),
            Err(e) => {
                tracing::debug!(client = %peer, error = %e, "HTTP/3 connection setup failed");
                return;
            }
        };
        let activity = Activity::new(Some(self.place));
        let mut conn = ClientConn::new(
            peer.ip(),
            limits.client_keys(),
            self.local_port,
            true,
            activity.clone(),
        )
        .with_forwarded(&self.serving.proxy.forwarded, local);
        // The certificate this connection presented: requests for names that
        // would get another are 421, as over h2.
        conn.served = server_name(&quic).and_then(|sni| {
            let certs = self.serving.proxy.certs.as_ref()?;
            Some(certs.load().served_for(&sni))
        });
        // Not evicted: a listener at its cap refuses new QUIC clients instead.
        let never = Arc::new(Signal::default());
        let watch = Watch::of(limits, (self.stop, self.kill), never, activity.clone());
        let ended = Requests {
            h3,
            serving: self.serving.clone(),
            conn: Arc::new(conn),
        }
        .run(watch)
        .await;
        quic.close(quinn::VarInt::from_u32(NO_ERROR), ended.as_bytes());
    }
}

/// The SNI name the client sent, from the finished handshake.
fn server_name(quic: &quinn::Connection) -> Option<String> {
    quic.handshake_data()?
        .downcast::<quinn::crypto::rustls::HandshakeData>()
        .ok()?
        .server_name
}

/// A connection past its handshake.
struct Requests {
    h3: Box<H3Conn>,
    serving: Arc<Serving>,
    conn: Arc<ClientConn>,
}

impl Requests {
    /// Serves requests until one of the connection's ends; returns why it ended.
    /// Its deadlines and signals are every client connection's
    /// ([`crate::request::lifecycle`]): draining sends GOAWAY, then the requests in
    /// flight finish (or the grace period ends).
    async fn run(mut self, mut watch: Watch) -> &'static str {
        {
            // Made once: every event but the drain ends the connection.
            let mut next = std::pin::pin!(next_event(&mut watch, false, false));
            loop {
                tokio::select! {
                    r = self.h3.accept() => match r {
                        Ok(Some(resolver)) => self.spawn(resolver),
                        Ok(None) => return "closed",
                        Err(e) => {
                            tracing::debug!(error = %e, "HTTP/3 connection ended");
                            return "error";
                        }
                    },
                    event = &mut next => match event {
                        Event::Drain => break,
                        Event::Quiet | Event::Idle => return "idle",
                        Event::Stalled => return "stalled",
                        Event::End => return "grace period over",
                    },
                }
            }
        }
        // Draining: GOAWAY, then the requests in flight finish (or the grace
        // period ends).
        let _ = self.h3.shutdown(0).await;
        let activity = watch.activity.clone();
        tokio::select! {
            _ = activity.idle(std::time::Duration::ZERO, std::time::Duration::ZERO) => "drained",
            _ = stopped(&mut watch.kill) => "grace period over",
        }
    }

    fn spawn(&self, resolver: Resolver) {
        let proxy = self.serving.proxy.clone();
        let conn = self.conn.clone();
        tokio::spawn(async move {
            let (req, stream) = match resolver.resolve_request().await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(error = %e, "HTTP/3 request head refused");
                    return;
                }
            };
            let (send, recv) = stream.split();
            let body = super::body::received(recv).await;
            let req = req.map(|()| body);
            let Ok(response) = proxy.response(conn, req).await;
            respond(send, response).await;
        });
    }
}

/// Headers HTTP/3 forbids (RFC 9114 §4.2): connection-specific ones.
const CONNECTION_SPECIFIC: [header::HeaderName; 5] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::HeaderName::from_static("keep-alive"),
    header::HeaderName::from_static("proxy-connection"),
];

/// Sends the response head, then its body frame by frame (each as the client's
/// flow control lets it), then trailers if any.
async fn respond(mut send: SendStream, response: Response<ProxyBody>) {
    let (mut parts, mut body) = response.into_parts();
    strip_connection_specific(&mut parts.headers);
    if send
        .send_response(Response::from_parts(parts, ()))
        .await
        .is_err()
    {
        return;
    }
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // The member's body broke off: the client must not take a cut
            // response for a whole one.
            send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
            return;
        };
        match frame.into_data() {
            Ok(data) if data.is_empty() => {}
            Ok(data) => {
                if send.send_data(data).await.is_err() {
                    return;
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers()
                    && send.send_trailers(trailers).await.is_err()
                {
                    return;
                }
            }
        }
    }
    let _ = send.finish().await;
}

fn strip_connection_specific(headers: &mut HeaderMap) {
    for name in &CONNECTION_SPECIFIC {
        headers.remove(name);
    }
}
