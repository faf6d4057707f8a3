//! An h2 client over TLS on hyper, for the pair's planned-move test: the
//! streams of a connection that ends in a graceful GOAWAY (the leaving
//! router's drain) must all be answered, and the next request goes on a new
//! connection (to the new VIP holder).
//!
//!   h2-client loop ADDR SNI CA PATH INTERVAL_MS SECONDS
//!       A GET every INTERVAL_MS, each a stream of its own on the current
//!       connection, a new connection once it no longer takes streams (GOAWAY,
//!       or it ended); one JSON line per request (its start, status or error),
//!       then {"summary": ...}: requests, failed (an error on a stream the
//!       connection took: a first-try failure), refused (a stream the server
//!       refused unprocessed, RFC 9113 §8.7, sent again on a new connection),
//!       connections, the longest gap between two answers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

type Sender = SendRequest<Empty<Bytes>>;

fn tls_config(ca: &str) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    Ok(Arc::new(e2e::pki::client_tls(ca, b"h2")?))
}

/// A new h2 connection (its driver on a task of its own).
async fn connect(
    tls: &Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    sni: &str,
) -> anyhow::Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from(sni.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await?;
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// What became of one request.
enum Outcome {
    Status(u16),
    /// Refused unprocessed (GOAWAY's last stream, or REFUSED_STREAM).
    Refused(String),
    Failed(String),
}

async fn get(mut sender: Sender, sni: &str, path: &str) -> Outcome {
    let req = http::Request::get(format!("https://{sni}{path}"))
        .body(Empty::<Bytes>::new())
        .expect("request");
    match sender.send_request(req).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            match resp.into_body().collect().await {
                Ok(_) => Outcome::Status(status),
                Err(e) => Outcome::Failed(format!("body: {e}")),
            }
        }
        Err(e) => {
            // hyper does not export h2's reason: a stream the server refused
            // unprocessed shows as a canceled request (never sent) or as
            // REFUSED_STREAM in the error's chain.
            let refused = e.is_canceled() || format!("{e:?}").contains("REFUSED_STREAM");
            if refused {
                Outcome::Refused(e.to_string())
            } else {
                Outcome::Failed(format!("{e:?}"))
            }
        }
    }
}

#[derive(Default)]
struct Tally {
    requests: u64,
    failed: u64,
    refused: u64,
    answers: Vec<f64>,
}

async fn run_loop(args: &[String]) -> anyhow::Result<()> {
    let [addr, sni, ca, path, interval, secs] = args else {
        return Err(anyhow!("loop ADDR SNI CA PATH INTERVAL_MS SECONDS"));
    };
    let addr: SocketAddr = addr.parse()?;
    let tls = tls_config(ca)?;
    let interval = Duration::from_millis(interval.parse()?);
    let end = Instant::now() + Duration::from_secs_f64(secs.parse()?);
    let t0 = Instant::now();
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut sender: Option<Sender> = None;
    let mut connections = 0u64;
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(interval);
    while Instant::now() < end {
        tick.tick().await;
        if sender
            .as_ref()
            .is_none_or(|s| s.is_closed() || !s.is_ready())
        {
            sender = match connect(&tls, addr, sni).await {
                Ok(s) => {
                    connections += 1;
                    Some(s)
                }
                Err(e) => {
                    println!(
                        "{}",
                        serde_json::json!({"t": t0.elapsed().as_secs_f64(), "connect_error": e.to_string()})
                    );
                    let mut t = tally.lock().expect("tally");
                    t.requests += 1;
                    t.failed += 1;
                    None
                }
            };
        }
        let Some(s) = sender.clone() else { continue };
        let (tally, sni, path, tls) = (tally.clone(), sni.clone(), path.clone(), tls.clone());
        tasks.push(tokio::spawn(async move {
            let start = t0.elapsed().as_secs_f64();
            let mut outcome = get(s, &sni, &path).await;
            if let Outcome::Refused(why) = &outcome {
                // Unprocessed: sent again once, on a new connection.
                println!("{}", serde_json::json!({"t": start, "refused": why}));
                outcome = match connect(&tls, addr, &sni).await {
                    Ok(again) => get(again, &sni, &path).await,
                    Err(e) => Outcome::Failed(format!("reconnect: {e}")),
                };
                tally.lock().expect("tally").refused += 1;
            }
            let mut t = tally.lock().expect("tally");
            t.requests += 1;
            match outcome {
                Outcome::Status(200) => {
                    t.answers.push(t0.elapsed().as_secs_f64());
                    println!("{}", serde_json::json!({"t": start, "status": 200}));
                }
                Outcome::Status(s) => {
                    t.failed += 1;
                    println!("{}", serde_json::json!({"t": start, "status": s}));
                }
                Outcome::Failed(e) | Outcome::Refused(e) => {
                    t.failed += 1;
                    println!("{}", serde_json::json!({"t": start, "error": e}));
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let t = tally.lock().expect("tally");
    let mut answers = t.answers.clone();
    answers.sort_by(f64::total_cmp);
    let gap = answers.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    println!(
        "{}",
        serde_json::json!({"summary": {"requests": t.requests, "failed": t.failed, "refused": t.refused, "connections": connections, "longest_gap_s": gap}})
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("loop") => run_loop(&args[1..]).await,
        _ => Err(anyhow!(
            "usage: h2-client loop ADDR SNI CA PATH INTERVAL_MS SECONDS"
        )),
    }
}
