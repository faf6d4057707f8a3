//! portproxy gear mode (OpenShift) and the relay, through the real binary and CLI over
//! real sockets: the verbs and exit codes, durability across a restart, draining,
//! byte-exact relay both ways, half-close, server-speaks-first, limits, shutdown.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use e2e::portproxy::{
    PortProxy, banner_echo, cli, echo, free_port, recorder, send_and_read, tcp_server,
};
use e2e::{eventually, tempdir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

fn gear_yaml(extra: &str) -> String {
    format!("gear:\n  bind: 127.0.0.1\n  ports: 1024-65535\n  drain_grace: 2s\n{extra}")
}

async fn start(extra: &str) -> (PortProxy, std::path::PathBuf) {
    let dir = tempdir("pp-gear");
    let grace = if extra.contains("shutdown_grace") {
        ""
    } else {
        "shutdown_grace: 3s\n"
    };
    (
        PortProxy::start(&dir, &format!("{grace}{}", gear_yaml(extra))).await,
        dir,
    )
}

async fn map(pp: &PortProxy, target: SocketAddr) -> u16 {
    let port = loop {
        let p = free_port(LO);
        if p != target.port() {
            break p;
        }
    };
    let (code, _, err) = pp
        .cli(&["add", &port.to_string(), &target.to_string()])
        .await;
    assert_eq!(code, 0, "add: {err}");
    port
}

#[tokio::test]
async fn cli_verbs_and_exit_codes() {
    let (pp, dir) = start("").await;
    let backend = tcp_server(LO, echo).await;
    let other = tcp_server(LO, echo).await;
    let port = map(&pp, backend).await;
    let p = port.to_string();
    let b = backend.to_string();

    // The mapping works at once.
    let mut s = TcpStream::connect((LO, port)).await.expect("connect");
    assert_eq!(
        send_and_read(&mut s, b"ping", Duration::from_secs(5)).await,
        b"ping"
    );

    // Re-adding the same mapping is a no-op; the port mapped elsewhere is exit 1.
    assert_eq!(pp.cli(&["add", &p, &b]).await.0, 0);
    let (code, _, err) = pp.cli(&["add", &p, &other.to_string()]).await;
    assert_eq!(code, 1, "conflict");
    assert!(
        err.contains(&format!("port {port} is mapped to {backend}")),
        "{err}"
    );
    // Usage errors: exit 2.
    assert_eq!(pp.cli(&["add", &p]).await.0, 2);
    assert_eq!(pp.cli(&["remove"]).await.0, 2);
    assert_eq!(pp.cli(&["frobnicate"]).await.0, 2);
    // Validation errors: exit 1, nothing changed.
    for bad in [
        "127.0.256.1:80",
        "127.0.0:80",
        "10.0.0.1:80",
        "127.0.0.1:0",
        "[::1]:80",
    ] {
        let (code, _, err) = pp.cli(&["add", &free_port(LO).to_string(), bad]).await;
        assert_eq!(code, 1, "{bad}: {err}");
    }
    assert_eq!(pp.cli(&["add", "1000", &b]).await.0, 1, "below the range");
    assert_eq!(pp.cli(&["add", "abc", &b]).await.0, 1);
    let own = free_port(LO).to_string();
    let (code, _, err) = pp.cli(&["add", &own, &format!("127.0.0.1:{own}")]).await;
    assert_eq!(code, 1, "a mapping onto itself");
    assert!(err.contains("would forward to itself"), "{err}");

    // show: `PORT IP:PORT` lines; an unmapped port prints nothing, exit 0.
    let (code, out, _) = pp.cli(&["show"]).await;
    assert_eq!(
        (code, out.as_str()),
        (0, format!("{port} {backend}\n").as_str())
    );
    let (code, out, _) = pp.cli(&["show", &p]).await;
    assert_eq!((code, out), (0, format!("{port} {backend}\n")));
    let (code, out, _) = pp.cli(&["show", &free_port(LO).to_string()]).await;
    assert_eq!((code, out.as_str()), (0, ""));

    // A batch is all or nothing: a conflict in it adds nothing.
    let fresh = free_port(LO);
    let (code, _, _) = pp
        .cli(&["add", &fresh.to_string(), &b, &p, &other.to_string()])
        .await;
    assert_eq!(code, 1);
    assert_eq!(pp.cli(&["show", &fresh.to_string()]).await.1, "");

    // remove: unknown is a no-op; a removed port refuses new connections.
    assert_eq!(pp.cli(&["remove", &free_port(LO).to_string()]).await.0, 0);
    assert_eq!(pp.cli(&["remove", &p]).await.0, 0);
    assert!(
        TcpStream::connect((LO, port)).await.is_err(),
        "removed port still accepts"
    );
    assert_eq!(pp.cli(&["show"]).await.1, "");
    assert_eq!(
        pp.metric("portproxy_mappings{mode=\"gear\"}").await,
        Some(0.0)
    );

    // A daemon that is not there: exit 69.
    let (code, _, err) = cli(&[
        "--socket".into(),
        dir.join("nobody.sock").display().to_string(),
        "show".into(),
    ])
    .await;
    assert_eq!(code, 69, "{err}");
    assert_eq!(pp.stop().await, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn remove_uid_removes_the_gears_block() {
    // A range of exactly one 5-port block: every uid owns it.
    let base = loop {
        let p = free_port(LO);
        if p < 65000 && (1..5).all(|i| std::net::TcpListener::bind((LO, p + i)).is_ok()) {
            break p;
        }
    };
    let dir = tempdir("pp-uid");
    let yaml = format!("gear:\n  bind: 127.0.0.1\n  ports: {base}-{}\n", base + 4);
    let pp = PortProxy::start(&dir, &yaml).await;
    let backend = tcp_server(LO, echo).await;
    for i in [0, 3] {
        let (code, _, err) = pp
            .cli(&["add", &(base + i).to_string(), &backend.to_string()])
            .await;
        assert_eq!(code, 0, "{err}");
    }
    let (code, out, _) = pp.cli(&["remove-uid", "1234"]).await;
    assert_eq!(code, 0);
    assert_eq!(out, format!("{base} {backend}\n{} {backend}\n", base + 3));
    assert_eq!(pp.cli(&["show"]).await.1, "");
    assert_eq!(pp.cli(&["remove-uid", "x"]).await.0, 1);
    pp.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn allocate_prints_the_v2_formulas() {
    let none = "/nonexistent/portproxy.yaml".to_string();
    let run = |uid: &str, host: &str| {
        let args = vec![
            "--config".to_string(),
            none.clone(),
            "allocate".into(),
            "--uid".into(),
            uid.into(),
            "--host-id".into(),
            host.into(),
        ];
        async move { cli(&args).await }
    };
    assert_eq!(
        run("500", "1").await,
        (
            0,
            "ports 35531-35535\naddress 127.0.250.1\n".into(),
            String::new()
        )
    );
    assert_eq!(
        run("6500", "1").await.1,
        "ports 65531-65535\naddress 127.12.178.1\n"
    );
    assert_eq!(
        run("6501", "2").await.1,
        "ports 35531-35535\naddress 127.12.178.130\n"
    );
    assert_eq!(
        run("65536", "1").await.1,
        format!("ports {}\naddress 127.0.0.129\n", {
            let slot = (65536 - 500) % 6001;
            format!("{}-{}", 35531 + slot * 5, 35535 + slot * 5)
        })
    );
    assert_eq!(run("500", "0").await.0, 1);
    assert_eq!(run("500", "128").await.0, 1);
    let (code, _, _) = cli(&["allocate".into(), "--uid".into(), "x".into()]).await;
    assert_eq!(code, 2, "usage");
}

#[tokio::test]
async fn the_table_survives_a_restart_and_removal_drains_open_connections() {
    let (pp, dir) = start("").await;
    let backend = tcp_server(LO, echo).await;
    let port = map(&pp, backend).await;
    // Durable before the answer: the file already holds the mapping.
    let saved = std::fs::read_to_string(dir.join("state/gear-mappings")).expect("state file");
    assert!(saved.contains(&format!("{port} {backend}\n")), "{saved}");

    let pp = pp.restart().await;
    assert_eq!(pp.cli(&["show"]).await.1, format!("{port} {backend}\n"));
    let mut open = TcpStream::connect((LO, port))
        .await
        .expect("restored mapping listens");
    open.write_all(b"one").await.expect("write");
    let mut buf = [0u8; 3];
    open.read_exact(&mut buf).await.expect("echo");

    // Removal: new connections refused, the open one keeps working ...
    assert_eq!(pp.cli(&["remove", &port.to_string()]).await.0, 0);
    assert!(TcpStream::connect((LO, port)).await.is_err());
    open.write_all(b"two").await.expect("write after removal");
    open.read_exact(&mut buf).await.expect("echo after removal");
    assert_eq!(&buf, b"two");
    // ... until the drain grace (2 s) is over.
    let mut rest = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(10), open.read_to_end(&mut rest)).await;
    assert!(r.is_ok(), "drained connection not closed after the grace");
    pp.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn relay_is_byte_exact_both_ways_at_once() {
    let (pp, dir) = start("").await;
    let backend = tcp_server(LO, echo).await;
    let port = map(&pp, backend).await;
    let s = TcpStream::connect((LO, port)).await.expect("connect");
    let (mut r, mut w) = s.into_split();
    // 24 MiB of pseudo-random bytes, written while the echo is read back.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let data: Vec<u8> = (0..24 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        for chunk in sent.chunks(100_003) {
            w.write_all(chunk).await.expect("write");
        }
        w.shutdown().await.expect("shutdown");
    });
    let mut got = Vec::with_capacity(data.len());
    tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut got))
        .await
        .expect("in time")
        .expect("read");
    writer.await.expect("writer");
    assert_eq!(got.len(), data.len());
    assert!(got == data, "relayed bytes differ");
    assert!(
        pp.metric("portproxy_bytes_total{direction=\"up\",mode=\"gear\"}")
            .await
            >= Some(data.len() as f64)
    );
    pp.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn half_close_both_ways_and_server_speaks_first() {
    let (pp, dir) = start("").await;
    // Client half-closes; the server answers after the EOF.
    let answer_after_eof = tcp_server(LO, |mut s: TcpStream| async move {
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got).await;
        let _ = s
            .write_all(format!("got {} bytes", got.len()).as_bytes())
            .await;
    })
    .await;
    let port = map(&pp, answer_after_eof).await;
    let mut s = TcpStream::connect((LO, port)).await.expect("connect");
    assert_eq!(
        send_and_read(&mut s, b"0123456789", Duration::from_secs(5)).await,
        b"got 10 bytes"
    );

    // Server half-closes first; the client's later bytes still reach it.
    let (rec, mut seen) = recorder(LO, b"").await;
    let early_close = tcp_server(LO, move |mut s: TcpStream| async move {
        let _ = s.write_all(b"bye").await;
        let _ = s.shutdown().await;
        let mut fwd = TcpStream::connect(rec).await.expect("recorder");
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got).await;
        let _ = fwd.write_all(&got).await;
    })
    .await;
    let port = map(&pp, early_close).await;
    let mut s = TcpStream::connect((LO, port)).await.expect("connect");
    let mut bye = [0u8; 3];
    s.read_exact(&mut bye).await.expect("bye");
    let mut eof = [0u8; 1];
    assert_eq!(
        s.read(&mut eof).await.expect("eof"),
        0,
        "server's FIN reached the client"
    );
    s.write_all(b"after your FIN")
        .await
        .expect("write after the server's FIN");
    s.shutdown().await.expect("shutdown");
    let got = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .expect("in time")
        .expect("recorded");
    assert_eq!(got, b"after your FIN");

    // Server speaks first: the banner arrives without a client byte.
    let port = map(&pp, tcp_server(LO, banner_echo("220 mail ready\r\n")).await).await;
    let mut s = TcpStream::connect((LO, port)).await.expect("connect");
    let mut banner = [0u8; 16];
    tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut banner))
        .await
        .expect("banner in time")
        .expect("read");
    assert_eq!(&banner, b"220 mail ready\r\n");
    pp.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn limits_connect_failures_idle_and_proxy_header_to_gears() {
    let (pp, dir) =
        // The source's own cap above the node's: the third client meets the node's
        // (the source cap is checked first, and would count it as `source_limit`).
        start("limits:\n  max_connections: 2\n  max_connections_per_source: 3\n  idle_timeout: 1s\n  connect_timeout: 2s\n").await;
    let backend = tcp_server(LO, echo).await;
    let port = map(&pp, backend).await;
    let mut a = TcpStream::connect((LO, port)).await.expect("a");
    let mut b = TcpStream::connect((LO, port)).await.expect("b");
    a.write_all(b"x").await.expect("a");
    b.write_all(b"x").await.expect("b");
    let mut one = [0u8; 1];
    a.read_exact(&mut one).await.expect("a echo");
    b.read_exact(&mut one).await.expect("b echo");
    // The third is closed at once.
    let mut c = TcpStream::connect((LO, port))
        .await
        .expect("c connects (kernel)");
    let mut buf = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut buf))
        .await
        .expect("closed in time");
    assert!(r.is_ok() && buf.is_empty());
    assert_eq!(
        pp.metric("portproxy_rejected_total{reason=\"max_connections\"}")
            .await,
        Some(1.0)
    );
    // Silence: both are closed by the idle timeout (1 s), and the slots come back.
    for s in [&mut a, &mut b] {
        let mut rest = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
            .await
            .expect("idle close")
            .expect("read");
    }
    assert_eq!(
        pp.metric("portproxy_idle_timeouts_total{mode=\"gear\"}")
            .await,
        Some(2.0)
    );
    eventually("slots back", Duration::from_secs(5), async || {
        pp.metric("portproxy_connections_open{mode=\"gear\"}").await == Some(0.0)
    })
    .await;

    // A gear that is not listening: the client gets a reset, the failure is counted.
    let dead = SocketAddr::new(LO, free_port(LO));
    let port = map(&pp, dead).await;
    // The reset can arrive before connect() reports success, so connect itself may
    // fail with ECONNRESET; either way no byte reaches the client.
    match TcpStream::connect((LO, port)).await {
        Ok(mut s) => {
            let mut buf = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
                .await
                .expect("closed in time");
            assert!(buf.is_empty());
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert_eq!(
        pp.metric("portproxy_connect_failures_total{mode=\"gear\"}")
            .await,
        Some(1.0)
    );
    pp.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    // gear.send_proxy: the gear learns the client's real address.
    let (pp, dir) = start("  send_proxy: v1\n").await;
    let (rec, mut seen) = recorder(LO, b"ok").await;
    let port = map(&pp, rec).await;
    let mut s = TcpStream::connect((LO, port)).await.expect("connect");
    let me = s.local_addr().expect("local");
    assert_eq!(
        send_and_read(&mut s, b"hello", Duration::from_secs(5)).await,
        b"ok"
    );
    let got = seen.recv().await.expect("recorded");
    assert_eq!(
        String::from_utf8_lossy(&got),
        format!(
            "PROXY TCP4 {} 127.0.0.1 {} {port}\r\nhello",
            me.ip(),
            me.port()
        )
    );
    pp.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn sigterm_drains_open_connections_then_exits() {
    let (pp, dir) = start("shutdown_grace: 10s\n").await;
    let backend = tcp_server(LO, echo).await;
    let port = map(&pp, backend).await;
    let mut open = TcpStream::connect((LO, port)).await.expect("connect");
    open.write_all(b"a").await.expect("write");
    let mut one = [0u8; 1];
    open.read_exact(&mut one).await.expect("echo");
    let mut pp = pp;
    pp.signal("TERM");
    pp.log_containing("stopped listening", Duration::from_secs(5))
        .await;
    assert!(
        TcpStream::connect((LO, port)).await.is_err(),
        "still accepting after SIGTERM"
    );
    // The open connection still works during the grace ...
    open.write_all(b"b").await.expect("write during the drain");
    open.read_exact(&mut one)
        .await
        .expect("echo during the drain");
    assert_eq!(&one, b"b");
    // ... and when it closes, the process exits at once (well before the 10 s grace).
    drop(open);
    let status = tokio::time::timeout(Duration::from_secs(5), pp.child.wait())
        .await
        .expect("exits after the drain")
        .expect("wait");
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn check_config_names_file_line_and_field() {
    let dir = tempdir("pp-check");
    let path = dir.join("pp.yaml");
    std::fs::write(&path, "gear:\n  ports: 40000-30000\n").expect("write");
    let (code, _, err) = cli(&[
        "--config".into(),
        path.display().to_string(),
        "check-config".into(),
    ])
    .await;
    assert_eq!(code, 64);
    assert!(
        err.starts_with(&format!("{}:2: gear.ports: ", path.display())),
        "{err}"
    );
    // A bad Simplenetes file named by the config is reported with its own line.
    let conf = dir.join("proxy.conf");
    std::fs::write(&conf, "CLUSTERPORTS 61000-61010\n").expect("write");
    std::fs::write(dir.join("hosts.conf"), "127.0.0.1:32767\n").expect("write");
    std::fs::write(
        dir.join("portmappings.conf"),
        "61000:30000:8:true\n61001:30000:8:maybe\n",
    )
    .expect("write");
    std::fs::write(
        &path,
        format!("cluster:\n  proxy_conf: {}\n", conf.display()),
    )
    .expect("write");
    let (code, _, err) = cli(&[
        "--config".into(),
        path.display().to_string(),
        "check-config".into(),
    ])
    .await;
    assert_eq!(code, 64);
    assert!(
        err.starts_with(&format!(
            "{}:2: sendProxy: ",
            dir.join("portmappings.conf").display()
        )),
        "{err}"
    );
    std::fs::write(dir.join("portmappings.conf"), "61000:30000:8:true\n").expect("write");
    let (code, out, err) = cli(&[
        "--config".into(),
        path.display().to_string(),
        "check-config".into(),
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with(": ok\n"));
    // `--help` on every subcommand.
    for sub in [
        "run",
        "check-config",
        "add",
        "remove",
        "remove-uid",
        "show",
        "allocate",
    ] {
        let (code, out, _) = cli(&[sub.into(), "--help".into()]).await;
        assert_eq!(code, 0, "{sub} --help");
        assert!(out.contains("Usage: portproxy"), "{sub}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example's `max_connections: 30000` under a 4 096-descriptor limit
/// is lowered to what fits (with a warning), and one address opening 3 000
/// connections (6 000 descriptors' worth of relays: before, accept failed with
/// EMFILE and the other address was not served) takes at most its half of that:
/// the rest are closed at once, counted, no accept fails for want of descriptors,
/// and a client from another address is relayed within 2 s every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_flooding_a_gear_leaves_others_served_within_the_descriptors() {
    let dir = tempdir("pp-flood");
    let yaml = format!(
        "shutdown_grace: 3s\nlimits:\n  max_connections: 30000\n{}",
        gear_yaml("")
    );
    let pp = PortProxy::start_with_nofile(&dir, &yaml, 4096).await;
    let lowered = pp
        .startup
        .iter()
        .find(|v| v.to_string().contains("do not fit in the open-files limit"))
        .expect("a warning says max_connections was lowered");
    let effective = lowered["fields"]["effective"].as_u64().expect("effective");
    assert!((1..=2048).contains(&effective), "{lowered}");
    let backend = tcp_server(LO, echo).await;
    let port = map(&pp, backend).await;
    let mut flood = Vec::new();
    for _ in 0..3000 {
        flood.push(
            TcpStream::connect((LO, port))
                .await
                .expect("the kernel accepts"),
        );
    }
    let refused = "portproxy_rejected_total{reason=\"source_limit\"}";
    eventually(
        "the flood meets its cap",
        Duration::from_secs(20),
        async || pp.metric(refused).await >= Some((3000 - effective / 2) as f64),
    )
    .await;
    let mut ok = 0;
    for _ in 0..20 {
        let probe = async {
            let mut s =
                e2e::portproxy::connect_from(IpAddr::from([127, 0, 0, 2]), (LO, port).into())
                    .await
                    .ok()?;
            Some(send_and_read(&mut s, b"ping", Duration::from_secs(2)).await == b"ping")
        };
        if let Ok(Some(true)) = tokio::time::timeout(Duration::from_secs(2), probe).await {
            ok += 1;
        }
    }
    assert_eq!(ok, 20, "probes from another address relayed");
    assert_eq!(pp.metric("portproxy_accept_errors_total").await, Some(0.0));
    drop(flood);
    pp.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
