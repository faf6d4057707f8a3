//! HTTP/3: the same routing over QUIC (RFC 9000, RFC 9114), beside the HTTPS listener.
//!
//! A request over HTTP/3 takes the path every other request takes: accepted here
//! ([`listener`]), served per connection ([`connection`]: its control streams in
//! `control`), each request stream on a task of its own (`request`: frames read
//! by `incoming`, the body by `body`), then [`Proxy::response`] (routed,
//! balanced, forwarded over HTTP/1.1 or h2 to the member) with the same headers,
//! retries, splits, limits, access log and metrics. QUIC itself is `quinn`;
//! HTTP/3's frames and QPACK are the `h3-codec` crate (why not the `h3` crate:
//! its doc, with the measurement).
//!
//! The TLS side is the HTTPS listener's: the same live certificate store (SNI, aliases
//! added and removed at run time), the same suite order and resumption, TLS 1.3 and
//! ALPN `h3` only. 0-RTT is off: early data can be replayed by anyone who saw it, and
//! a router cannot know which requests of which app are safe to replay.
//!
//! **Bounds**, each on by default (see [`Http3Config`] and `limits`): the handshake
//! deadline (`tls.handshake_timeout`), an idle deadline (`limits.idle_timeout` with
//! no request in flight; `limits.header_read_timeout` before the first), streams per
//! connection (`http3.max_concurrent_streams`), open connections
//! (`limits.max_connections`) and per client source
//! (`limits.max_connections_per_source`), counted apart from TCP's. QUIC's
//! anti-amplification limit (three times the bytes received before the address is
//! validated) is quinn's. When many handshakes are in progress
//! (`http3.retry_above_handshakes`), a new client must first prove its address
//! with a Retry round trip: spoofed sources then cost one stateless packet each.
//!
//! **The pair.** With `tls.session_ticket_key_file`, both routers derive the
//! stateless-reset key and the Retry token key from that shared secret (HKDF-SHA256,
//! salts below). After the virtual IP moves, the surviving router answers a packet
//! of a connection it never had with a stateless reset the client recognises (the
//! token is the one the failed router gave it for that connection ID), so the client
//! opens a new connection at once instead of waiting out its idle timeout. Replies
//! leave from the address the packet came to (quinn sets the source address from
//! `IP_PKTINFO`), the virtual IP when the listener is bound to the wildcard.
//! Without the file the keys are random per process.
//!
//! [`Proxy::response`]: crate::request::Proxy::response

mod body;
pub mod connection;
mod control;
mod incoming;
pub mod listener;
mod request;

use std::sync::Arc;
use std::time::Duration;

use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use aws_lc_rs::hmac;
use serde::Deserialize;

/// `http3:` in the configuration (the listener itself is `listen.http3`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Http3Config {
    /// HTTPS responses over TCP say `Alt-Svc: h3=":PORT"; ma=...`, which is how
    /// browsers learn of the listener. Off: HTTP/3 only for clients told otherwise.
    #[serde(default = "yes")]
    pub alt_svc: bool,
    /// How long clients may remember the announcement (`ma`).
    #[serde(default = "default_max_age", with = "humantime_serde")]
    pub alt_svc_max_age: Duration,
    /// Request streams one connection may have open at once (each may hold a
    /// member's slot). Unset: `limits.h2_max_concurrent_streams`, h2's bound.
    #[serde(default)]
    pub max_concurrent_streams: Option<u32>,
    /// From this many handshakes in progress on, a client whose address is not
    /// validated yet gets a Retry first (one round trip more for it; a flood from
    /// spoofed addresses then costs a stateless packet each). 0: always.
    #[serde(default = "default_retry_above")]
    pub retry_above_handshakes: usize,
}

fn yes() -> bool {
    true
}

fn default_max_age() -> Duration {
    Duration::from_secs(24 * 3600)
}

fn default_retry_above() -> usize {
    64
}

impl Default for Http3Config {
    fn default() -> Http3Config {
        Http3Config {
            alt_svc: true,
            alt_svc_max_age: default_max_age(),
            max_concurrent_streams: None,
            retry_above_handshakes: default_retry_above(),
        }
    }
}

