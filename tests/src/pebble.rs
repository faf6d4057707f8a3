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
    children: Vec<Child>,
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
        let leaf = ca.leaf(&["localhost", "127.0.0.1"]);
        std::fs::write(dir.join("cert.pem"), &leaf.cert_pem).expect("cert");
        std::fs::write(dir.join("key.pem"), &leaf.key_pem).expect("key");
        let mut children = Vec::new();
        let dns = Command::new("pebble-challtestsrv")
            .args(["-dns01", "127.0.0.1:0", "-http01", "", "-https01", ""])
            .args(["-tlsalpn01", "", "-management", "127.0.0.1:0"])
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
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
            children,
        };
        let dns_port = ports_of(dns_pid, "udp", 1)[0];
        let config = serde_json::json!({"pebble": {
            "listenAddress": "127.0.0.1:0",
            "managementListenAddress": "127.0.0.1:0",
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
        let child = Command::new("pebble")
            .arg("-config")
            .arg(&config_file)
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("pebble");
        let pid = child.id();
        pebble.children.push(child);
        // Two HTTPS ports: the one with a directory is ACME's.
        let ports = ports_of(pid, "tcp", 2);
        let url = |port: u16, path: &str| format!("https://127.0.0.1:{port}{path}");
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
        let out = Command::new("curl")
            .args(["-s", "--max-time", "10", "--cacert"])
            .arg(&self.ca_file)
            .arg(url)
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
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
    let table = std::fs::read_to_string(format!("/proc/net/{proto}")).unwrap_or_default();
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
