//! Pebble, Let's Encrypt's test ACME CA (Debian `pebble`), for the ACME tests.
//!
//! Pebble and its DNS (`pebble-challtestsrv`, every name answered with
//! 127.0.0.1, no IPv6) listen on ports they choose themselves; the ports are read
//! back from the kernel's table of each process's sockets. Pebble's HTTPS
//! certificate is signed by a CA made here ([`Pebble::ca_file`]). Pebble keeps
//! its defaults that make it a hard CA to pass: a random wait of up to 15 s
//! before each validation, and 5 % of nonces refused. Both processes are killed
//! by PID when this is dropped, also when the test fails.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::pki::Ca;

/// A running Pebble and its DNS.
pub struct Pebble {
    /// The ACME directory URL.
    pub directory: String,
    /// The CA Pebble's own HTTPS certificate chains to.
    pub ca_file: PathBuf,
    /// Pebble's management API (`https://127.0.0.1:PORT`).
    pub management: String,
    /// The network namespace Pebble runs in (`None`: this one).
    netns: Option<String>,
    dir: PathBuf,
    children: Vec<Child>,
}

/// Where Pebble runs and what its DNS answers.
pub struct Place {
    /// A network namespace (full name) to run in; `None`: the test's own.
    pub netns: Option<String>,
    /// The address Pebble and its DNS listen on.
    pub ip: String,
    /// The address every name resolves to (where the router answers).
    pub answer: String,
}

impl Place {
    fn command(&self, program: &str) -> Command {
        match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, program]);
                c
            }
            None => Command::new(program),
        }
    }
}

impl Pebble {
    /// Pebble validating HTTP-01 answers on 127.0.0.1:`http_port` and TLS-ALPN-01
    /// ones on 127.0.0.1:`tls_port`.
    pub fn start(http_port: u16, tls_port: u16) -> Pebble {
        Pebble::start_with(http_port, tls_port, None)
    }

    /// The same, issuing certificates valid for `validity` seconds (Pebble's
    /// default: five years).
    pub fn start_with(http_port: u16, tls_port: u16, validity: Option<u64>) -> Pebble {
        let here = Place {
            netns: None,
            ip: "127.0.0.1".into(),
            answer: "127.0.0.1".into(),
        };
        Pebble::start_at(&here, http_port, tls_port, validity)
    }