impl Http3Config {
    /// The `Alt-Svc` value for a listener on `port` (`None` when turned off).
    pub fn alt_svc_value(&self, port: u16) -> Option<http::HeaderValue> {
        if !self.alt_svc {
            return None;
        }
        let value = format!(
            "h3=\":{port}\"; ma={}",
            self.alt_svc_max_age.as_secs().max(1)
        );
        http::HeaderValue::from_str(&value).ok()
    }
}

/// Salts of the keys derived from the pair's shared secret: one key per use.
const RESET_SALT: &[u8] = b"router quic stateless reset v1";
const TOKEN_SALT: &[u8] = b"router quic address token v1";
const CID_SALT: &[u8] = b"router quic connection id v1";

/// The keys both routers of a pair must agree on (see the module doc).
pub struct PairKeys {
    /// Stateless-reset tokens: HMAC-SHA256 of the connection ID.
    pub reset: hmac::Key,
    /// Seals Retry tokens (address validation).
    pub token: aws_lc_rs::hkdf::Prk,
    /// Keys the check that a connection ID is one this pair issued: quinn drops
    /// packets for IDs it could not have made without answering, so the peer must
    /// recognise the failed router's IDs to send the reset at all.
    pub cid: u64,
}

impl PairKeys {
    /// From the shared secret, or random ones (`None`: a router without a pair
    /// file; its resets and tokens are its own).
    pub fn derive(secret: Option<&[u8]>) -> PairKeys {
        let mut random = [0u8; 32];
        let secret = match secret {
            Some(s) => s,
            None => {
                if aws_lc_rs::rand::fill(&mut random).is_err() {
                    // aws-lc's generator does not fail on Linux; should it, the
                    // keys are still unique per process through the clock.
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default();
                    random[..16].copy_from_slice(&now.as_nanos().to_le_bytes());
                }
                &random
            }
        };
        let derive = |salt: &[u8]| {
            let mut out = [0u8; 32];
            let filled = Salt::new(HKDF_SHA256, salt)
                .extract(secret)
                .expand(&[b"key"], HKDF_SHA256)
                .and_then(|okm| okm.fill(&mut out));
            if filled.is_err() {
                // 32 bytes (HKDF-SHA256's own length) are always available.
                tracing::error!("deriving a QUIC key failed");
            }
            out
        };
        let reset = derive(RESET_SALT);
        let cid = derive(CID_SALT);
        let cid = [
            cid[0], cid[1], cid[2], cid[3], cid[4], cid[5], cid[6], cid[7],
        ];
        PairKeys {
            reset: hmac::Key::new(hmac::HMAC_SHA256, &reset),
            token: Salt::new(HKDF_SHA256, TOKEN_SALT).extract(secret),
            cid: u64::from_le_bytes(cid),
        }
    }
}

/// The request bytes one connection may have in flight to the router, unread,
/// over all its streams (QUIC's connection-level flow control): a few streams'
/// worth of uploads at full speed, the same order as an h2 connection's window.
const CONNECTION_RECEIVE_WINDOW: u32 = 4 << 20;

