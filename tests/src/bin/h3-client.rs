//! An HTTP/3 client on quinn and h3 (the stacks that recognise a stateless
//! reset, RFC 9000 §10.3, which aioquic does not), for the pair's failover test
//! and the HTTP/3 benchmark.
//!
//!   h3-client loop ADDR SNI CA PATH INTERVAL_MS SECONDS
//!       A GET every INTERVAL_MS on one connection while it lives, a new one when
//!       it ends; one JSON line per request, then {"summary": ...} with the
//!       longest gap between two successes and how the connections ended.
//!   h3-client count ADDR SNI CA PATH N CONNECTIONS STREAMS
//!       N GETs over CONNECTIONS connections, STREAMS at a time on each (as
//!       `h2load -cC -mS`); prints {"ok": .., "failed": .., "seconds": ..}.
//!   h3-client idle ADDR SNI CA PATH N
//!       Opens N connections, one GET on each, prints "ready N", holds them until
//!       its standard input closes, then prints {"open": ..} (how many were
//!       still open: none closed by the server meanwhile).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use bytes::{Buf as _, Bytes};

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

fn client_config(ca: &str) -> anyhow::Result<quinn::ClientConfig> {
    let tls = e2e::pki::client_tls(ca, b"h3")?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)?;
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(quinn::IdleTimeout::try_from(Duration::from_secs(30))?));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// Connects and returns the request sender and the connection (its driver runs
/// on a task of its own).
async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    sni: &str,
) -> anyhow::Result<(Sender, quinn::Connection)> {
    let conn = endpoint.connect(addr, sni)?.await?;
    let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(conn.clone())).await?;
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    Ok((sender, conn))
}

async fn get(sender: &mut Sender, sni: &str, path: &str) -> anyhow::Result<u16> {
    let req = http::Request::get(format!("https://{sni}{path}")).body(())?;
    let mut stream = sender.send_request(req).await?;
    stream.finish().await?;
    let resp = stream.recv_response().await?;
    while let Some(mut chunk) = stream.recv_data().await? {
        chunk.advance(chunk.remaining());
    }
    Ok(resp.status().as_u16())
}

async fn run_loop(args: &[String]) -> anyhow::Result<()> {
    let [addr, sni, ca, path, interval, seconds] = args else {
        return Err(anyhow!("loop ADDR SNI CA PATH INTERVAL_MS SECONDS"));
    };
    let addr: SocketAddr = addr.parse()?;
    let interval = Duration::from_millis(interval.parse()?);
    let end = Instant::now() + Duration::from_secs_f64(seconds.parse()?);
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([0, 0, 0, 0], 0)))?;
    endpoint.set_default_client_config(client_config(ca)?);
    let start = Instant::now();
    let (mut ok, mut failed, mut connections) = (0u64, 0u64, 0u64);
    let mut last_ok: Option<Instant> = None;
    let mut longest = Duration::ZERO;
    let mut endings: Vec<String> = Vec::new();
    while Instant::now() < end {
        connections += 1;
        let (mut sender, conn) = match connect(&endpoint, addr, sni).await {
            Ok(c) => c,
            Err(e) => {
                failed += 1;
                println!(
                    "{}",
                    serde_json::json!({"t": start.elapsed().as_secs_f64(), "ok": false, "connection": connections, "error": e.to_string()})
                );
                tokio::time::sleep(interval).await;
                continue;
            }
        };
        while Instant::now() < end {
            let t = Instant::now();
            let r = tokio::time::timeout(Duration::from_secs(2), get(&mut sender, sni, path)).await;
            let status = match r {
                Ok(Ok(s)) => Some(s),
                Ok(Err(e)) => {
                    failed += 1;
                    println!(
                        "{}",
                        serde_json::json!({"t": start.elapsed().as_secs_f64(), "ok": false, "connection": connections, "error": e.to_string()})
                    );
                    break;
                }
                Err(_) => {
                    failed += 1;
                    println!(
                        "{}",
                        serde_json::json!({"t": start.elapsed().as_secs_f64(), "ok": false, "connection": connections, "error": "timeout"})
                    );
                    break;
                }
            };
            if status == Some(200) {
                ok += 1;
                if let Some(l) = last_ok {
                    longest = longest.max(l.elapsed());
                }
                last_ok = Some(Instant::now());
            } else {
                failed += 1;
            }
            println!(
                "{}",
                serde_json::json!({"t": t.duration_since(start).as_secs_f64(), "ok": status == Some(200), "status": status, "connection": connections})
            );
            tokio::time::sleep(interval.saturating_sub(t.elapsed())).await;
        }
        endings.push(
            conn.close_reason()
                .map_or_else(|| "open".to_string(), |r| r.to_string()),
        );
        conn.close(0u32.into(), b"done");
    }
    println!(
        "{}",
        serde_json::json!({"summary": {"ok": ok, "failed": failed, "connections": connections, "longest_gap_s": longest.as_secs_f64(), "endings": endings}})
    );
    Ok(())
}

