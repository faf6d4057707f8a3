//! The HA pair for real, for `tests/tests/ha_pair.rs` and `bench-failover`: two router
//! processes in their own network namespaces, each fed by its own queue of a real
//! ActiveMQ (in a third namespace; one publish to the topic `routinginfo` reaches both
//! through deploy/activemq's composite topic), real keepalived (configs from
//! `keepalived/gen-config`) moving a VIP between them, the routers run under
//! `keepalived/router-supervise` (what the systemd unit does for keepalived's
//! `track_file`), and a client namespace polling through the VIP every 20 ms.
//!
//! Needs root, network namespaces, keepalived, curl and ActiveMQ (tests/run.sh installs
//! them). Everything is torn down by PID and namespace, also on failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::activemq::ActiveMq;
use crate::netns::{A_IP, B_IP, MQ_IP, Topology, VIP};
use crate::tempdir;

pub const HOST: &str = "ha-app-ns.example.com";

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The running pair.
pub struct Pair {
    pub topo: Topology,
    pub dir: PathBuf,
    amq: ActiveMq,
    backend: Child,
    pub routers: [Option<Child>; 2],
    keepalived: [Option<Child>; 2],
}

pub const NAMES: [&str; 2] = ["a", "b"];

/// How long a new VIP holder forwards the old holder's connections in the tests
/// (`gen-config --handover`; 35 s by default): longer than the routers'
/// `shutdown_grace` here (5 s), as the default is than the default's (30 s).
pub const HANDOVER: Duration = Duration::from_secs(7);

impl Pair {
    /// Namespaces, broker, backend, both routers (ready) and, with `vip2`, the
    /// active-active variant; keepalived is started by [`Pair::start_keepalived`].
    pub fn new(extra_gen: &[&str]) -> Pair {
        let mut pair = Pair::prepare(extra_gen);
        for i in 0..2 {
            pair.start_router(i);
        }
        pair
    }

