//! One HTTP/3 connection: its handshake within the deadline, then its requests,
//! each on a task of its own through [`Proxy::response`], until it is idle, stalled,
//! the client closes it, or the router stops.
//!
//! [`Proxy::response`]: crate::request::Proxy::response

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;
use h3_codec::{Code, frame};
use prometheus::IntCounter;
use tokio::sync::watch;

use crate::request::connection::activity::{Activity, ConnectionSlot};
use crate::request::connection::client_conn::ClientConn;
use crate::request::connection::lifecycle::{Event, Signal, Watch, next_event};
use crate::request::connection::listener::{Serving, stopped};

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
        let sni = server_name(&quic);
        conn.served = sni.as_deref().and_then(|sni| {
            let certs = self.serving.proxy.certs.as_ref()?;
            Some(certs.load().served_for(sni))
        });
        conn.sni = sni.map(Arc::from);
        if self.serving.proxy.client_auth {
            let chain = quic.peer_identity().and_then(|i| {
                i.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                    .ok()
            });
            let cert = crate::tls::client_auth::ClientCert::of(chain.as_deref().map(Vec::as_slice));
            conn.client_cert = Some(Arc::new(cert));
        }
        // Not evicted: a listener at its cap refuses new QUIC clients instead.
        let never = Arc::new(Signal::default());
        let watch = Watch::of(limits, (self.stop, self.kill), never, activity.clone());
        let ended = Requests {
            quic: quic.clone(),
            serving: self.serving.clone(),
            conn: Arc::new(conn),
            opened: Arc::default(),
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
    quic: quinn::Connection,
    serving: Arc<Serving>,
    conn: Arc<ClientConn>,
    opened: Arc<super::control::Opened>,
}

impl Requests {
    /// Serves requests until one of the connection's ends; returns why it ended.
    /// Its deadlines and signals are every client connection's
    /// ([`crate::request::connection::lifecycle`]): draining sends GOAWAY, then the requests in
    /// flight finish (or the grace period ends).
    async fn run(self, mut watch: Watch) -> &'static str {
        // The server's control stream, open for the connection's life: its
        // SETTINGS now, a GOAWAY when draining.
        let Ok(mut control) = self.quic.open_uni().await else {
            return "closed";
        };
        let mut opening = BytesMut::new();
        frame::control_opening(self.serving.limits.max_header_bytes as u64, &mut opening);
        if control.write_all(&opening).await.is_err() {
            return "closed";
        }
        // The first request stream not accepted yet (client-initiated
        // bidirectional IDs are 0, 4, 8, ...): what GOAWAY names.
        let mut next_id = 0u64;
        {
            // Made once: every event but the drain ends the connection.
            let mut next = std::pin::pin!(next_event(&mut watch, false, false));
            loop {
                tokio::select! {
                    r = self.quic.accept_bi() => match r {
                        Ok((send, recv)) => {
                            next_id = next_id.max(u64::from(recv.id()) + 4);
                            tokio::spawn(self.stream().serve(send, recv));
                        }
                        Err(e) => return ended(&e),
                    },
                    r = self.quic.accept_uni() => match r {
                        Ok(recv) => {
                            tokio::spawn(super::control::serve(recv, self.quic.clone(), self.opened.clone()));
                        }
                        Err(e) => return ended(&e),
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
        let mut goaway = BytesMut::new();
        frame::goaway(next_id, &mut goaway);
        let _ = control.write_all(&goaway).await;
        let activity = watch.activity.clone();
        tokio::select! {
            _ = activity.idle(std::time::Duration::ZERO, std::time::Duration::ZERO) => "drained",
            _ = stopped(&mut watch.kill) => "grace period over",
            () = refuse_late(&self.quic) => "closed",
        }
    }

    fn stream(&self) -> super::request::Stream {
        super::request::Stream {
            proxy: self.serving.proxy.clone(),
            conn: self.conn.clone(),
            quic: self.quic.clone(),
            max_field_section: self.serving.limits.max_header_bytes,
            head_timeout: self.serving.limits.header_read_timeout,
        }
    }
}

/// After GOAWAY: requests the client opened before it read it are refused
/// (H3_REQUEST_REJECTED: it may retry them elsewhere), until the connection ends.
async fn refuse_late(quic: &quinn::Connection) {
    while let Ok((mut send, mut recv)) = quic.accept_bi().await {
        let code = super::incoming::varint(Code::REQUEST_REJECTED);
        let _ = send.reset(code);
        let _ = recv.stop(code);
    }
}

/// Why the connection ended, as the close reason says it.
fn ended(e: &quinn::ConnectionError) -> &'static str {
    match e {
        quinn::ConnectionError::ApplicationClosed(_) | quinn::ConnectionError::LocallyClosed => {
            "closed"
        }
        quinn::ConnectionError::TimedOut => "idle",
        _ => {
            tracing::debug!(error = %e, "HTTP/3 connection ended");
            "error"
        }
    }
}