/// The listener's QUIC configuration: the TLS side from `tls` (see
/// [`crate::tls::server::quic_config`]), the keys, and the transport bounds.
pub fn server_config(
    tls: rustls::ServerConfig,
    keys: PairKeys,
    settings: &Http3Config,
    limits: &crate::request::connection::limits::Limits,
) -> Result<(quinn::EndpointConfig, quinn::ServerConfig), String> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(Arc::new(tls))
        .map_err(|e| format!("TLS for QUIC: {e}"))?;
    let mut server = quinn::ServerConfig::new(Arc::new(crypto), Arc::new(keys.token));
    let mut transport = quinn::TransportConfig::default();
    let streams = settings
        .max_concurrent_streams
        .unwrap_or(limits.h2_max_concurrent_streams)
        .max(1);
    transport.max_concurrent_bidi_streams(streams.into());
    // A client opens three unidirectional streams (control, QPACK encoder and
    // decoder), and may open a reserved ("grease") one.
    transport.max_concurrent_uni_streams(4u32.into());
    // What one client may make the router hold unread: quinn's default lets
    // every stream fill its own window (1.25 MB) with no bound for the
    // connection (32 streams: 40 MB). One bound for the connection, as h2's
    // connection window is; and no QUIC datagrams (RFC 9221), which HTTP/3
    // without extensions never reads: quinn would buffer 1.25 MB of them.
    transport.receive_window(CONNECTION_RECEIVE_WINDOW.into());
    transport.datagram_receive_buffer_size(None);
    let idle = quinn::IdleTimeout::try_from(limits.idle_timeout.max(Duration::from_secs(1)))
        .map_err(|e| format!("limits.idle_timeout for QUIC: {e}"))?;
    transport.max_idle_timeout(Some(idle));
    server.transport_config(Arc::new(transport));
    // Handshakes waiting to be accepted, and the bytes they buffer: bounded.
    server.max_incoming(limits.max_connections.clamp(64, 1 << 16));
    server.incoming_buffer_size(64 << 10);
    server.incoming_buffer_size_total(16 << 20);
    let cid = keys.cid;
    let mut endpoint = quinn::EndpointConfig::new(Arc::new(keys.reset));
    endpoint
        .cid_generator(move || Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid)));
    Ok((endpoint, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pair_derives_the_same_reset_tokens_and_a_stranger_does_not() {
        let secret = [7u8; 48];
        let a = PairKeys::derive(Some(&secret));
        let b = PairKeys::derive(Some(&secret));
        let other = PairKeys::derive(None);
        let cid = b"connection-id-08";
        let tag = |k: &PairKeys| hmac::sign(&k.reset, cid).as_ref().to_vec();
        assert_eq!(tag(&a), tag(&b));
        assert_ne!(tag(&a), tag(&other));
        assert_eq!(a.cid, b.cid, "each recognises the other's connection IDs");
        assert_ne!(a.cid, other.cid);
    }

    /// A client that writes without the router reading gets no further than
    /// the connection's window, over any number of streams, and is offered no
    /// datagrams (quinn's defaults: 1.25 MB per stream without a total, and
    /// datagrams buffered unread).
    #[tokio::test]
    async fn a_client_cannot_make_a_connection_hold_more_than_its_window() {
        use futures_util::FutureExt as _;
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let der = cert.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key)
            .expect("server TLS");
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let limits = crate::request::connection::limits::Limits::default();
        let (endpoint, server) = server_config(
            tls,
            PairKeys::derive(None),
            &Http3Config::default(),
            &limits,
        )
        .expect("config");
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
        let addr = socket.local_addr().expect("addr");
        let runtime = quinn::default_runtime().expect("tokio");
        let listener =
            quinn::Endpoint::new(endpoint, Some(server), socket, runtime).expect("endpoint");
        let held = tokio::spawn(async move {
            listener
                .accept()
                .await
                .expect("incoming")
                .await
                .expect("accepted")
        });

        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).expect("root");
        let mut client_tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_root_certificates(roots)
            .with_no_client_auth();
        client_tls.alpn_protocols = vec![b"h3".to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(client_tls).expect("quic");
        let mut client =
            quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("client");
        client.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        let conn = client
            .connect(addr, "localhost")
            .expect("connect")
            .await
            .expect("handshake");
        let _server_side = held.await.expect("server task");
        assert_eq!(conn.max_datagram_size(), None, "datagrams offered");
        // Five streams of 1.25 MB each would fit quinn's defaults (6.25 MB).
        let chunk = vec![0u8; 64 << 10];
        let mut accepted = 0usize;
        for _ in 0..5 {
            let (mut send, _recv) = conn.open_bi().await.expect("stream");
            while let Some(Ok(n)) = send.write(&chunk).now_or_never() {
                accepted += n;
            }
        }
        assert_eq!(
            accepted, CONNECTION_RECEIVE_WINDOW as usize,
            "bytes the client could send unread"
        );
    }

    #[test]
    fn alt_svc_names_the_port_and_the_age_and_can_be_turned_off() {
        let mut c = Http3Config::default();
        assert_eq!(
            c.alt_svc_value(8443).as_ref().map(|v| v.to_str().ok()),
            Some(Some("h3=\":8443\"; ma=86400"))
        );
        c.alt_svc = false;
        assert!(c.alt_svc_value(8443).is_none());
    }
}