    /// All of [`Pair::new`] but the routers: their configurations
    /// (`dir/router-{a,b}.yaml`) may be changed before [`Pair::start_router`].
    /// Also written: `admin.crt`/`admin.key`, a certificate for both routers'
    /// addresses from the pair's CA (`ca.pem`), for admin listeners off loopback.
    pub fn prepare(extra_gen: &[&str]) -> Pair {
        assert!(
            ["/usr/sbin/nft", "/sbin/nft"]
                .iter()
                .any(|p| Path::new(p).exists()),
            "the pair's handover needs nftables: apt-get install nftables (tests/run.sh does)"
        );
        let topo = Topology::new();
        let dir = tempdir("ha");
        let amq = ActiveMq::start_in_netns(&topo.ns("m"), MQ_IP);
        let backend = start_backend(&topo);
        // TLS: one certificate for the HA name, one ticket secret for both routers.
        let ca = crate::pki::Ca::new("ha test CA");
        let leaf = ca.leaf(&[HOST]);
        let (cert, key) = crate::pki::write_leaf(&dir, "site", &leaf);
        crate::pki::write_leaf(&dir, "admin", &ca.leaf(&[A_IP, B_IP]));
        std::fs::write(dir.join("ca.pem"), &ca.pem).expect("ca");
        std::fs::write(dir.join("ticket.key"), [7u8; 48]).expect("ticket key");
        for name in NAMES {
            std::fs::write(
                dir.join(format!("router-{name}.yaml")),
                format!(
                    "cloud_domain: example.com\nstate_dir: {d}/state-{name}\n\
                     listen: {{ http: 0.0.0.0:8080, https: 0.0.0.0:8443, http3: 0.0.0.0:8443, admin: 127.0.0.1:9090, metrics: 0.0.0.0:9091 }}\n\
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
            // A move resets nothing (keepalived/router-handover): the new holder
            // forwards the old one's connections for HANDOVER seconds; the peer's
            // router port says whether its host is up; SIGUSR1 reaches the router
            // through the supervisor's PID file.
            "--handover".into(),
            HANDOVER.as_secs().to_string(),
            "--handover-port".into(),
            "8080".into(),
            "--router-pid".into(),
            format!("{}/%n.flag.pid", dir.display()),
        ];
        args.extend(extra_gen.iter().map(|s| s.to_string()));
        let gen_ok = std::process::Command::new(repo().join("keepalived/gen-config"))
            .args(&args)
            .stdout(Stdio::null())
            .status()
            .expect("gen-config")
            .success();
        assert!(gen_ok, "gen-config failed");
        Pair {
            topo,
            dir,
            amq,
            backend,
            routers: [None, None],
            keepalived: [None, None],
        }
    }

    /// Router `i`'s configuration with its admin listener off loopback, as
    /// a pair's link needs it: on every address, TLS with `admin.crt`
    /// (both routers' addresses, the pair's CA) and `token` in
    /// `admin.token`, written here (0600).
    pub fn admin_off_loopback(&self, i: usize, token: &str) -> String {
        let d = self.dir.display();
        let path = self.dir.join("admin.token");
        std::fs::write(&path, token).expect("token");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod");
        std::fs::read_to_string(self.config(i))
            .expect("config")
            .replace("admin: 127.0.0.1:9090", "admin: 0.0.0.0:9090")
            + &format!(
                "admin:\n  token_file: {d}/admin.token\n  tls_cert: {d}/admin.crt\n  tls_key: {d}/admin.key\n  tls_ca: {d}/ca.pem\n"
            )
    }

    /// Router `i`'s configuration file.
    pub fn config(&self, i: usize) -> PathBuf {
        self.dir.join(format!("router-{}.yaml", NAMES[i]))
    }

    pub fn flag(&self, i: usize) -> PathBuf {
        self.dir.join(format!("router-{}.flag", NAMES[i]))
    }

    /// Starts router `i` under the supervisor and waits until it is ready.
    pub fn start_router(&mut self, i: usize) {
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
            .env("ROUTER_READY_URL", "http://127.0.0.1:9091/readyz")
            .env("VRRP_MOVE_DELAY", "0.3")
            .arg(crate::bin("router"))
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
        let log = self.dir.join(format!("router-{}.log", NAMES[i]));
        crate::wait_for(
            &format!("router-{} ready (its flag 0)", NAMES[i]),
            Duration::from_secs(30),
            Duration::from_millis(50),
            || match std::fs::read_to_string(self.flag(i)) {
                Ok(s) if s.trim() == "0" => Ok(()),
                flag => Err(format!(
                    "flag {flag:?}; its log ends: {}",
                    std::fs::read_to_string(&log)
                        .unwrap_or_default()
                        .lines()
                        .last()
                        .unwrap_or_default()
                )),
            },
        );
    }

    /// `kill -9` of router `i` itself (not its supervisor, which then flags
    /// the fault at once).
    pub fn kill_router(&self, i: usize) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.router_pid(i)])
            .status();
    }

    /// A binary upgrade of router `i` (SIGUSR2: it starts its own binary as
    /// `upgrade`, hands over its sockets and drains); returns once its
    /// supervisor follows the new process (a new PID in its pid file), within 60 s.
    pub fn upgrade_router(&self, i: usize) {
        let old = self.router_pid(i);
        let _ = std::process::Command::new("kill")
            .args(["-USR2", &old])
            .status();
        crate::wait_for(
            "the supervisor follows the upgraded router (a new PID in its pid file)",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || match self.router_pid(i) {
                new if new != old => Ok(()),
                same => {
                    let log =
                        std::fs::read_to_string(self.dir.join(format!("router-{}.log", NAMES[i])))
                            .unwrap_or_default();
                    let tail: Vec<&str> = log.lines().rev().take(8).collect();
                    Err(format!(
                        "still {same}; flag {:?}; its log ends:\n{}",
                        std::fs::read_to_string(self.flag(i)),
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    ))
                }
            },
        );
    }

    /// The router process itself (the supervisor's child).
    pub fn router_pid(&self, i: usize) -> String {
        std::fs::read_to_string(self.flag(i).with_extension("flag.pid"))
            .expect("pid")
            .trim()
            .to_string()
    }

    pub fn start_keepalived(&mut self, i: usize) {
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
    pub fn publish(&self, event: &str) {
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
    pub fn get(&self, vip: &str) -> Option<u16> {
        self.get_why(vip).ok()
    }

    /// One GET through `vip` from the client namespace: the status code, or why
    /// there was none (curl's exit code and error).
    pub fn get_why(&self, vip: &str) -> Result<u16, String> {
        curl_status(
            self.topo
                .cmd("c", "curl")
                .args(["-H", &format!("Host: {HOST}"), "-m", "2"])
                .arg(format!("http://{vip}:8080/")),
        )
    }

    /// Waits until a GET through `ip` (a router's own address or a VIP) answers
    /// 200; the timeout says what the last one got.
    pub fn wait_served(&self, ip: &str, limit: Duration) {
        crate::wait_for(
            &format!("the app served on {ip}"),
            limit,
            Duration::from_millis(100),
            || match self.get_why(ip)? {
                200 => Ok(()),
                other => Err(format!("status {other}")),
            },
        );
    }

    /// Which router holds `vip` now, by name ("nobody" in a move's instant).
    pub fn holder_now(&self, vip: &str) -> &'static str {
        (0..2)
            .find(|&i| self.topo.has_addr(NAMES[i], vip))
            .map_or("nobody", |i| NAMES[i])
    }

    /// Which router holds `vip` (waiting up to `limit` for one to).
    pub fn holder(&self, vip: &str, limit: Duration) -> usize {
        crate::wait_for(
            &format!("a holder of {vip}"),
            limit,
            Duration::from_millis(10),
            || {
                (0..2)
                    .find(|&i| self.topo.has_addr(NAMES[i], vip))
                    .ok_or_else(|| "nobody".to_string())
            },
        )
    }

    pub fn wait_vip(&self, i: usize, vip: &str, limit: Duration) -> Duration {
        let start = Instant::now();
        crate::wait_for(
            &format!("VIP {vip} on router-{}", NAMES[i]),
            limit,
            Duration::from_millis(10),
            || match self.topo.has_addr(NAMES[i], vip) {
                true => Ok(()),
                false => Err(format!("held by {}", self.holder_now(vip))),
            },
        );
        start.elapsed()
    }

    /// Starts the 20 ms poller in the client namespace, for `secs`, and returns once
    /// it has had five answers of 200 (so what the caller does next happens while
    /// requests are being served).
    pub fn poller(&self, vip: &str, secs: f64) -> (Child, PathBuf) {
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
        let live = log.with_extension("log.live");
        crate::wait_for(
            "five answers of 200 to the poller",
            Duration::from_secs(10),
            Duration::from_millis(10),
            || {
                let text = std::fs::read_to_string(&live).unwrap_or_default();
                match text.lines().filter(|l| l.ends_with(" 200")).count() {
                    n if n >= 5 => Ok(()),
                    _ => Err(format!("so far: {:?}", text.lines().last())),
                }
            },
        );
        (child, log)
    }

    /// `clients` keep-alive HTTP/1.1 clients through `vip` (bench/vip_keepalive.py),
    /// a GET every 20 ms each for `secs`, with no retry; returns once each
    /// client has had an answer.
    pub fn keepalive_load(&self, vip: &str, secs: f64, clients: usize) -> (Child, PathBuf) {
        let log = self.dir.join(format!(
            "keepalive-{}.log",
            Instant::now().elapsed().as_nanos()
        ));
        let child = self
            .topo
            .cmd("c", "python3")
            .arg(repo().join("bench/vip_keepalive.py"))
            .args([vip, &secs.to_string(), log.to_str().expect("path"), HOST])
            .arg(clients.to_string())
            .spawn()
            .expect("vip_keepalive.py");
        let live = log.with_extension("log.live");
        crate::wait_until(
            "every keep-alive client answered",
            Duration::from_secs(10),
            || {
                let text = std::fs::read_to_string(&live).unwrap_or_default();
                (0..clients).all(|n| text.contains(&format!(" {n} 200")))
            },
        );
        (child, log)
    }

    /// A WebSocket through `vip` (bench/vip_websocket.py) sending a message every
    /// 20 ms for `secs`; returns once it has had an echo. Its log, once the
    /// child has ended, is one JSON line: echoes, longest wait, how it ended.
    pub fn websocket(&self, vip: &str, secs: f64) -> (Child, PathBuf) {
        let log = self
            .dir
            .join(format!("ws-{}.log", Instant::now().elapsed().as_nanos()));
        let child = self
            .topo
            .cmd("c", "python3")
            .arg(repo().join("bench/vip_websocket.py"))
            .args([vip, &secs.to_string(), log.to_str().expect("path"), HOST])
            .spawn()
            .expect("vip_websocket.py");
        let live = log.with_extension("log.live");
        crate::wait_until("a WebSocket echo", Duration::from_secs(10), || {
            std::fs::read_to_string(&live).is_ok_and(|t| t.contains("echoed"))
        });
        (child, log)
    }

    /// A download of `bytes` (a multiple of 64 KiB) through `vip`, read at
    /// `rate` bytes/s so that it spans what the caller does next: curl in the
    /// client namespace; wait on it with [`download_result`].
    pub fn download(&self, vip: &str, bytes: u64, rate: u64) -> Child {
        self.topo
            .cmd("c", "curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{size_download} %{time_total}",
            ])
            .args(["--limit-rate", &rate.to_string(), "-m", "60"])
            .args(["-H", &format!("Host: {HOST}")])
            .arg(format!("http://{vip}:8080/stream?chunks={}", bytes / 65536))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("curl")
    }

    /// An HTTP/3 client (`h3-client loop`: quinn, which recognises a stateless
    /// reset; aioquic does not) in the client namespace sending a GET through
    /// `vip` every 20 ms for `secs`, on one QUIC connection as long as it lives;
    /// returns once it has had five answers.
    pub fn h3_poller(&self, vip: &str, secs: f64) -> (Child, PathBuf) {
        self.stream_poller("h3-client", vip, secs, "\"ok\":true")
    }

    /// The same with an h2 client over TLS (`h2-client loop`: each GET a
    /// stream of the current connection, a new connection once it takes no
    /// more, after a GOAWAY).
    pub fn h2_poller(&self, vip: &str, secs: f64) -> (Child, PathBuf) {
        self.stream_poller("h2-client", vip, secs, "\"status\":200")
    }

    /// `client loop VIP:8443 HOST ca.pem / 20 SECS` in the client namespace,
    /// its lines in a log; returns once five lines contain `ok`.
    fn stream_poller(&self, client: &str, vip: &str, secs: f64, ok: &str) -> (Child, PathBuf) {
        let log = self.dir.join(format!("{client}-poll.log"));
        let child = self
            .topo
            .cmd("c", crate::bin(client).to_str().expect("path"))
            .args(["loop", &format!("{vip}:8443"), HOST])
            .arg(self.dir.join("ca.pem"))
            .args(["/", "20", &secs.to_string()])
            .stdout(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect(client);
        crate::wait_for(
            &format!("five answers to {client}"),
            Duration::from_secs(15),
            Duration::from_millis(10),
            || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                match text.lines().filter(|l| l.contains(ok)).count() {
                    n if n >= 5 => Ok(()),
                    _ => Err(text),
                }
            },
        );
        (child, log)
    }

    /// VRRP advertisements keepalived `i` has received so far (its `SIGUSR2`
    /// statistics, all instances summed).
    pub fn adverts_received(&self, i: usize) -> u64 {
        // keepalived always writes /tmp/keepalived.stats: one reader at a time.
        static STATS: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = STATS.lock().unwrap_or_else(|p| p.into_inner());
        let stats = Path::new("/tmp/keepalived.stats");
        let _ = std::fs::remove_file(stats);
        let pid = self.keepalived[i]
            .as_ref()
            .expect("keepalived running")
            .id();
        let _ = std::process::Command::new("kill")
            .args(["-USR2", &pid.to_string()])
            .status();
        // Complete once the last instance's section is there.
        let text = crate::wait_for(
            "keepalived's statistics (SIGUSR2)",
            Duration::from_secs(5),
            Duration::from_millis(10),
            || match std::fs::read_to_string(stats) {
                Ok(text) if text.contains("Authentication Errors") => Ok(text),
                other => Err(format!("{:?}", other.map(|t| t.len()))),
            },
        );
        let mut lines = text.lines().map(str::trim);
        let mut n = 0;
        while let Some(l) = lines.next() {
            if l == "Advertisements:" {
                n += lines
                    .next()
                    .and_then(|r| r.strip_prefix("Received: "))
                    .and_then(|v| v.parse::<u64>().ok())
                    .expect("a Received line after Advertisements");
            }
        }
        n
    }

    /// Waits until keepalived `i` logged `state` (e.g. "BACKUP") as its newest
    /// state change.
    pub fn wait_state(&self, i: usize, state: &str, limit: Duration) {
        let log = self.dir.join(format!("ka-{}.log", NAMES[i]));
        let want = format!("Entering {state} STATE");
        crate::wait_for(
            &format!("keepalived of router-{} in {state}", NAMES[i]),
            limit,
            Duration::from_millis(20),
            || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                match text.lines().rev().find(|l| l.contains(" STATE")) {
                    Some(l) if l.contains(&want) => Ok(()),
                    newest => Err(format!("newest: {newest:?}")),
                }
            },
        );
    }

    /// The broker stopped (SIGTERM) and started again on its data.
    pub fn restart_broker(&mut self) {
        self.amq.restart();
    }

    /// The app's one member killed (`kill -9`), then started again on its
    /// address after `down`.
    pub fn restart_backend(&mut self, down: Duration) {
        let _ = self.backend.kill();
        let _ = self.backend.wait();
        std::thread::sleep(down);
        self.backend = start_backend(&self.topo);
    }

    /// Stops the supervisor `i` gracefully (it flags, waits, then SIGTERMs the router).
    pub fn stop_router(&mut self, i: usize) {
        self.begin_stop(i);
        if let Some(mut c) = self.routers[i].take() {
            let _ = c.wait();
        }
    }

    /// Starts a planned stop of router `i` (SIGTERM to its supervisor: `vrrp-flag
    /// leaving`, then the router's drain) without waiting for it to end; the
    /// router stays in `routers[i]` until it is waited for.
    pub fn begin_stop(&mut self, i: usize) {
        if let Some(c) = &self.routers[i] {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
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

/// The echo backend, the app's member, on `MQ_IP:8080` in the broker's namespace.
fn start_backend(topo: &Topology) -> Child {
    topo.cmd("m", crate::bin("echo-backend").to_str().expect("path"))
        .arg(format!("{MQ_IP}:8080"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("echo-backend")
}

/// `(failed requests, gap from the first failure to the first success started after
/// it)` from a poller log of `start_ts status` lines; no failure = `(0, 0)`.
pub fn failures(log: &Path) -> (usize, Duration) {
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

/// Publishes the test app `app-ns` with the echo backend as its member.
pub fn publish_route(pair: &Pair) {
    pair.publish(&crate::events::add_lb(
        "app",
        "ns",
        format!("{MQ_IP}:8080").parse().expect("addr"),
    ));
}

/// Runs `curl` (with `-sS -o /dev/null -w %{http_code}` added) and returns the
/// status code, or why there was none: curl's exit code and its error line (28
/// is a timeout, 7 a refused connection, 35 a failed TLS handshake, 56 a reset
/// while receiving, 60 a certificate that does not verify).
pub fn curl_status(cmd: &mut std::process::Command) -> Result<u16, String> {
    let out = cmd
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
        .output()
        .map_err(|e| format!("curl did not run: {e}"))?;
    let code: u16 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    if out.status.success() && code != 0 {
        return Ok(code);
    }
    Err(format!(
        "curl exit {}: {}",
        out.status.code().map_or("signal".into(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// A download started by [`Pair::download`]: `Ok(bytes received)` if curl
/// finished it, else curl's exit code and error.
pub fn download_result(child: Child) -> Result<u64, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "curl exit {:?}: {} ({text})",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse::<f64>().ok())
        .map(|n| n as u64)
        .ok_or_else(|| format!("curl said {text}"))
}

/// What a keep-alive load (`Pair::keepalive_load`) saw: its requests, and the
/// failed ones as `at client why` lines (each a first-try failure: the clients
/// never retry); per client, the longest time between two answers.
pub struct LoadReport {
    pub requests: usize,
    pub failed: Vec<String>,
    pub longest_gap: Duration,
}

pub fn load_report(log: &Path) -> LoadReport {
    let text = std::fs::read_to_string(log).expect("keep-alive log");
    let mut last: std::collections::HashMap<&str, f64> = Default::default();
    let (mut requests, mut failed, mut gap) = (0, Vec::new(), 0f64);
    for l in text.lines() {
        let mut f = l.splitn(3, ' ');
        let (Some(t), Some(n), Some(status)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let Ok(t) = t.parse::<f64>() else { continue };
        requests += 1;
        if status == "200" {
            if let Some(prev) = last.insert(n, t) {
                gap = gap.max(t - prev);
            }
        } else {
            failed.push(l.to_string());
        }
    }
    LoadReport {
        requests,
        failed,
        longest_gap: Duration::from_secs_f64(gap),
    }
}
