//! TCP balancing on external ports (`tcp.listen`): real sockets
//! both sides, members that speak first (as MySQL does), byte-exact relays,
//! half-close, a member killed mid-test, and the PROXY protocol towards members.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2e::router::TestRouter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A member that greets first (`hello from NAME` and, when the connection opened
/// with a PROXY v2 header, ` for CLIENT`), echoes every byte, and after the
/// client's half-close says `bye N` (N bytes echoed) and closes.
struct Member {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Member {
    async fn start(name: &'static str) -> Member {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                conns.spawn(serve(s, name));
            }
        });
        Member {
            addr,
            accepted,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Member {
    /// Like a gear that died: the listener and every connection go.
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut s: TcpStream, name: &'static str) {
    // A PROXY v2 header, if the router sends one, comes before anything else.
    let mut first = vec![0u8; 1024];
    let mut client = String::new();
    let mut pending = Vec::new();
    if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(150), s.read(&mut first)).await {
        let got = &first[..n];
        match ppp::v2::Header::try_from(got) {
            Ok(h) => {
                if let ppp::v2::Addresses::IPv4(a) = h.addresses {
                    client = format!(" for {}:{}", a.source_address, a.source_port);
                }
                pending.extend_from_slice(&got[h.len()..]);
            }
            Err(_) => pending.extend_from_slice(got),
        }
    }
    if s.write_all(format!("hello from {name}{client}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    let mut echoed = pending.len();
    if s.write_all(&pending).await.is_err() {
        return;
    }
    let mut buf = vec![0u8; 16384];
    loop {
        match s.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                echoed += n;
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
    let _ = s.write_all(format!("bye {echoed}\n").as_bytes()).await;
}

/// Connects, reads the greeting, sends `payload`, half-closes, and reads to the end;
/// returns the greeting and everything after it.
async fn exchange(addr: SocketAddr, payload: &[u8]) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let mut greeting = Vec::new();
    let mut one = [0u8; 1];
    while !greeting.ends_with(b"\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut one))
            .await
            .expect("a greeting in time")
            .expect("read");
        assert!(n > 0, "closed before the greeting");
        greeting.push(one[0]);
    }
    let (mut r, mut w) = s.into_split();
    let payload = payload.to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&payload).await.expect("write");
        w.shutdown().await.expect("half-close");
        w
    });
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), r.read_to_end(&mut rest))
        .await
        .expect("the member's answer in time")
        .expect("read");
    drop(writer.await);
    (String::from_utf8_lossy(&greeting).into_owned(), rest)
}

fn database(app: &str, addr: SocketAddr) -> String {
    e2e::events::add_endpoint(app, "demo", addr, "database", "mysql-5.5")
        .replace(":protocols:\n- http\n- ws\n", ":protocols:\n- mysql\n")
        .replace(
            "5464c9f6e0b8cd5a6e000001",
            &format!("5464c9f6e0b8cd5a6e{:06}", addr.port()),
        )
}

#[tokio::test]
async fn tcp_ports_relay_byte_exact_to_the_apps_members() {
    let (m1, m2) = (Member::start("m1").await, Member::start("m2").await);
    // Round robin: six connections in a row reach both members, whatever the dice.
    let r = TestRouter::start(
        "upstream:\n  balance: round_robin\ntcp:\n  listen:\n\
         \x20   - address: 127.0.0.1:0\n      app: db\n      namespace: demo\n      cartridge: mysql-5.5\n\
         \x20   - address: 127.0.0.1:0\n      app: DB\n      namespace: demo\n      endpoint: mysql\n      proxy_protocol: v2\n",
    )
    .await;
    assert_eq!(r.tcp.len(), 2);
    r.drop_event("01.yaml", &database("db", m1.addr));
    r.drop_event("02.yaml", &database("db", m2.addr));
    r.wait_spool_empty().await;
    // New members take connections once their first check passed.
    r.wait_health(m1.addr, "up").await;
    r.wait_health(m2.addr, "up").await;

    // Byte-exact both ways, server speaks first, half-close passed on.
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..6 {
        let (greeting, rest) = exchange(r.tcp[0], &payload).await;
        assert!(greeting.starts_with("hello from m"), "{greeting}");
        seen.insert(greeting.clone());
        let tail = format!("bye {}\n", payload.len());
        assert_eq!(rest.len(), payload.len() + tail.len());
        assert!(rest[..payload.len()] == payload[..], "echo is byte-exact");
        assert_eq!(
            &rest[payload.len()..],
            tail.as_bytes(),
            "the answer after our half-close"
        );
    }
    assert_eq!(seen.len(), 2, "balanced over both members: {seen:?}");

    // The second port adds a PROXY v2 header: the member sees the client's address.
    let mut s = TcpStream::connect(r.tcp[1]).await.expect("connect");
    let local = s.local_addr().expect("local");
    let mut line = vec![0u8; 128];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut line))
        .await
        .expect("greeting")
        .expect("read");
    let greeting = String::from_utf8_lossy(&line[..n]).into_owned();
    assert!(greeting.ends_with(&format!(" for {local}\n")), "{greeting}");

    // One member killed mid-test: nothing was sent to it, so the next go to the other
    // (the greeting says which; the members' accept counts also see health checks).
    drop(m1);
    for _ in 0..4 {
        let (greeting, rest) = exchange(r.tcp[0], b"ping").await;
        assert!(greeting.starts_with("hello from m2"), "{greeting}");
        assert_eq!(rest, b"pingbye 4\n");
    }
    assert!(m2.accepted() >= 4);
    let relayed = format!(
        "router_tcp_connections_total{{listener=\"{}\",result=\"relayed\"}}",
        r.tcp[0]
    );
    e2e::eventually("10 relays counted", Duration::from_secs(5), async || {
        r.metric(&relayed).await == Some(10.0)
    })
    .await;
}

