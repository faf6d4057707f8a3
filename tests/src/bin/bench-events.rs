//! `bench-events`: how fast routing events take effect: the apply cost at
//! 1k / 10k / 100k apps and publish-to-routed latency through a real broker.
//!
//! 1. Apply cost: one `add_public_endpoint` for a new app, through the routing state
//!    and the route table (what runs per event besides the disk), at 1k, 10k and 100k
//!    apps; then the same plus the fsynced journal append.
//! 2. Propagation: a release router with 100k apps loaded from its state directory,
//!    fed by a real ActiveMQ (STOMP), or with the argument `rabbitmq` a real
//!    RabbitMQ (AMQP: a topic exchange the router's queue binds to); events
//!    published at a fixed rate; for a sample of them, the time from "publish
//!    sent" to the first 200 through the router for the new host (polled every
//!    millisecond); the router's CPU and RabbitMQ's beside it.
//!
//! 3. `--scrape [--apps N] [--max-apps M]`: the size and render time of
//!    `/metrics` with N apps (100 000), each with traffic, M (1 000) exported.
//!
//! 4. `--replay N [--apps A] [--prefetch P]`: the router's own CPU per routing
//!    event end to end, no broker in the figure: a release router with A (100 000)
//!    apps loaded connects to a STOMP peer of this program's (CONNECTED, RECEIPT,
//!    then N `add_public_endpoint` MESSAGE frames, at most P (256, the router's
//!    default `spi.stomp.prefetch`) unacknowledged), which
//!    counts the router's ACKs (sent once an event is journaled and live); the
//!    router's CPU (utime + stime) from the first frame to the last ACK, per event;
//!    `--perf`: with a call-graph profile of the router meanwhile (`perf-replay.data`).
//!
//! Run with `bash bench/events.sh` (release build). Prints a Markdown report.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use e2e::activemq::ActiveMq;
use e2e::{Backend, events};
use router::members::{MemberRegistry, MemberRegistryConfig};
use router::metrics::Metrics;
use router::table::{Builder, Naming, RouteTable};
use router::upstream::PoolSettings;
use spi_consumer::apply::{Applied, RoutingState};
use spi_consumer::decode::{Decoded, RoutingEvent, decode};
use spi_consumer::source::stomp::StompSession;
use spi_consumer::{AppKey, Store};

/// The router's allocator, so that the apply cost is the router's.
#[global_allocator]
static ALLOCATOR: heap::Allocator = heap::Allocator;

const QUEUE: &str = "/queue/routinginfo.bench";

fn event(i: usize, addr: std::net::SocketAddr) -> RoutingEvent {
    match decode(events::add_lb(&format!("app{i}"), "bench", addr).as_bytes()) {
        Ok(Decoded::Event(e)) => e,
        other => panic!("bad synthetic event: {other:?}"),
    }
}

fn builder() -> (Builder, Arc<ArcSwap<RouteTable>>) {
    builder_with(Metrics::new().expect("metrics"))
}

fn builder_with(metrics: Metrics) -> (Builder, Arc<ArcSwap<RouteTable>>) {
    let registry = MemberRegistry::new(MemberRegistryConfig {
        max_in_flight: 100,
        max_per_source: 100,
        reserve_percent: 10,
        pool: PoolSettings {
            max_idle: 4,
            workers: 1,
            idle_timeout: Duration::from_secs(8),
            opened: metrics.upstream_connections.clone(),
        },
        health: router::members::health::HealthSettings::default(),
        metrics: metrics.health.clone(),
        rotate: router::members::rotate::RotateStore::in_memory(),
        // No checkers: this measures the apply path only.
        checkers: None,
    });
    let live = Arc::new(ArcSwap::from_pointee(RouteTable::default()));
    let naming = Naming {
        cloud_domain: "example.com".into(),
        ha_prefix: "ha-".into(),
        ha_suffix: String::new(),
        app_dns: true,
        wildcard_aliases: false,
        endpoint_types: vec!["load_balancer".into()],
        balance: router::table::balance::Balance::default(),
        fail_open: true,
        tcp: std::sync::Arc::from([]),
    };
    (
        Builder::new(naming, Arc::new(registry), live.clone(), metrics),
        live,
    )
}

