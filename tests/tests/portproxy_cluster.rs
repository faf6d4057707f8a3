//! portproxy cluster mode (Simplenetes) across several hosts, each a portproxy on its
//! own loopback address (`127.77.N.x`): routing local first, spill-over on BUSY,
//! refusal and "not here", a dead host skipped, maxConn across reloads, live reload
//! of the three files, the PROXY-header policy and trust rule, and a real haproxy as
//! the PROXY peer on both sides.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use e2e::portproxy::{
    PortProxy, banner_echo, connect_from, ip, loopback_net, recorder, send_and_read, tcp_server,
};
use e2e::{eventually, tempdir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const PROXY_PORT: u16 = 32767;
const PORTS: &str = "61000-61009";

/// One Simplenetes host: its address, its files and its proxy.
struct Host {
    ip: IpAddr,
    dir: PathBuf,
    pp: PortProxy,
}

impl Host {
    /// Starts a proxy on `ip` with `hosts` as `hosts.conf` (in that order) and
    /// `mappings` as `portmappings.conf`.
    async fn start(
        net: [u8; 3],
        ip: IpAddr,
        hosts: &[IpAddr],
        mappings: &str,
        extra: &str,
    ) -> Host {
        let dir = tempdir("pp-cluster");
        std::fs::write(
            dir.join("proxy.conf"),
            format!("# test host\nHOST {ip}\nPORT {PROXY_PORT}\nCLUSTERPORTS {PORTS}\n"),
        )
        .expect("proxy.conf");
        let hosts_conf: String = hosts
            .iter()
            .map(|h| format!("{h}:{PROXY_PORT}\n"))
            .collect();
        std::fs::write(dir.join("hosts.conf"), hosts_conf).expect("hosts.conf");
        std::fs::write(dir.join("portmappings.conf"), mappings).expect("portmappings.conf");
        let trusted = e2e::portproxy::ip(net, 200);
        let yaml = format!(
            "shutdown_grace: 2s\ncluster:\n  proxy_conf: {}\n  reload_interval: 100ms\n  peer_timeout: 1s\n  header_timeout: 600ms\n  trusted_sources: [{trusted}/32, {}/32]\n{extra}",
            dir.join("proxy.conf").display(),
            e2e::portproxy::ip(net, 100),
        );
        let pp = PortProxy::start(&dir, &yaml).await;
        Host { ip, dir, pp }
    }

    fn port(&self, p: u16) -> SocketAddr {
        SocketAddr::new(self.ip, p)
    }

    async fn metric(&self, s: &str) -> f64 {
        self.pp
            .metric(s)
            .await
            .unwrap_or_else(|| panic!("no sample {s}"))
    }

    /// Rewrites `portmappings.conf` atomically (temp file + rename, as simplenetesd).
    fn write_mappings(&self, text: &str) {
        let tmp = self.dir.join("portmappings.conf.tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, self.dir.join("portmappings.conf")).expect("rename");
    }

    async fn stop(self) {
        self.pp.stop().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Reads the banner a `banner_echo` target says first (who answered).
async fn who(to: SocketAddr) -> (TcpStream, String) {
    let mut s = TcpStream::connect(to).await.expect("connect");
    let mut b = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut b))
        .await
        .unwrap_or_else(|_| panic!("no banner from {to}"))
        .unwrap_or_else(|e| panic!("closed by {to}: {e}"));
    (s, String::from_utf8_lossy(&b).into_owned())
}

/// Expects the connection to be closed without a byte within `limit`.
async fn closed_without_a_byte(mut s: TcpStream, limit: Duration) {
    let mut buf = Vec::new();
    let r = tokio::time::timeout(limit, s.read_to_end(&mut buf))
        .await
        .expect("closed in time");
    assert!(r.is_err() || buf.is_empty(), "got {buf:?}");
}

#[tokio::test]
async fn routing_local_first_spill_over_dead_host_and_nowhere() {
    let net = loopback_net();
    let (a_ip, b_ip, dead) = (ip(net, 1), ip(net, 2), ip(net, 9));
    let a_pod = tcp_server(a_ip, banner_echo("A\n")).await;
    let b_pod = tcp_server(b_ip, banner_echo("B\n")).await;
    let a_map = format!("61000:{}:1:false\n", a_pod.port());
    let b_map = format!(
        "61000:{p}:10:false 61001:{p}:10:false\n61003:{p}:1:false\n",
        p = b_pod.port()
    );
    // A tries itself, then a dead host, then B.
    let a = Host::start(net, a_ip, &[a_ip, dead, b_ip], &a_map, "").await;
    let b = Host::start(net, b_ip, &[b_ip, a_ip], &b_map, "").await;

    // Local first.
    let (held, w) = who(a.port(61000)).await;
    assert_eq!(w, "A\n");
    // A is at maxConn 1: the next goes past the dead host to B.
    let (held_b, w) = who(a.port(61000)).await;
    assert_eq!(w, "B\n");
    assert!(
        a.metric("portproxy_cluster_peer_answers_total{answer=\"error\"}")
            .await
            >= 1.0,
        "dead host tried"
    );
    // After A frees its slot, A again.
    drop(held);
    eventually(
        "A takes connections again",
        Duration::from_secs(5),
        async || who(a.port(61000)).await.1 == "A\n",
    )
    .await;
    drop(held_b);

    // Only on B.
    let (s, w) = who(a.port(61001)).await;
    assert_eq!(w, "B\n");
    let mut s = s;
    assert_eq!(
        send_and_read(&mut s, b"echo through two proxies", Duration::from_secs(5)).await,
        b"echo through two proxies"
    );

    // BUSY over the wire: B's only 61003 target is full.
    let (held, w) = who(a.port(61003)).await;
    assert_eq!(w, "B\n");
    let s = TcpStream::connect(a.port(61003)).await.expect("connect");
    closed_without_a_byte(s, Duration::from_secs(5)).await;
    assert_eq!(
        a.metric("portproxy_cluster_peer_answers_total{answer=\"busy\"}")
            .await,
        1.0
    );
    assert_eq!(b.metric("portproxy_cluster_busy_total").await, 1.0);
    drop(held);

    // Nowhere: a clean close within the budget (hosts × peer_timeout).
    let started = std::time::Instant::now();
    let s = TcpStream::connect(a.port(61002)).await.expect("connect");
    closed_without_a_byte(s, Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(4));
    assert_eq!(
        a.metric("portproxy_cluster_unrouted_total").await,
        2.0,
        "the BUSY one and this one"
    );
    assert!(
        a.metric("portproxy_cluster_peer_answers_total{answer=\"not_here\"}")
            .await
            >= 1.0
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn spreads_over_a_hosts_replicas_and_skips_a_dead_one() {
    let net = loopback_net();
    let a_ip = ip(net, 1);
    let mut map = String::new();
    let mut names = Vec::new();
    for name in ["1\n", "2\n", "3\n"] {
        let p = tcp_server(a_ip, banner_echo(name)).await;
        map.push_str(&format!("61000:{}:100:false ", p.port()));
        names.push(name);
    }
    // A host port nobody listens on.
    let dead = e2e::portproxy::free_port(a_ip);
    map.push_str(&format!("61000:{dead}:100:false\n"));
    let a = Host::start(net, a_ip, &[a_ip], &map, "").await;
    let mut counts = std::collections::HashMap::new();
    for _ in 0..300 {
        let (_s, w) = who(a.port(61000)).await;
        *counts.entry(w).or_insert(0) += 1;
    }
    // Every replica gets a share (expected 100 each; a loose bound, no timing).
    for n in names {
        let c = counts.get(n).copied().unwrap_or(0);
        assert!(
            (50..=150).contains(&c),
            "replica {n:?} got {c} of 300: {counts:?}"
        );
    }
    a.stop().await;
}

#[tokio::test]
async fn reload_keeps_counts_and_connections_and_refuses_bad_files() {
    let net = loopback_net();
    let (a_ip, b_ip) = (ip(net, 1), ip(net, 2));
    let a_pod = tcp_server(a_ip, banner_echo("A\n")).await;
    let a2_pod = tcp_server(a_ip, banner_echo("C\n")).await;
    let b_pod = tcp_server(b_ip, banner_echo("B\n")).await;
    let a = Host::start(
        net,
        a_ip,
        &[a_ip, b_ip],
        &format!("61000:{}:1:false\n", a_pod.port()),
        "",
    )
    .await;
    let b = Host::start(
        net,
        b_ip,
        &[b_ip, a_ip],
        &format!("61000:{}:10:false\n", b_pod.port()),
        "",
    )
    .await;

    let (mut held, w) = who(a.port(61000)).await;
    assert_eq!(w, "A\n");
    // A reload that keeps the item (and adds another port): the open connection
    // still counts against maxConn 1 (the JS proxy reset counts every 5 s).
    a.write_mappings(&format!(
        "# reloaded\n61000:{}:1:false\n61005:{}:5:false\n",
        a_pod.port(),
        a2_pod.port()
    ));
    eventually("reload", Duration::from_secs(5), async || {
        a.metric("portproxy_reloads_total{file=\"portmappings_conf\"}")
            .await
            >= 1.0
    })
    .await;
    assert_eq!(who(a.port(61005)).await.1, "C\n", "the new item works");
    assert_eq!(
        who(a.port(61000)).await.1,
        "B\n",
        "count kept across the reload"
    );

    // A bad file: the old table stays, the error is counted and names file:line.
    let mut a = a;
    a.write_mappings(&format!(
        "61000:{}:1:false\n61005:{}:0:false\n",
        a_pod.port(),
        a2_pod.port()
    ));
    let line =
        a.pp.log_containing("portmappings.conf:2: maxConn", Duration::from_secs(5))
            .await;
    assert!(line.to_string().contains("old table stays"), "{line}");
    assert_eq!(
        a.metric("portproxy_reload_errors_total{file=\"portmappings_conf\"}")
            .await,
        1.0
    );
    assert_eq!(who(a.port(61005)).await.1, "C\n", "old table still serves");

    // Removing the item does not cut the open connection.
    a.write_mappings("");
    eventually("reload to empty", Duration::from_secs(5), async || {
        a.metric("portproxy_mappings{mode=\"cluster\"}").await == 0.0
    })
    .await;
    held.write_all(b"still here").await.expect("write");
    let mut buf = [0u8; 10];
    held.read_exact(&mut buf)
        .await
        .expect("echo after the reload");
    assert_eq!(&buf, b"still here");
    assert_eq!(who(a.port(61000)).await.1, "B\n", "A has no item now");

    // CLUSTERPORTS shrinks and grows: 61000 keeps its open connection, 61009 stops
    // accepting, 61010 starts.
    a.write_mappings(&format!("61010:{}:5:false\n", a2_pod.port()));
    std::fs::write(
        a.dir.join("proxy.conf.tmp"),
        format!("HOST {a_ip}\nPORT {PROXY_PORT}\nCLUSTERPORTS 61000-61008,61010\n"),
    )
    .expect("write");
    std::fs::rename(a.dir.join("proxy.conf.tmp"), a.dir.join("proxy.conf")).expect("rename");
    eventually("61010 listening", Duration::from_secs(5), async || {
        TcpStream::connect(a.port(61010)).await.is_ok()
    })
    .await;
    assert!(
        TcpStream::connect(a.port(61009)).await.is_err(),
        "61009 removed"
    );
    assert_eq!(who(a.port(61010)).await.1, "C\n");
    held.write_all(b"and now").await.expect("write");
    let mut buf = [0u8; 7];
    held.read_exact(&mut buf)
        .await
        .expect("echo after the port-set change");
    // A HOST/PORT change is not applied live; it is said so.
    std::fs::write(
        a.dir.join("proxy.conf"),
        format!("HOST {a_ip}\nPORT 32766\nCLUSTERPORTS 61000-61008,61010\n"),
    )
    .expect("write");
    a.pp.log_containing("take effect only after a restart", Duration::from_secs(5))
        .await;
    drop(held);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn proxy_header_policy_and_trust_rule() {
    let net = loopback_net();
    let (a_ip, b_ip) = (ip(net, 1), ip(net, 2));
    let lo: IpAddr = [127, 0, 0, 1].into();
    let trusted = ip(net, 200);
    let (r_v1, mut seen_v1) = recorder(b_ip, b"ok").await;
    let (r_none, mut seen_none) = recorder(b_ip, b"ok").await;
    let (r_v2, mut seen_v2) = recorder(b_ip, b"ok").await;
    let b_map = format!(
        "61000:{}:10:true 61001:{}:10:false 61002:{}:10:v2\n",
        r_v1.port(),
        r_none.port(),
        r_v2.port()
    );
    // The targets are on B: the header decision is A's, the answer line carries it.
    let a = Host::start(net, a_ip, &[a_ip, b_ip], "", "").await;
    let b = Host::start(net, b_ip, &[b_ip, a_ip], &b_map, "").await;
    let exchange = |from: IpAddr, port: u16, data: &'static [u8]| {
        let to = a.port(port);
        async move {
            let mut s = connect_from(from, to).await.expect("connect");
            let me = s.local_addr().expect("addr");
            let got = send_and_read(&mut s, data, Duration::from_secs(5)).await;
            (me, got)
        }
    };
    let text = |v: Vec<u8>| String::from_utf8_lossy(&v).into_owned();

    // Untrusted client, target wants v1: exactly our header, with the real client.
    let (me, got) = exchange(lo, 61000, b"hello").await;
    assert_eq!(got, b"ok");
    assert_eq!(
        text(seen_v1.recv().await.expect("v1")),
        format!("PROXY TCP4 {} {a_ip} {} 61000\r\nhello", me.ip(), me.port())
    );
    // Untrusted, target wants none: payload only.
    exchange(lo, 61001, b"hello").await;
    assert_eq!(text(seen_none.recv().await.expect("none")), "hello");
    // Untrusted client sending a header: refused, never relayed.
    let (_, got) = exchange(
        lo,
        61000,
        b"PROXY TCP4 9.9.9.9 10.0.0.1 1111 61000\r\nhello",
    )
    .await;
    assert!(got.is_empty());
    let relayed = text(seen_v1.recv().await.expect("v1"));
    assert!(
        !relayed.contains("9.9.9.9"),
        "spoofed header relayed: {relayed}"
    );
    assert_eq!(
        a.metric("portproxy_proxy_protocol_rejects_total{reason=\"untrusted\"}")
            .await,
        1.0
    );

    // Trusted source: its header is passed verbatim, stripped, or re-encoded.
    let spoof = b"PROXY TCP4 9.9.9.9 10.0.0.1 1111 61000\r\nhello";
    exchange(trusted, 61000, spoof).await;
    assert_eq!(
        text(seen_v1.recv().await.expect("v1")),
        text(spoof.to_vec())
    );
    exchange(trusted, 61001, spoof).await;
    assert_eq!(text(seen_none.recv().await.expect("none")), "hello");
    exchange(trusted, 61002, spoof).await;
    let v2 = seen_v2.recv().await.expect("v2");
    assert!(v2.starts_with(b"\r\n\r\n\0\r\nQUIT\n\x21\x11"), "{v2:?}");
    assert_eq!(&v2[16..20], &[9, 9, 9, 9], "client address kept");
    assert_eq!(&v2[24..26], &1111u16.to_be_bytes());
    assert!(v2.ends_with(b"hello"));
    // Trusted but silent about it: after the header wait, our header.
    let (me, _) = exchange(trusted, 61000, b"no header here").await;
    assert_eq!(
        text(seen_v1.recv().await.expect("v1")),
        format!(
            "PROXY TCP4 {} {a_ip} {} 61000\r\nno header here",
            me.ip(),
            me.port()
        )
    );
    // Trusted with a broken header: refused.
    let (_, got) = exchange(trusted, 61000, b"PROXY TCP4 999.9.9.9 10.0.0.1 1 2\r\nx").await;
    assert!(got.is_empty());
    assert_eq!(
        a.metric("portproxy_proxy_protocol_rejects_total{reason=\"invalid\"}")
            .await,
        1.0
    );

    // The proxy port answers only hosts of hosts.conf and trusted sources.
    let mut s = connect_from(ip(net, 7), SocketAddr::new(b_ip, PROXY_PORT))
        .await
        .expect("connect");
    s.write_all(b"PROXY TCP4 1.2.3.4 1.2.3.4 123 61000\r\n")
        .await
        .expect("write");
    closed_without_a_byte(s, Duration::from_secs(5)).await;
    assert_eq!(
        b.metric("portproxy_rejected_total{reason=\"untrusted_peer\"}")
            .await,
        1.0
    );
    // A host of hosts.conf speaking the JS proxy's request line gets the JS answer.
    let mut s = connect_from(a_ip, SocketAddr::new(b_ip, PROXY_PORT))
        .await
        .expect("connect");
    s.write_all(b"PROXY TCP4 1.2.3.4 1.2.3.4 123 61001\r\nraw")
        .await
        .expect("write");
    let mut line = [0u8; 17];
    s.read_exact(&mut line).await.expect("answer");
    assert_eq!(&line, b"SENDPROXY=false\r\n");
    s.shutdown().await.expect("shutdown");
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await.expect("reply");
    assert_eq!(reply, b"ok");
    assert_eq!(text(seen_none.recv().await.expect("none")), "raw");
    // Garbage instead of a request line: closed without a byte.
    let mut s = connect_from(a_ip, SocketAddr::new(b_ip, PROXY_PORT))
        .await
        .expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.expect("write");
    closed_without_a_byte(s, Duration::from_secs(5)).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn server_speaks_first_through_two_proxies_keeps_byte_order() {
    let net = loopback_net();
    let (a_ip, b_ip) = (ip(net, 1), ip(net, 2));
    // The pod speaks at once and keeps speaking: the banner arrives with the
    // SENDPROXY line (bytes A must hand over before later ones).
    let pod = tcp_server(b_ip, |mut s: TcpStream| async move {
        for i in 0..50u8 {
            if s.write_all(&[b'0' + i % 10]).await.is_err() {
                return;
            }
        }
        let _ = s.shutdown().await;
    })
    .await;
    let a = Host::start(net, a_ip, &[a_ip, b_ip], "", "").await;
    let b = Host::start(
        net,
        b_ip,
        &[b_ip, a_ip],
        &format!("61000:{}:10:false\n", pod.port()),
        "",
    )
    .await;
    for _ in 0..20 {
        let mut s = TcpStream::connect(a.port(61000)).await.expect("connect");
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
            .await
            .expect("in time")
            .expect("read");
        let want: Vec<u8> = (0..50u8).map(|i| b'0' + i % 10).collect();
        assert_eq!(got, want);
    }
    a.stop().await;
    b.stop().await;
}

/// A real haproxy on both sides: the ingress sends `send-proxy` to a cluster port of
/// A (a trusted source), the pod on B is an haproxy `accept-proxy` listener that
/// re-sends the client address it parsed. The client's real address survives.
#[tokio::test]
async fn haproxy_as_ingress_and_as_pod() {
    let Some(haproxy) = which("haproxy") else {
        panic!("haproxy is not installed: tests/run.sh installs it (apt-get install haproxy)");
    };
    let net = loopback_net();
    let (a_ip, b_ip, ingress_ip) = (ip(net, 1), ip(net, 2), ip(net, 100));
    let (rec, mut seen) = recorder(b_ip, b"pong").await;
    let ingress_port = e2e::portproxy::free_port(ingress_ip);
    let pod_port = e2e::portproxy::free_port(b_ip);
    let dir = tempdir("pp-haproxy");
    let cfg = dir.join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 100\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
             listen ingress\n  bind {ingress_ip}:{ingress_port}\n  server a {a_ip}:61000 send-proxy source {ingress_ip}\n\
             listen pod\n  bind {b_ip}:{pod_port} accept-proxy\n  server r {rec} send-proxy\n"
        ),
    )
    .expect("cfg");
    let mut hap = tokio::process::Command::new(haproxy)
        .args(["-db", "-f"])
        .arg(&cfg)
        .kill_on_drop(true)
        .spawn()
        .expect("haproxy");
    let a = Host::start(net, a_ip, &[a_ip, b_ip], "", "").await;
    let b = Host::start(
        net,
        b_ip,
        &[b_ip, a_ip],
        &format!("61000:{pod_port}:10:true\n"),
        "",
    )
    .await;
    eventually("haproxy listening", Duration::from_secs(5), async || {
        TcpStream::connect((ingress_ip, ingress_port)).await.is_ok()
    })
    .await;
    // The probe above was a connection too: let its recording pass.
    let _ = tokio::time::timeout(Duration::from_secs(2), seen.recv()).await;
    let client_ip = ip(net, 50);
    let mut s = connect_from(client_ip, SocketAddr::new(ingress_ip, ingress_port))
        .await
        .expect("connect");
    let me = s.local_addr().expect("addr");
    assert_eq!(
        send_and_read(&mut s, b"ping", Duration::from_secs(5)).await,
        b"pong"
    );
    let got = String::from_utf8_lossy(&seen.recv().await.expect("recorded")).into_owned();
    assert_eq!(
        got,
        format!(
            "PROXY TCP4 {client_ip} {ingress_ip} {} {ingress_port}\r\nping",
            me.port()
        )
    );
    let _ = hap.kill().await;
    a.stop().await;
    b.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

fn which(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.exists())
}
