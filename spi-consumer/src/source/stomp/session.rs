//! A STOMP 1.2 session with one broker: connect, subscribe, receive, acknowledge.
//!
//! Stages, in order: TCP connect (next host of the failover list) → CONNECT /
//! CONNECTED (heart-beats negotiated) → SUBSCRIBE with a receipt → MESSAGE … ACK/NACK
//! → DISCONNECT with a receipt. Any failure ends the session with a [`StompError`];
//! the caller reconnects (see [`StompSession::connect`] for the host order and backoff).
//!
//! Heart-beats: while waiting for a message the session sends a bare EOL whenever it
//! sent nothing for the negotiated interval, and gives up on the broker when nothing
//! at all arrived for twice its interval (a dead connection that TCP has not noticed).
//!
//! Messages are acknowledged one by one (`ack: client-individual`), so an unacked
//! message is redelivered after a reconnect; `activemq.prefetchSize` bounds how many
//! the broker sends ahead.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::codec::Framed;

use super::frame::{Codec, Command, Frame, FrameError, Item, Limits};
use super::tls::{TlsClient, TlsError};

/// The connection under a session: plain TCP or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type Transport = Framed<Box<dyn Io>, Codec>;

/// How to reach the broker and what to consume.
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Failover list, `host:port`, tried in order.
    pub hosts: Vec<String>,
    pub login: Option<String>,
    pub passcode: Option<String>,
    /// The `host` header (virtual host); ActiveMQ ignores it, RabbitMQ needs it.
    pub vhost: String,
    /// Identifies the connection; required by durable topic subscriptions.
    pub client_id: Option<String>,
    /// `/queue/...` or `/topic/...`.
    pub destination: String,
    /// Makes a topic subscription durable under this name (ActiveMQ).
    pub subscription_name: Option<String>,
    /// Messages the broker may send before the first is acknowledged.
    pub prefetch: u32,
    /// Heart-beat we offer to send, and want to receive.
    pub heartbeat: Duration,
    /// For the TCP connect and for each answer the session waits for.
    pub timeout: Duration,
    /// STOMP over TLS (verify the broker against a private CA; client certificate).
    pub tls: Option<TlsClient>,
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
pub enum StompError {
    #[error("connect to {host}: {source}")]
    Connect {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no broker host configured")]
    NoHosts,
    #[error("TLS with {host}: {source}")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    TlsConfig(#[from] TlsError),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("broker sent ERROR: {message}")]
    Broker { message: String },
    #[error("broker sent {got} when {expected} was expected")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
    #[error("no data from the broker for {0:?}: connection presumed dead")]
    HeartBeatLost(Duration),
    #[error("connection closed by the broker")]
    Closed,
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// A message to apply, then acknowledge.
#[derive(Debug)]
pub struct Message {
    /// The `ack` header to acknowledge it with.
    pub ack_id: String,
    pub message_id: String,
    pub redelivered: bool,
    pub body: bytes::Bytes,
}

/// A connected, subscribed session.
pub struct StompSession {
    framed: Transport,
    /// The broker's address we are connected to.
    pub host: String,
    /// Send a heart-beat after this long without sending (None: never).
    send_every: Option<Duration>,
    /// Give up after this long without receiving (None: never).
    recv_within: Option<Duration>,
    last_sent: Instant,
    last_received: Instant,
    next_receipt: u64,
}

impl StompSession {
    /// Connects to the first host of the list that answers, starting at `start`
    /// (so a caller can rotate through the list), and subscribes.
    pub async fn connect(config: &SessionConfig, start: usize) -> Result<StompSession, StompError> {
        if config.hosts.is_empty() {
            return Err(StompError::NoHosts);
        }
        let mut last = None;
        for i in 0..config.hosts.len() {
            let host = &config.hosts[(start + i) % config.hosts.len()];
            match StompSession::connect_one(config, host).await {
                Ok(s) => return Ok(s),
                Err(e) => {
                    tracing::warn!(%host, error = %e, "broker connection failed");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(StompError::NoHosts))
    }

    async fn connect_one(config: &SessionConfig, host: &str) -> Result<StompSession, StompError> {
        let stream = tokio::time::timeout(config.timeout, TcpStream::connect(host))
            .await
            .map_err(|_| StompError::Timeout("TCP connect"))?
            .map_err(|source| StompError::Connect {
                host: host.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let io: Box<dyn Io> = match &config.tls {
            None => Box::new(stream),
            Some(tls) => {
                let name = tls.name_for(host)?;
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let tls_stream =
                    tokio::time::timeout(config.timeout, connector.connect(name, stream))
                        .await
                        .map_err(|_| StompError::Timeout("TLS handshake"))?
                        .map_err(|source| StompError::Tls {
                            host: host.to_string(),
                            source,
                        })?;
                Box::new(tls_stream)
            }
        };
        let mut framed = Framed::new(io, Codec::new(Limits::default()));
        let beat = config.heartbeat.as_millis().to_string();
        let mut connect = Frame::new(Command::Connect)
            .header("accept-version", "1.2")
            .header("host", config.vhost.clone())
            .header("heart-beat", format!("{beat},{beat}"));
        if let Some(login) = &config.login {
            connect = connect.header("login", login.clone());
        }
        if let Some(passcode) = &config.passcode {
            connect = connect.header("passcode", passcode.clone());
        }
        if let Some(id) = &config.client_id {
            connect = connect.header("client-id", id.clone());
        }
        framed.send(Item::Frame(connect)).await?;
        let connected = next_frame(&mut framed, config.timeout, "CONNECTED").await?;
        expect(&connected, Command::Connected, "CONNECTED")?;
        // heart-beat: cx,cy from us; sx,sy from the broker. We send every max(cx, sy),
        // and expect something every max(sx, cy) (STOMP 1.2, "Heart-beating").
        let (sx, sy) = parse_heartbeat(connected.get("heart-beat"));
        let ours = config.heartbeat.as_millis() as u64;
        let send_every = (ours > 0 && sy > 0).then(|| Duration::from_millis(ours.max(sy)));
        let recv_within = (ours > 0 && sx > 0).then(|| Duration::from_millis(2 * ours.max(sx)));

        let mut session = StompSession {
            framed,
            host: host.to_string(),
            send_every,
            recv_within,
            last_sent: Instant::now(),
            last_received: Instant::now(),
            next_receipt: 1,
        };
        let mut subscribe = Frame::new(Command::Subscribe)
            .header("id", "0")
            .header("destination", config.destination.clone())
            // Cumulative: one ACK answers for a whole batch (its last message),
            // which the broker loop acknowledges only once all of it is durable
            // and live, in the order received (see `ack_all`).
            .header("ack", "client")
            .header("activemq.prefetchSize", config.prefetch.max(1).to_string());
        if let Some(name) = &config.subscription_name {
            subscribe = subscribe.header("activemq.subscriptionName", name.clone());
        }
        session.request_receipt(subscribe, config.timeout).await?;
        tracing::info!(%host, destination = %config.destination, "subscribed");
        Ok(session)
    }

    /// Sends `frame` with a receipt request and waits for the RECEIPT.
    async fn request_receipt(&mut self, frame: Frame, limit: Duration) -> Result<(), StompError> {
        let id = format!("r{}", self.next_receipt);
        self.next_receipt += 1;
        self.write(frame.header("receipt", id.clone())).await?;
        let reply = next_frame(&mut self.framed, limit, "RECEIPT").await?;
        self.last_received = Instant::now();
        expect(&reply, Command::Receipt, "RECEIPT")?;
        if reply.get("receipt-id") != Some(id.as_str()) {
            return Err(StompError::Unexpected {
                expected: "RECEIPT",
                got: "RECEIPT for another frame",
            });
        }
        Ok(())
    }

    async fn write(&mut self, frame: Frame) -> Result<(), StompError> {
        self.framed.send(Item::Frame(frame)).await?;
        self.last_sent = Instant::now();
        Ok(())
    }

    /// Waits for the next message, keeping heart-beats going both ways.
    pub async fn next_message(&mut self) -> Result<Message, StompError> {
        loop {
            let now = Instant::now();
            let send_at = self.send_every.map(|d| self.last_sent + d);
            let dead_at = self.recv_within.map(|d| self.last_received + d);
            let wake = [send_at, dead_at].into_iter().flatten().min();
            let item = match wake {
                Some(at) if at <= now => None,
                Some(at) => tokio::time::timeout_at(at, self.framed.next()).await.ok(),
                None => Some(self.framed.next().await),
            };
            let Some(item) = item else {
                // A deadline passed: send a beat, or give up on a silent broker.
                if dead_at.is_some_and(|d| d <= Instant::now()) {
                    return Err(StompError::HeartBeatLost(
                        self.recv_within.unwrap_or_default(),
                    ));
                }
                self.framed.send(Item::HeartBeat).await?;
                self.last_sent = Instant::now();
                continue;
            };
            self.last_received = Instant::now();
            match item {
                None => return Err(StompError::Closed),
                Some(Err(e)) => return Err(e.into()),
                Some(Ok(Item::HeartBeat)) => continue,
                Some(Ok(Item::Frame(f))) => match f.command {
                    Command::Message => {
                        return Ok(Message {
                            ack_id: f
                                .get("ack")
                                .or_else(|| f.get("message-id"))
                                .unwrap_or_default()
                                .to_string(),
                            message_id: f.get("message-id").unwrap_or_default().to_string(),
                            redelivered: f.get("redelivered") == Some("true"),
                            body: f.body,
                        });
                    }
                    Command::Error => return Err(broker_error(&f)),
                    // Receipts we did not wait for: nothing to do.
                    _ => continue,
                },
            }
        }
    }

    /// Acknowledges a message: the broker forgets it.
    pub async fn ack(&mut self, message: &Message) -> Result<(), StompError> {
        self.write(Frame::new(Command::Ack).header("id", message.ack_id.clone()))
            .await
    }

    /// Acknowledges `messages`, the batch received last, in order: the ACK of the
    /// last one is cumulative (the subscription's `ack: client`), so one frame
    /// answers for all of them, and for nothing received after them. One frame
    /// a batch instead of one a message: a router taking 256 events a commit
    /// wrote 256 ACK frames (`bench-events --replay`, bench/RESULTS.md).
    pub async fn ack_all(&mut self, messages: &[Message]) -> Result<(), StompError> {
        let Some(last) = messages.last() else {
            return Ok(());
        };
        self.ack(last).await
    }

    /// Refuses a message: the broker redelivers it (or dead-letters it after its
    /// redelivery limit).
    pub async fn nack(&mut self, message: &Message) -> Result<(), StompError> {
        self.write(Frame::new(Command::Nack).header("id", message.ack_id.clone()))
            .await
    }

    /// Publishes a message (used by the `replay` tool and by tests). Persistent, so
    /// that a broker restart keeps it.
    pub async fn publish(
        &mut self,
        destination: &str,
        body: impl Into<bytes::Bytes>,
        limit: Duration,
    ) -> Result<(), StompError> {
        let frame = Frame::new(Command::Send)
            .header("destination", destination)
            .header("persistent", "true")
            .body(body);
        self.request_receipt(frame, limit).await
    }

    /// Publishes without waiting for a receipt, as the broker's own routing plugin
    /// does (fire and forget; persistent).
    pub async fn send(
        &mut self,
        destination: &str,
        body: impl Into<bytes::Bytes>,
    ) -> Result<(), StompError> {
        let frame = Frame::new(Command::Send)
            .header("destination", destination)
            .header("persistent", "true")
            .body(body);
        self.write(frame).await
    }

    /// Ends the session cleanly (the broker has processed every ACK sent before).
    pub async fn disconnect(mut self, limit: Duration) -> Result<(), StompError> {
        self.request_receipt(Frame::new(Command::Disconnect), limit)
            .await
    }
}

async fn next_frame(
    framed: &mut Transport,
    limit: Duration,
    what: &'static str,
) -> Result<Frame, StompError> {
    let deadline = Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, framed.next()).await {
            Err(_) => return Err(StompError::Timeout(what)),
            Ok(None) => return Err(StompError::Closed),
            Ok(Some(Err(e))) => return Err(e.into()),
            Ok(Some(Ok(Item::HeartBeat))) => continue,
            Ok(Some(Ok(Item::Frame(f)))) => {
                if f.command == Command::Error {
                    return Err(broker_error(&f));
                }
                return Ok(f);
            }
        }
    }
}

fn expect(frame: &Frame, command: Command, expected: &'static str) -> Result<(), StompError> {
    if frame.command == command {
        Ok(())
    } else {
        Err(StompError::Unexpected {
            expected,
            got: frame.command.as_str(),
        })
    }
}

fn broker_error(f: &Frame) -> StompError {
    let mut message = f.get("message").unwrap_or("").to_string();
    if let Ok(body) = std::str::from_utf8(&f.body) {
        let body = body.trim();
        if !body.is_empty() {
            message = format!("{message}: {}", body.lines().next().unwrap_or(body));
        }
    }
    StompError::Broker { message }
}

/// `sx,sy` from a CONNECTED frame's `heart-beat` header; absent or bad means 0,0.
fn parse_heartbeat(v: Option<&str>) -> (u64, u64) {
    v.and_then(|v| {
        let (a, b) = v.split_once(',')?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    })
    .unwrap_or((0, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_header_parsing() {
        assert_eq!(parse_heartbeat(Some("1000,2000")), (1000, 2000));
        assert_eq!(parse_heartbeat(Some(" 0 , 5 ")), (0, 5));
        assert_eq!(parse_heartbeat(Some("x,1")), (0, 0));
        assert_eq!(parse_heartbeat(None), (0, 0));
    }

    #[test]
    fn error_frames_carry_the_broker_message() {
        let f = Frame::new(Command::Error)
            .header("message", "User name or password is invalid.")
            .body(&b"java.lang.SecurityException\n\tat ..."[..]);
        let e = broker_error(&f).to_string();
        assert!(e.contains("password is invalid"), "{e}");
        assert!(e.contains("SecurityException"), "{e}");
        assert!(!e.contains("at ..."), "first body line only: {e}");
    }
}