/// A state and table with `n` apps, built without timing.
fn loaded(n: usize, addr: std::net::SocketAddr) -> (RoutingState, RouteTable, Builder) {
    let (b, _) = builder();
    let mut state = RoutingState::new();
    for i in 0..n {
        state.apply(&event(i, addr));
    }
    let all: BTreeSet<AppKey> = state.apps().map(|(k, _)| k.clone()).collect();
    let table = b.update(&RouteTable::default(), &state, &all);
    (state, table, b)
}

/// `--scrape`: the size and time of `/metrics` with `n` apps, every one of them
/// with traffic, `max_apps` of them exported (the rest in `app="_other"`).
fn scrape_cost(n: usize, max_apps: usize) {
    let addr: std::net::SocketAddr = "10.0.0.1:38032".parse().expect("addr");
    let metrics = Metrics::new().expect("metrics");
    metrics
        .app_traffic
        .set_limits(router::metrics::apps::ExportLimits {
            max_apps,
            idle: Duration::from_secs(600),
        });
    let (b, _) = builder_with(metrics.clone());
    let mut state = RoutingState::new();
    for i in 0..n {
        state.apply(&event(i, addr));
    }
    let all: BTreeSet<AppKey> = state.apps().map(|(k, _)| k.clone()).collect();
    let table = b.update(&RouteTable::default(), &state, &all);
    for (i, r) in table.routes().enumerate() {
        for _ in 0..=(i % 5) {
            r.traffic
                .record(200, Duration::from_millis(1 + (i % 300) as u64), 100, 1000);
        }
    }
    let mut runs = Vec::new();
    let mut size = 0;
    for _ in 0..7 {
        let t = Instant::now();
        let text = metrics.render();
        runs.push(t.elapsed().as_secs_f64() * 1e3);
        size = text.len();
        let labels = text
            .lines()
            .filter(|l| l.starts_with("router_app_requests_total{"))
            .count();
        assert!(labels <= (max_apps + 1) * 5, "bounded: {labels}");
    }
    runs.sort_by(f64::total_cmp);
    let (placed, folded) = metrics.app_traffic.placed();
    println!("## /metrics with {n} apps, metrics.max_apps = {max_apps}\n");
    println!(
        "| apps exported / in _other | exposition bytes | render ms (median of 7; min, max) |"
    );
    println!("|---|---|---|");
    println!(
        "| {placed} / {folded} | {size} | {:.1} ({:.1}, {:.1}) |\n",
        runs[3], runs[0], runs[6]
    );
}

fn apply_cost(sizes: &[usize]) {
    let addr: std::net::SocketAddr = "10.0.0.1:38032".parse().expect("addr");
    println!("## Apply cost per event\n");
    println!(
        "| apps loaded | state + table, µs/event (median of 5 × 2000) | + fsynced journal append, µs/event (200 events) |"
    );
    println!("|---|---|---|");
    for &n in sizes {
        let (mut state, mut table, b) = loaded(n, addr);
        let mut next = n;
        let mut runs = Vec::new();
        for _ in 0..5 {
            let evs: Vec<RoutingEvent> = (0..2000).map(|k| event(next + k, addr)).collect();
            next += 2000;
            let t = Instant::now();
            for e in &evs {
                if let Applied::Changed(k) = state.apply(e) {
                    table = b.update(&table, &state, &BTreeSet::from([k]));
                }
            }
            runs.push(t.elapsed().as_secs_f64() * 1e6 / evs.len() as f64);
        }
        runs.sort_by(f64::total_cmp);
        let dir = e2e::tempdir("bench-store");
        let mut store = Store::open(&dir).expect("store");
        store.compact(&state).expect("snapshot");
        let evs: Vec<RoutingEvent> = (0..200).map(|k| event(next + k, addr)).collect();
        let t = Instant::now();
        for e in &evs {
            if let Applied::Changed(k) = state.apply(e) {
                let changed = BTreeSet::from([k]);
                store.save(&state, &changed).expect("save");
                table = b.update(&table, &state, &changed);
            }
        }
        let with_disk = t.elapsed().as_secs_f64() * 1e6 / evs.len() as f64;
        let _ = std::fs::remove_dir_all(dir);
        println!("| {n} | {:.1} | {:.1} |", runs[2], with_disk);
        assert!(table.app_count() > n);
    }
    println!();
}