    /// The same at `place` (`ip netns exec` runs the program itself, so the
    /// children's PIDs are Pebble's and its DNS's).
    pub fn start_at(place: &Place, http_port: u16, tls_port: u16, validity: Option<u64>) -> Pebble {
        for program in ["pebble", "pebble-challtestsrv"] {
            assert!(
                Command::new("sh")
                    .args(["-c", &format!("command -v {program}")])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success()),
                "{program} is missing: apt-get install pebble"
            );
        }
        let dir = crate::tempdir("pebble");
        std::fs::create_dir_all(&dir).expect("pebble dir");
        let ca = Ca::new("pebble's HTTPS test CA");
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, &ca.pem).expect("write CA");
        let leaf = ca.leaf(&["localhost", "127.0.0.1", &place.ip]);
        std::fs::write(dir.join("cert.pem"), &leaf.cert_pem).expect("cert");
        std::fs::write(dir.join("key.pem"), &leaf.key_pem).expect("key");
        let mut children = Vec::new();
        let ip = &place.ip;
        let dns = place
            .command("pebble-challtestsrv")
            .args(["-dns01", &format!("{ip}:0"), "-http01", "", "-https01", ""])
            .args(["-tlsalpn01", "", "-management", &format!("{ip}:0")])
            .args(["-defaultIPv4", &place.answer, "-defaultIPv6", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv");
        let dns_pid = dns.id();
        children.push(dns);
        let mut pebble = Pebble {
            directory: String::new(),
            ca_file,
            management: String::new(),
            netns: place.netns.clone(),
            dir: dir.clone(),
            children,
        };
        let dns_port = ports_of(dns_pid, "udp", 1)[0];
        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("{ip}:0"),
            "managementListenAddress": format!("{ip}:0"),
            "certificate": dir.join("cert.pem"),
            "privateKey": dir.join("key.pem"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        let mut config = config;
        if let Some(secs) = validity {
            config["pebble"]["certificateValidityPeriod"] = serde_json::json!(secs);
        }
        let config_file = dir.join("pebble.json");
        std::fs::write(&config_file, config.to_string()).expect("pebble config");
        let log = std::fs::File::create(dir.join("pebble.log")).expect("pebble log");
        let child = place
            .command("pebble")
            // Pebble rejects 5 % of valid nonces by default (to exercise clients'
            // retries). instant-acme tries a request three times, so about one
            // request in 8 000 still fails; the issuer then retries the order a
            // minute later and a test counting orders sees one more (CI run 34:
            // `badNonce` on the order taken over). The retry is instant-acme's
            // own, tested there; here every nonce is good.
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .arg("-config")
            .arg(&config_file)
            .args(["-dnsserver", &format!("{ip}:{dns_port}")])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("pebble");
        let pid = child.id();
        pebble.children.push(child);
        // Two HTTPS ports: the one with a directory is ACME's.
        let ports = ports_of(pid, "tcp", 2);
        let url = |port: u16, path: &str| format!("https://{ip}:{port}{path}");
        let (acme, management): (Vec<u16>, Vec<u16>) = ports
            .iter()
            .partition(|p| pebble.get(&url(**p, "/dir")).contains("newNonce"));
        assert!(
            acme.len() == 1 && management.len() == 1,
            "pebble's ports {ports:?}: no single ACME directory among them"
        );
        pebble.directory = url(acme[0], "/dir");
        pebble.management = url(management[0], "");
        pebble
    }

    /// A GET to Pebble's HTTPS (curl, trusting [`Pebble::ca_file`]): the body, or
    /// empty on any failure.
    pub fn get(&self, url: &str) -> String {
        let place = Place {
            netns: self.netns.clone(),
            ip: String::new(),
            answer: String::new(),
        };
        let out = place
            .command("curl")
            .args(["-s", "--max-time", "10", "--cacert"])
            .arg(&self.ca_file)
            .arg(url)
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Pebble {
    /// How many orders Pebble holds (each new order is one; it logs the count).
    pub fn orders(&self) -> usize {
        let log = std::fs::read_to_string(self.dir.join("pebble.log")).unwrap_or_default();
        log.lines()
            .rev()
            .find_map(|l| {
                l.split("There are now ")
                    .nth(1)?
                    .strip_suffix(" orders in the db")?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    }

    /// Stops Pebble in its tracks (`SIGSTOP`), or lets it go on (`SIGCONT`):
    /// while stopped it validates nothing and answers nothing; its waits that
    /// ended meanwhile end when it goes on.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.children.last().expect("pebble").id();
        let signal = if frozen { "-STOP" } else { "-CONT" };
        let ok = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {signal} {pid}");
    }

    /// Pebble's root, which the certificates it issues chain to (PEM).
    pub fn root(&self) -> String {
        self.get(&format!("{}/roots/0", self.management))
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `count` ports process `pid` listens on (`proto`: "tcp" or "udp"), once it
/// has them all: read from `/proc/PID/fd` (socket inodes) and `/proc/net/PROTO`.
pub fn ports_of(pid: u32, proto: &str, count: usize) -> Vec<u16> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ports = listening(pid, proto);
        if ports.len() >= count {
            return ports;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} did not listen on {count} {proto} ports within 20 s (has {ports:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn listening(pid: u32, proto: &str) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    l.strip_prefix("socket:[")?
                        .strip_suffix(']')
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    // The table of the process's own network namespace.
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/{proto}")).unwrap_or_default();
    let mut ports: Vec<u16> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() <= 9 {
                return None;
            }
            // local_address, state (0A: TCP LISTEN; 07: an unconnected UDP socket), inode.
            let listens = if proto == "tcp" {
                f[3] == "0A"
            } else {
                f[3] == "07"
            };
            (listens && inodes.iter().any(|i| i == f[9]))
                .then(|| u16::from_str_radix(f[1].rsplit(':').next()?, 16).ok())
                .flatten()
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}
