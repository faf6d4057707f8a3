//! The HA pair for real: two router processes in their own network namespaces, each
//! fed by its own queue of a real ActiveMQ (in a third namespace), real keepalived
//! (configs from `keepalived/gen-config`) moving a VIP between them, the routers run
//! under `keepalived/router-supervise` (what the systemd unit does for keepalived's
//! `track_file`), a client namespace polling through the VIP every 20 ms.
//!
//! Needs root, network namespaces, keepalived, curl and ActiveMQ (tests/run.sh installs
//! them). Everything is torn down by PID and namespace, also on failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use e2e::activemq::ActiveMq;
use e2e::netns::{A_IP, B_IP, MQ_IP, Topology, VIP, VIP2};
use e2e::tempdir;

const HOST: &str = "ha-app-ns.example.com";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Pair {
    topo: Topology,
    dir: PathBuf,
    amq: ActiveMq,
    backend: Child,
    routers: [Option<Child>; 2],
    keepalived: [Option<Child>; 2],
}

const NAMES: [&str; 2] = ["a", "b"];

impl Pair {
    /// Namespaces, broker, backend, both routers (ready) and, with `vip2`, the
    /// active-active variant; keepalived is started by [`Pair::start_keepalived`].
    fn new(extra_gen: &[&str]) -> Pair {
        let topo = Topology::new();
        let dir = tempdir("ha");
        let amq = ActiveMq::start_in_netns(&topo.ns("m"), MQ_IP);
        let backend = topo
            .cmd("m", e2e::bin("echo-backend").to_str().expect("path"))
            .arg(format!("{MQ_IP}:8080"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("echo-backend");
        // TLS: one certificate for the HA name, one ticket secret for both routers.
        let ca = e2e::pki::Ca::new("ha test CA");
        let leaf = ca.leaf(&[HOST]);
        let (cert, key) = e2e::pki::write_leaf(&dir, "site", &leaf);
        std::fs::write(dir.join("ca.pem"), &ca.pem).expect("ca");
        std::fs::write(dir.join("ticket.key"), [7u8; 48]).expect("ticket key");
        for name in NAMES {
            std::fs::write(
                dir.join(format!("router-{name}.yaml")),
                format!(
                    "cloud_domain: example.com\nstate_dir: {d}/state-{name}\n\
                     listen: {{ http: 0.0.0.0:8080, https: 0.0.0.0:8443, admin: 127.0.0.1:9090 }}\n\
                     tls: {{ default_cert: {cert}, default_key: {key}, session_ticket_key_file: {d}/ticket.key }}\n\
                     spi:\n  source: stomp\n  stomp:\n    hosts: [\"{MQ_IP}:61613\"]\n    destination: /queue/routinginfo.router-{name}\n    client_id: router-{name}\n\
                     health: {{ interval: 1s, timeout: 500ms }}\nshutdown_grace: 5s\naccess_log: {{ enabled: false }}\n",
                    d = dir.display(),
                    cert = cert.display(),
                    key = key.display(),
                ),
            )
            .expect("router config");
        }
        let mut args = vec![
            "--out".to_string(),
            dir.display().to_string(),
            "--a".into(),
            format!("router-a={A_IP}"),
            "--b".into(),
            format!("router-b={B_IP}"),
            "--vip".into(),
            format!("{VIP}/24"),
            "--flag".into(),
            format!("{}/%n.flag", dir.display()),
            "--libexec".into(),
            repo().join("keepalived").display().to_string(),
        ];
        args.extend(extra_gen.iter().map(|s| s.to_string()));
        let gen_ok = std::process::Command::new(repo().join("keepalived/gen-config"))
            .args(&args)
            .stdout(Stdio::null())
            .status()
            .expect("gen-config")
            .success();
        assert!(gen_ok, "gen-config failed");
        let mut pair = Pair {
            topo,
            dir,
            amq,
            backend,
            routers: [None, None],
            keepalived: [None, None],
        };
        for i in 0..2 {
            pair.start_router(i);
        }
        pair
    }

    fn flag(&self, i: usize) -> PathBuf {
        self.dir.join(format!("router-{}.flag", NAMES[i]))
    }

    /// Starts router `i` under the supervisor and waits until it is ready.
    fn start_router(&mut self, i: usize) {
        let child = self
            .topo
            .cmd(
                NAMES[i],
                repo()
                    .join("keepalived/router-supervise")
                    .to_str()
                    .expect("path"),
            )
            .env("ROUTER_VRRP_FLAG", self.flag(i))
            .env("ROUTER_READY_URL", "http://127.0.0.1:9090/readyz")
            .env("VRRP_MOVE_DELAY", "0.3")
            .arg(e2e::bin("router"))
            .arg("--config")
            .arg(self.dir.join(format!("router-{}.yaml", NAMES[i])))
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.dir.join(format!("router-{}.log", NAMES[i])))
                    .expect("log"),
            )
            .spawn()
            .expect("router-supervise");
        self.routers[i] = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(self.flag(i)).is_ok_and(|s| s.trim() == "0") {
            assert!(
                Instant::now() < deadline,
                "router-{} not ready in 30 s",
                NAMES[i]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The router process itself (the supervisor's child).
    fn router_pid(&self, i: usize) -> String {
        std::fs::read_to_string(self.flag(i).with_extension("flag.pid"))
            .expect("pid")
            .trim()
            .to_string()
    }

    fn start_keepalived(&mut self, i: usize) {
        let n = NAMES[i];
        // A previous instance must be gone (its pid files too), or keepalived refuses.
        for f in [format!("ka-{n}.pid"), format!("ka-{n}-vrrp.pid")] {
            let _ = std::fs::remove_file(self.dir.join(f));
        }
        let child = self
            .topo
            .cmd(n, "keepalived")
            .args(["-n", "-l", "-D", "-P", "-f"])
            .arg(self.dir.join(format!("router-{n}.conf")))
            .arg("-p")
            .arg(self.dir.join(format!("ka-{n}.pid")))
            .arg("-r")
            .arg(self.dir.join(format!("ka-{n}-vrrp.pid")))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join(format!("ka-{n}.log"))).expect("log"))
            .spawn()
            .expect("keepalived (apt-get install keepalived)");
        self.keepalived[i] = Some(child);
    }

    /// Publishes `event` (persistent) once to the topic `routinginfo`, as the platform
    /// does; deploy/activemq's composite topic copies it into each router's queue.
    fn publish(&self, event: &str) {
        {
            let script = format!(
                "import socket,sys\n\
                 s=socket.create_connection(('{MQ_IP}',61613),5)\n\
                 s.sendall(b'CONNECT\\naccept-version:1.2\\nhost:localhost\\n\\n\\x00')\n\
                 assert s.recv(4096).startswith(b'CONNECTED')\n\
                 body=sys.stdin.buffer.read()\n\
                 s.sendall(b'SEND\\ndestination:/topic/routinginfo\\npersistent:true\\nreceipt:1\\ncontent-length:'+str(len(body)).encode()+b'\\n\\n'+body+b'\\x00')\n\
                 assert b'RECEIPT' in s.recv(4096)\n"
            );
            let mut p = self
                .topo
                .cmd("m", "python3")
                .args(["-c", &script])
                .stdin(Stdio::piped())
                .spawn()
                .expect("python3");
            use std::io::Write;
            p.stdin
                .take()
                .expect("stdin")
                .write_all(event.as_bytes())
                .expect("event");
            assert!(
                p.wait().expect("wait").success(),
                "publish to /topic/routinginfo"
            );
        }
    }

    /// One GET through `vip` from the client namespace: the status code, or None.
    fn get(&self, vip: &str) -> Option<u16> {
        let out = self
            .topo
            .cmd("c", "curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-m",
                "2",
                "-H",
                &format!("Host: {HOST}"),
            ])
            .arg(format!("http://{vip}:8080/"))
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .parse()
            .ok()
            .filter(|c| *c != 0)
    }

    /// Which router holds `vip` (waiting up to `limit` for one to).
    fn holder(&self, vip: &str, limit: Duration) -> usize {
        let start = Instant::now();
        loop {
            if let Some(i) = (0..2).find(|&i| self.topo.has_addr(NAMES[i], vip)) {
                return i;
            }
            assert!(
                start.elapsed() < limit,
                "nobody holds {vip} after {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn wait_vip(&self, i: usize, vip: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        while !self.topo.has_addr(NAMES[i], vip) {
            assert!(
                start.elapsed() < limit,
                "VIP {vip} not on router-{} after {limit:?}",
                NAMES[i]
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        start.elapsed()
    }

    /// Starts the 20 ms poller in the client namespace, for `secs`.
    fn poller(&self, vip: &str, secs: f64) -> (Child, PathBuf) {
        let log = self
            .dir
            .join(format!("poll-{}.log", Instant::now().elapsed().as_nanos()));
        let child = self
            .topo
            .cmd("c", "python3")
            .arg(repo().join("bench/vip_poller.py"))
            .args([vip, &secs.to_string(), log.to_str().expect("path"), HOST])
            .spawn()
            .expect("poller");
        (child, log)
    }

    /// Stops the supervisor `i` gracefully (it flags, waits, then SIGTERMs the router).
    fn stop_router(&mut self, i: usize) {
        if let Some(mut c) = self.routers[i].take() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for c in self
            .keepalived
            .iter_mut()
            .chain(self.routers.iter_mut())
            .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = self.backend.kill();
        let _ = self.backend.wait();
        self.amq.stop();
        // Topology's Drop kills what is left inside the namespaces and deletes them.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `(failed requests, gap from the first failure to the first success started after
/// it)` from a poller log of `start_ts status` lines; no failure = `(0, 0)`.
fn failures(log: &Path) -> (usize, Duration) {
    let text = std::fs::read_to_string(log).expect("poll log");
    let rows: Vec<(f64, bool)> = text
        .lines()
        .filter_map(|l| {
            let (t, r) = l.split_once(' ')?;
            Some((t.parse().ok()?, r == "200"))
        })
        .collect();
    assert!(rows.len() > 20, "the poller ran: {} lines", rows.len());
    let failed = rows.iter().filter(|r| !r.1).count();
    for l in text.lines().filter(|l| !l.ends_with(" 200")) {
        eprintln!("  failed: {l}");
    }
    let first_fail = rows.iter().position(|r| !r.1);
    let gap = first_fail
        .and_then(|f| rows[f..].iter().find(|r| r.1).map(|ok| ok.0 - rows[f].0))
        .unwrap_or(0.0);
    assert!(
        rows.last().is_some_and(|r| r.1),
        "requests succeed again at the end"
    );
    (failed, Duration::from_secs_f64(gap.max(0.0)))
}

fn publish_route(pair: &Pair) {
    pair.publish(&e2e::events::add_lb(
        "app",
        "ns",
        format!("{MQ_IP}:8080").parse().expect("addr"),
    ));
}

#[test]
fn routes_through_the_vip_and_fails_over_on_kill_and_on_graceful_stop() {
    let mut pair = Pair::new(&[]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));
    // Both routers applied the event from their own queue: each serves the route.
    for (i, ip) in [A_IP, B_IP].iter().enumerate() {
        let start = Instant::now();
        while pair.get(ip) != Some(200) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "router-{} never routed the app",
                NAMES[i]
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert_eq!(pair.get(VIP), Some(200), "served through the VIP");

    // kill -9 of the active router under a request loop: the VIP moves.
    let (mut poll, log) = pair.poller(VIP, 4.0);
    std::thread::sleep(Duration::from_millis(800));
    let pid = pair.router_pid(0);
    let killed = Instant::now();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    let moved = pair.wait_vip(1, VIP, Duration::from_secs(5));
    poll.wait().expect("poller");
    let (failed, gap) = failures(&log);
    eprintln!(
        "kill -9: VIP on router-b after {moved:?}; {failed} failed requests, gap {gap:?} (since kill: {:?})",
        killed.elapsed()
    );
    assert!(moved < Duration::from_secs(2), "VIP moved in {moved:?}");
    // keepalived sees the flag by inotify and sends a priority-0 advert; router-b
    // (priority 249) takes over after its ~3 ms skew.
    assert!(failed <= 3, "{failed} failed requests");

    // Router-a comes back: with preempt (the default) it takes the VIP back.
    let _ = pair.routers[0].take().map(|mut c| c.wait());
    pair.start_router(0);
    pair.wait_vip(0, VIP, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));

    // Graceful stop of the active router: flag first, VIP moves, then the drain.
    let (mut poll, log) = pair.poller(VIP, 4.0);
    std::thread::sleep(Duration::from_millis(800));
    pair.stop_router(0);
    poll.wait().expect("poller");
    assert!(pair.topo.has_addr("b", VIP));
    let (failed, gap) = failures(&log);
    eprintln!("graceful stop: {failed} failed requests, gap {gap:?}");
    // Make-before-break leaves no moment without a VIP holder. What an L2 VIP cannot
    // save is a connection open at the instant the client's ARP entry flips to
    // router-b: its next packet reaches B, which resets it. With a new connection
    // every 20 ms that is at most one request, and it fails fast (a reset, which
    // clients retry), never by waiting for a VIP nobody holds.
    assert!(failed <= 1, "{failed} failed requests on a graceful stop");
}

#[test]
fn nopreempt_keeps_the_vip_where_it_is_and_tls_sessions_resume_across_failover() {
    let mut pair = Pair::new(&["--nopreempt"]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    // With nopreempt the first router ready may win the election: either is fine.
    let first = pair.holder(VIP, Duration::from_secs(15));
    let other = 1 - first;
    let start = Instant::now();
    while pair.get(VIP) != Some(200) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "route never served"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A TLS session from the first router ...
    let sess = pair.dir.join("session.pem");
    let s_client = |extra: &str| {
        pair.topo.sh(
            "c",
            &format!(
                "(sleep 0.5; printf 'GET / HTTP/1.1\\r\\nHost: {HOST}\\r\\nConnection: close\\r\\n\\r\\n'; sleep 0.5) | \
                 openssl s_client -connect {VIP}:8443 -servername {HOST} -CAfile {} -tls1_3 {extra} 2>&1",
                pair.dir.join("ca.pem").display()
            ),
        )
    };
    let first_session = s_client(&format!("-sess_out {}", sess.display()));
    assert!(
        first_session.contains("Verify return code: 0"),
        "{first_session}"
    );
    // ... the VIP moves (that router killed) ...
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pair.router_pid(first)])
        .status();
    pair.wait_vip(other, VIP, Duration::from_secs(5));
    // ... and the session resumes on the other one (the shared ticket key).
    let second = s_client(&format!("-sess_in {}", sess.display()));
    assert!(
        second.contains("Reused, TLSv1.3"),
        "not resumed on the other router: {second}"
    );

    // nopreempt: the first router back and ready, the VIP stays where it is, even
    // when the returning router has the higher priority.
    let _ = pair.routers[first].take().map(|mut c| c.wait());
    pair.start_router(first);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        pair.topo.has_addr(NAMES[other], VIP) && !pair.topo.has_addr(NAMES[first], VIP),
        "VIP moved back despite nopreempt"
    );
    assert_eq!(pair.get(VIP), Some(200));
}

#[test]
fn active_active_each_vip_served_and_a_death_moves_only_its_vip() {
    let mut pair = Pair::new(&["--vip2", &format!("{VIP2}/24")]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));
    pair.wait_vip(1, VIP2, Duration::from_secs(15));
    for vip in [VIP, VIP2] {
        let start = Instant::now();
        while pair.get(vip) != Some(200) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{vip} never served"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // router-b dies: its VIP moves to router-a, router-a's VIP stays.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pair.router_pid(1)])
        .status();
    pair.wait_vip(0, VIP2, Duration::from_secs(5));
    assert!(pair.topo.has_addr("a", VIP), "router-a kept its own VIP");
    assert_eq!(pair.get(VIP), Some(200));
    assert_eq!(pair.get(VIP2), Some(200));
}