/// The broker of the propagation phase (`--broker activemq|rabbitmq`) and how
/// the bench publishes to it.
enum Broker {
    ActiveMq(ActiveMq),
    RabbitMq(e2e::rabbitmq::RabbitMq),
}

enum Publisher {
    Stomp(StompSession),
    Amqp {
        /// Kept: dropping the connection would close the channel.
        _conn: lapin::Connection,
        channel: lapin::Channel,
    },
}

impl Broker {
    fn start() -> Broker {
        match std::env::args().any(|a| a == "rabbitmq") {
            true => Broker::RabbitMq(e2e::rabbitmq::RabbitMq::start()),
            false => Broker::ActiveMq(ActiveMq::start()),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Broker::ActiveMq(_) => "ActiveMQ",
            Broker::RabbitMq(_) => "RabbitMQ",
        }
    }

    /// The router's `spi:` section for this broker.
    fn spi(&self, prefetch: u32) -> String {
        match self {
            Broker::ActiveMq(amq) => format!(
                "spi:\n  source: stomp\n  stomp:\n    hosts: [\"{}\"]\n    destination: {QUEUE}\n    prefetch: {prefetch}\n",
                amq.stomp
            ),
            Broker::RabbitMq(rmq) => format!(
                "spi:\n  source: amqp\n  amqp:\n    uris: [\"{}\"]\n    queue: routinginfo.bench\n    exchange: routinginfo\n",
                rmq.uri()
            ),
        }
    }