async fn run_count(args: &[String]) -> anyhow::Result<()> {
    let [addr, sni, ca, path, n, connections, streams] = args else {
        return Err(anyhow!("count ADDR SNI CA PATH N CONNECTIONS STREAMS"));
    };
    let addr: SocketAddr = addr.parse()?;
    let n: u64 = n.parse()?;
    let (connections, streams): (u64, u64) = (connections.parse()?, streams.parse()?);
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([0, 0, 0, 0], 0)))?;
    endpoint.set_default_client_config(client_config(ca)?);
    let mut senders = Vec::new();
    for _ in 0..connections.max(1) {
        senders.push(connect(&endpoint, addr, sni).await?);
    }
    let start = Instant::now();
    let loops = connections.max(1) * streams.max(1);
    let per = n / loops;
    let mut tasks = Vec::new();
    for i in 0..loops {
        let mut sender = senders[(i % connections.max(1)) as usize].0.clone();
        let (sni, path) = (sni.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            for _ in 0..per {
                match get(&mut sender, &sni, &path).await {
                    Ok(200) => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        let (o, f) = t.await?;
        ok += o;
        failed += f;
    }
    let seconds = start.elapsed().as_secs_f64();
    let (mut sent, mut received, mut acks) = (0, 0, 0);
    for (_, conn) in &senders {
        let stats = conn.stats();
        sent += stats.udp_tx.datagrams;
        received += stats.udp_rx.datagrams;
        acks += stats.frame_tx.acks;
    }
    println!(
        "{}",
        serde_json::json!({"ok": ok, "failed": failed, "seconds": seconds,
            "datagrams_sent": sent, "datagrams_received": received, "acks_sent": acks})
    );
    Ok(())
}

async fn run_idle(args: &[String]) -> anyhow::Result<()> {
    let [addr, sni, ca, path, n] = args else {
        return Err(anyhow!("idle ADDR SNI CA PATH N"));
    };
    let addr: SocketAddr = addr.parse()?;
    let n: usize = n.parse()?;
    let mut endpoint = quinn::Endpoint::client(SocketAddr::from(([0, 0, 0, 0], 0)))?;
    endpoint.set_default_client_config(client_config(ca)?);
    let mut held = Vec::new();
    for _ in 0..n {
        let (mut sender, conn) = connect(&endpoint, addr, sni).await?;
        get(&mut sender, sni, path).await?;
        held.push((sender, conn));
    }
    println!("ready {}", held.len());
    let mut stdin = tokio::io::stdin();
    let mut sink = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut stdin, &mut sink).await;
    let open = held
        .iter()
        .filter(|(_, c)| c.close_reason().is_none())
        .count();
    println!("{}", serde_json::json!({"open": open}));
    Ok(())
}

/// One thread, as `h2load -t1`: the benchmark measures the router's CPU beside
/// a client that is not itself spread over both cores.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("loop") => run_loop(&args[1..]).await,
        Some("count") => run_count(&args[1..]).await,
        Some("idle") => run_idle(&args[1..]).await,
        _ => Err(anyhow!("usage: h3-client loop|count|idle ...")),
    }
}