/// A port whose rule matches no endpoint (yet), and a bad rule refused at start.
#[tokio::test]
async fn a_port_without_members_closes_and_a_rule_without_a_match_is_refused() {
    let r = TestRouter::start(
        "tcp:\n  listen:\n    - address: 127.0.0.1:0\n      app: nothing\n      namespace: demo\n      endpoint: tcp\n",
    )
    .await;
    let mut s = TcpStream::connect(r.tcp[0]).await.expect("connect");
    let mut buf = [0u8; 8];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("closed at once")
        .unwrap_or(0);
    assert_eq!(n, 0, "no member: closed without a byte");
    let counted = format!(
        "router_tcp_connections_total{{listener=\"{}\",result=\"no_member\"}}",
        r.tcp[0]
    );
    e2e::eventually("counted", Duration::from_secs(5), async || {
        r.metric(&counted).await == Some(1.0)
    })
    .await;

    let yaml = "cloud_domain: example.com\nstate_dir: /tmp/x\nlisten:\n  http: 127.0.0.1:0\n\
                tcp:\n  listen:\n    - address: 127.0.0.1:0\n      app: a\n      namespace: b\n";
    let err = router::config::Config::parse(yaml, "router.yaml").expect_err("refused");
    let text = err.to_string();
    assert!(
        text.contains("router.yaml:") && text.contains("tcp.listen"),
        "{text}"
    );
}

/// Reads a greeting line from a relayed connection; `None` if the router closed it.
async fn greeting(s: &mut TcpStream) -> Option<String> {
    let mut line = vec![0u8; 128];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut line))
        .await
        .ok()?
        .ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&line[..n]).into_owned())
}

/// A `tcp.listen` port takes at most a quarter of `limits.max_connections` from one
/// client source (here 8: 2 each): the third connection from 127.0.0.1 is closed at
/// once and counted, one from 127.0.0.2 is relayed.
#[tokio::test]
async fn a_tcp_port_caps_connections_per_client_source() {
    let m = Member::start("m").await;
    let r = TestRouter::start(
        "limits:\n  max_connections: 8\ntcp:\n  listen:\n\
         \x20   - address: 127.0.0.1:0\n      app: db\n      namespace: demo\n      cartridge: mysql-5.5\n",
    )
    .await;
    r.drop_event("01.yaml", &database("db", m.addr));
    r.wait_spool_empty().await;
    r.wait_health(m.addr, "up").await;
    let port = r.tcp[0];
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(port).await.expect("connect");
        assert!(
            greeting(&mut s)
                .await
                .is_some_and(|g| g.starts_with("hello from m"))
        );
        held.push(s);
    }
    let mut third = TcpStream::connect(port).await.expect("connect");
    assert_eq!(greeting(&mut third).await, None, "closed at once");
    let sample =
        format!("router_tcp_connections_total{{listener=\"{port}\",result=\"source_limit\"}}");
    assert_eq!(r.metric(&sample).await, Some(1.0));
    let mut other = e2e::portproxy::connect_from("127.0.0.2".parse().expect("ip"), port)
        .await
        .expect("connect from 127.0.0.2");
    assert!(
        greeting(&mut other)
            .await
            .is_some_and(|g| g.starts_with("hello from m"))
    );
    drop(held);
}