    /// Connects the bench's publisher; on RabbitMQ also declares the exchange
    /// the router's queue binds to (before the router starts: call first).
    async fn publisher(&self) -> Publisher {
        match self {
            Broker::ActiveMq(amq) => Publisher::Stomp(
                StompSession::connect(&amq.session_config("/queue/bench.publisher"), 0)
                    .await
                    .expect("publisher"),
            ),
            Broker::RabbitMq(rmq) => {
                // The port opens a moment before the node accepts logins.
                let deadline = Instant::now() + Duration::from_secs(60);
                let conn = loop {
                    let props = lapin::ConnectionProperties::default();
                    match lapin::Connection::connect(&rmq.uri(), props).await {
                        Ok(c) => break c,
                        Err(e) => assert!(Instant::now() < deadline, "AMQP publisher: {e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                };
                let ch = conn.create_channel().await.expect("channel");
                let options = lapin::options::ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                };
                let (kind, args) = (
                    lapin::ExchangeKind::Topic,
                    lapin::types::FieldTable::default(),
                );
                ch.exchange_declare("routinginfo".into(), kind, options, args)
                    .await
                    .expect("exchange");
                Publisher::Amqp {
                    _conn: conn,
                    channel: ch,
                }
            }
        }
    }

    /// The broker's CPU so far (utime + stime of its processes), to print beside the router's.
    fn cpu_ticks(&self) -> u64 {
        let Broker::RabbitMq(rmq) = self else {
            return 0;
        };
        let pid = std::fs::read_to_string(rmq.base.join("rabbit.pid")).unwrap_or_default();
        router_ticks(pid.trim())
    }
}

impl Publisher {
    /// Fire and forget (persistent), like the broker's routing plugin.
    async fn send(&mut self, body: String) {
        match self {
            Publisher::Stomp(s) => s.send(QUEUE, body).await.expect("publish"),
            Publisher::Amqp { channel: ch, .. } => {
                let props = lapin::BasicProperties::default().with_delivery_mode(2);
                let options = lapin::options::BasicPublishOptions::default();
                let key = "routinginfo.bench";
                ch.basic_publish(
                    "routinginfo".into(),
                    key.into(),
                    options,
                    body.as_bytes(),
                    props,
                )
                .await
                .expect("publish");
            }
        }
    }
}

async fn propagation(preload: usize, rate: u32, seconds: u32, sample_every: usize) {
    let broker = Broker::start();
    // `--prefetch N`: messages the broker sends ahead of acknowledgements.
    let prefetch = arg("--prefetch").unwrap_or(100);
    let backend = Backend::start().await;
    let mut publisher = broker.publisher().await;
    let root = e2e::tempdir("bench-prop");
    // The routes a long-running router would have: a snapshot with `preload` apps.
    {
        let (state, _, _) = loaded(preload, backend.addr);
        let mut store = Store::open(root.join("state")).expect("store");
        store.compact(&state).expect("snapshot");
    }
    let cfg = root.join("router.yaml");
    std::fs::write(
        &cfg,
        format!(
            "cloud_domain: example.com\nstate_dir: {}/state\nlisten:\n  http: 127.0.0.1:0\n  admin: 127.0.0.1:0\n\
             {}access_log:\n  enabled: false\n  format: json\n",
            root.display(),
            broker.spi(prefetch)
        ),
    )
    .expect("config");
    let started = Instant::now();
    let router = e2e::process::RouterProcess::start(&cfg).await;
    let first = format!("ha-app{}-bench.example.com", preload - 1);
    assert_eq!(
        router.status(&first, "/").await,
        Some(200),
        "preloaded routes served"
    );
    let ready = started.elapsed();

    // Subscribed first: an AMQP exchange drops what no bound queue takes.
    wait_connected(&router).await;
    let (router_cpu, broker_cpu) = (router_ticks(&router.pid()), broker.cpu_ticks());
    let total = (rate * seconds) as usize;
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
    let mut pollers = Vec::new();
    let t0 = Instant::now();
    for i in 0..total {
        tick.tick().await;
        let id = preload + i;
        let sent = Instant::now();
        if i % sample_every == 0 {
            let http = router.http;
            let host = format!("ha-app{id}-bench.example.com");
            pollers.push(tokio::spawn(async move {
                let deadline = sent + Duration::from_secs(30);
                loop {
                    let resp = e2e::raw::exchange(
                        http,
                        format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                            .as_bytes(),
                        Duration::from_secs(5),
                    )
                    .await;
                    if e2e::raw::status(&resp) == Some(200) {
                        return Some(sent.elapsed());
                    }
                    if Instant::now() > deadline {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
        publisher
            .send(events::add_lb(&format!("app{id}"), "bench", backend.addr))
            .await;
    }
    let offered = total as f64 / t0.elapsed().as_secs_f64();
    let mut lat: Vec<Duration> = Vec::new();
    let mut lost = 0;
    for p in pollers {
        match p.await.expect("poller") {
            Some(d) => lat.push(d),
            None => lost += 1,
        }
    }
    lat.sort();
    let pct = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1000.0;
    let hz = 100.0; // USER_HZ
    let router_cpu = (router_ticks(&router.pid()) - router_cpu) as f64 / hz;
    let broker_cpu = broker.cpu_ticks().saturating_sub(broker_cpu) as f64 / hz;
    println!(
        "## Propagation through {}, {preload} apps loaded\n",
        broker.name()
    );
    println!(
        "CPU from the first event to the last route (the router's includes the pollers' requests): router {router_cpu:.2} s, broker {broker_cpu:.2} s \
         (RabbitMQ's Erlang node; ActiveMQ's is not counted)\n"
    );
    println!(
        "Router (release, `worker_threads: 0`) started from a {preload}-app snapshot and served \
         its first request {:.2} s after exec. {total} `add_public_endpoint` events published \
         (persistent, no receipt, like the broker's plugin) at {offered:.0}/s; every {sample_every}th timed from \
         \"publish sent\" to the first 200 through the router (1 ms polling, new connection \
         per poll).\n",
        ready.as_secs_f64()
    );
    println!("| samples | p50 ms | p90 ms | p99 ms | max ms | never routed |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {lost} |\n",
        lat.len(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    // The router's own view: message received -> change durable and live.
    if let Some(admin) = router.admin {
        let text = e2e::raw::exchange(
            admin,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .await;
        let text = String::from_utf8_lossy(&text);
        let bucket = |le: &str| -> f64 {
            text.lines()
                .find_map(|l| {
                    l.strip_prefix(&format!(
                        "spi_route_propagation_seconds_bucket{{le=\"{le}\"}} "
                    ))
                    .and_then(|v| v.trim().parse().ok())
                })
                .unwrap_or(0.0)
        };
        let all = bucket("+Inf").max(1.0);
        println!(
            "Router side (`spi_route_propagation_seconds`, received → durable and live, {all} events): \
             ≤ 1 ms {:.1} %, ≤ 2 ms {:.1} %, ≤ 5 ms {:.1} %, ≤ 10 ms {:.1} %, ≤ 50 ms {:.1} %.\n",
            100.0 * bucket("0.001") / all,
            100.0 * bucket("0.002") / all,
            100.0 * bucket("0.005") / all,
            100.0 * bucket("0.01") / all,
            100.0 * bucket("0.05") / all,
        );
    }
    router.signal("TERM");
}

/// Waits until the router says it is subscribed (`spi_broker_connected 1`).
async fn wait_connected(router: &e2e::process::RouterProcess) {
    let Some(admin) = router.admin else { return };
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let text = e2e::raw::exchange(
            admin,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .await;
        if String::from_utf8_lossy(&text)
            .lines()
            .any(|l| l == "spi_broker_connected 1")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the router did not subscribe within 120 s");
}

/// `--replay`: see the module's doc (4).
async fn replay(preload: usize, n: usize, window: usize) {
    use futures_util::SinkExt;
    use spi_consumer::source::stomp::{Codec, Command, Frame, Item, Limits};
    let backend = Backend::start().await;
    let root = e2e::tempdir("bench-replay");
    {
        let (state, _, _) = loaded(preload, backend.addr);
        let mut store = Store::open(root.join("state")).expect("store");
        store.compact(&state).expect("snapshot");
    }
    let peer = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = peer.local_addr().expect("addr").port();
    let cfg = root.join("router.yaml");
    std::fs::write(
        &cfg,
        format!(
            "cloud_domain: example.com\nstate_dir: {}/state\nlisten:\n  http: 127.0.0.1:0\n  admin: 127.0.0.1:0\n\
             spi:\n  source: stomp\n  stomp:\n    hosts: [\"127.0.0.1:{port}\"]\n    destination: {QUEUE}\n    prefetch: {window}\n\
             health:\n  checks: false\naccess_log:\n  enabled: false\n  format: json\n",
            root.display(),
        ),
    )
    .expect("config");
    let router = e2e::process::RouterProcess::start(&cfg).await;
    let (stream, _) = peer.accept().await.expect("the router connects");
    let mut wire = tokio_util::codec::Framed::new(stream, Codec::new(Limits::default()));
    let _connect = next_frame(&mut wire).await;
    let connected = Frame::new(Command::Connected)
        .header("version", "1.2")
        .header("heart-beat", "0,0");
    wire.send(Item::Frame(connected)).await.expect("CONNECTED");
    let subscribe = next_frame(&mut wire).await;
    let sub_id = subscribe.get("id").unwrap_or("0").to_string();
    if let Some(r) = subscribe.get("receipt") {
        let receipt = Frame::new(Command::Receipt).header("receipt-id", r);
        wire.send(Item::Frame(receipt)).await.expect("RECEIPT");
    }
    let bodies: Vec<String> = (0..n)
        .map(|i| events::add_lb(&format!("app{}", preload + i), "bench", backend.addr))
        .collect();
    let pid = router.pid();
    // `--perf`: a call-graph profile of the router over the replay (perf.data).
    let perf = std::env::args().any(|a| a == "--perf").then(|| {
        std::process::Command::new("perf")
            .args([
                "record",
                "--call-graph",
                "dwarf,16384",
                "-F",
                "2000",
                "-o",
                "perf-replay.data",
                "-p",
                &pid,
            ])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("perf")
    });
    if perf.is_some() {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (ticks0, t0) = (router_ticks(&pid), Instant::now());
    let (mut sent, mut acked) = (0, 0);
    while acked < n {
        while sent < n && sent - acked < window {
            let m = Frame::new(Command::Message)
                .header("destination", QUEUE)
                .header("subscription", sub_id.clone())
                .header("message-id", sent.to_string())
                .header("ack", sent.to_string())
                .body(bodies[sent].clone());
            wire.feed(Item::Frame(m)).await.expect("MESSAGE");
            sent += 1;
        }
        wire.flush().await.expect("flush");
        let f = next_frame(&mut wire).await;
        assert_eq!(
            f.command,
            Command::Ack,
            "the router answers with ACKs: {f:?}"
        );
        // Cumulative (`ack: client`): this message and every one before it.
        let id: usize = f
            .get("id")
            .and_then(|id| id.parse().ok())
            .expect("an ACK names the message it answers for");
        assert!(
            id >= acked && id < sent,
            "ACK {id} out of order ({acked} acknowledged, {sent} sent)"
        );
        acked = id + 1;
    }
    let cpu = (router_ticks(&pid) - ticks0) as f64 / 100.0;
    let wall = t0.elapsed().as_secs_f64();
    if let Some(p) = perf {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &p.id().to_string()])
            .status();
        let _ = p.wait_with_output();
    }
    let last = format!("ha-app{}-bench.example.com", preload + n - 1);
    assert_eq!(
        router.status(&last, "/").await,
        Some(200),
        "the last event is live"
    );
    println!("## Routing events end to end, no broker: {n} events, {preload} apps loaded\n");
    println!(
        "| events | acknowledged in | events/s | router CPU (utime+stime) | µs per event |\n|---|---|---|---|---|\n\
         | {n} | {wall:.2} s | {:.0} | {cpu:.2} s | **{:.1}** |\n",
        n as f64 / wall,
        cpu * 1e6 / n as f64
    );
    router.signal("TERM");
}

/// The next frame the router sends (heart-beats skipped).
async fn next_frame(
    wire: &mut tokio_util::codec::Framed<tokio::net::TcpStream, spi_consumer::source::stomp::Codec>,
) -> spi_consumer::source::stomp::Frame {
    use futures_util::StreamExt;
    use spi_consumer::source::stomp::Item;
    loop {
        match wire
            .next()
            .await
            .expect("the router stays")
            .expect("a frame")
        {
            Item::Frame(f) => return f,
            Item::HeartBeat => {}
        }
    }
}

/// utime + stime of a process, in clock ticks (100 a second here).
fn router_ticks(pid: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// The value after `flag` on the command line, if given and a number.
/// CPU time of this process so far (every thread: the publish may use more than one).
fn cpu_now() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The router's CPU per applied event with no broker: message bodies through the
/// real `Consumer` (decode, apply, the fsynced journal, the table publish) in
/// batches of `batch`, as a source's group commit hands them over, at each size.
fn consume_cost(sizes: &[usize], batch: usize, batches: usize) {
    let addr: std::net::SocketAddr = "10.0.0.1:38032".parse().expect("addr");
    println!("## CPU per applied event, no broker (batches of {batch})\n");
    println!(
        "| apps loaded | events | CPU µs/event | of which decode + apply | of which journal + publish | wall µs/event |"
    );
    println!("|---|---|---|---|---|---|");
    let mut loads = Vec::new();
    let mut lookups = Vec::new();
    for &n in sizes {
        let dir = e2e::tempdir("bench-consume");
        let mut state = RoutingState::new();
        for i in 0..n {
            state.apply(&event(i, addr));
        }
        Store::open(&dir)
            .expect("store")
            .compact(&state)
            .expect("snapshot");
        drop(state);
        let (b, live) = builder();
        let registry = prometheus::Registry::new();
        let metrics = spi_consumer::metrics::Metrics::new(&registry).expect("metrics");
        let mut consumer =
            spi_consumer::Consumer::start(Store::open(&dir).expect("store"), b, metrics)
                .expect("consumer");
        let bodies: Vec<Vec<u8>> = (0..batch * batches)
            .map(|k| events::add_lb(&format!("app{}", n + k), "bench", addr).into_bytes())
            .collect();
        let (cpu, wall) = (cpu_now(), Instant::now());
        let mut applying = Duration::ZERO;
        for chunk in bodies.chunks(batch) {
            let start = cpu_now();
            for body in chunk {
                let d = consumer.handle(body);
                assert_eq!(d, spi_consumer::Disposition::Applied);
            }
            applying += cpu_now() - start;
            consumer.commit().expect("commit");
        }
        let (cpu, wall) = (cpu_now() - cpu, wall.elapsed());
        let per = |d: Duration| d.as_secs_f64() * 1e6 / bodies.len() as f64;
        println!(
            "| {n} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            bodies.len(),
            per(cpu),
            per(applying),
            per(cpu - applying),
            per(wall)
        );
        assert_eq!(live.load().app_count(), n + bodies.len());
        lookups.push(lookup_cost(&live.load(), n + bodies.len()));
        drop(consumer);
        // What a restart reads: the snapshot and the journal since (compaction
        // waits for as many journal lines as the state has apps).
        let journal = std::fs::read(dir.join("journal.jsonl"))
            .map_or(0, |j| j.iter().filter(|&&b| b == b'\n').count());
        let t = Instant::now();
        let state = Store::open(&dir).expect("store").load().expect("load");
        loads.push(format!(
            "{} apps with {journal} journal lines: {:.2} s",
            state.len(),
            t.elapsed().as_secs_f64()
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
    println!(
        "\nThe state loaded again at the end (a restart): {}.\n",
        loads.join("; ")
    );
    println!(
        "The request path's lookup of an app's HA name (CPU per lookup, names spread over the table): {}.\n",
        lookups.join("; ")
    );
}

/// CPU per `RouteTable::lookup` of HA names spread over a table of `apps` apps.
fn lookup_cost(table: &RouteTable, apps: usize) -> String {
    let hosts: Vec<String> = (0..4096)
        .map(|k| format!("ha-app{}-bench.example.com", (k * 7919) % apps))
        .collect();
    let rounds = 50;
    let cpu = cpu_now();
    for _ in 0..rounds {
        for host in &hosts {
            assert!(std::hint::black_box(table.lookup(host)).is_some(), "{host}");
        }
    }
    let per = (cpu_now() - cpu).as_secs_f64() * 1e9 / (rounds * hosts.len()) as f64;
    format!("{apps} apps: {per:.0} ns")
}

fn arg(flag: &str) -> Option<u32> {
    let args: Vec<String> = std::env::args().collect();
    let at = args.iter().position(|a| a == flag)?;
    args.get(at + 1)?.parse().ok()
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `--rate N`: events per second for the propagation phase (the target is
    // 10 000/s sustained: a platform's busiest bursts); `--only-propagation` skips the apply-cost table.
    let rate = arg("--rate");
    let seconds = arg("--seconds").unwrap_or(10);
    let only = std::env::args().any(|a| a == "--only-propagation");
    // `--consume`: only the broker-free CPU per applied event (`--batch N`,
    // `--events N`, `--apps N` for one size: for a profile of the applying part).
    if std::env::args().any(|a| a == "--scrape") {
        let apps = arg("--apps").unwrap_or(100_000) as usize;
        let max = arg("--max-apps").unwrap_or(1_000) as usize;
        scrape_cost(apps, max);
        return;
    }
    if let Some(n) = arg("--replay") {
        let apps = arg("--apps").unwrap_or(100_000) as usize;
        // The router's own default (256) unless `--prefetch` says otherwise.
        replay(apps, n as usize, arg("--prefetch").unwrap_or(256) as usize).await;
        return;
    }
    if std::env::args().any(|a| a == "--consume") {
        let batch = (arg("--batch").unwrap_or(256) as usize).max(1);
        let events = arg("--events").unwrap_or(5_120) as usize;
        let sizes = match arg("--apps") {
            Some(n) => vec![n as usize],
            None => vec![1_000, 10_000, 100_000],
        };
        consume_cost(&sizes, batch, events.div_ceil(batch));
        return;
    }
    if quick {
        apply_cost(&[1_000, 10_000]);
        propagation(10_000, rate.unwrap_or(200), 3, 10).await;
    } else {
        if !only {
            apply_cost(&[1_000, 10_000, 100_000]);
        }
        let rate = rate.unwrap_or(1_000);
        // About 500 timed samples whatever the rate (`--samples N`: fewer pollers,
        // whose new connection per millisecond otherwise competes with the events).
        let samples = arg("--samples").unwrap_or(500) as usize;
        let every = ((rate * seconds) as usize / samples.max(1)).max(1);
        propagation(100_000, rate, seconds, every).await;
    }
}
