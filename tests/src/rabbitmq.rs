//! A real RabbitMQ (Debian's `rabbitmq-server`) for tests: a node of its own under a
//! private directory, loopback only, on free ports (AMQP, distribution and a private
//! epmd: `RABBITMQ_NODENAME`, `RABBITMQ_NODE_PORT`, `ERL_EPMD_PORT` and its own
//! `RABBITMQ_MNESIA_BASE`, so no system service is touched). Stopped by PID when dropped, along
//! with the epmd it started.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RabbitMq {
    pub amqp: SocketAddr,
    pub base: PathBuf,
    epmd_port: u16,
    child: Option<Child>,
}

const LOCALHOST: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

impl RabbitMq {
    pub fn start() -> RabbitMq {
        let server = "/usr/lib/rabbitmq/bin/rabbitmq-server";
        assert!(
            std::path::Path::new(server).exists(),
            "{server} is missing: apt-get install rabbitmq-server (tests/run.sh does)"
        );
        let base = crate::tempdir("rabbitmq");
        let (amqp_port, dist_port, epmd_port) = (
            crate::free_port(LOCALHOST),
            crate::free_port(LOCALHOST),
            crate::free_port(LOCALHOST),
        );
        std::fs::create_dir_all(base.join("mnesia")).expect("mnesia");
        std::fs::create_dir_all(base.join("log")).expect("log");
        std::fs::write(
            base.join("rabbitmq.conf"),
            format!("listeners.tcp.1 = 127.0.0.1:{amqp_port}\nloopback_users.guest = true\n"),
        )
        .expect("conf");
        std::fs::write(base.join("enabled_plugins"), "[].\n").expect("plugins");
        let log = std::fs::File::create(base.join("console.log")).expect("log");
        let child = Command::new(server)
            .env("HOME", &base)
            .env("RABBITMQ_NODENAME", format!("rt{amqp_port}@localhost"))
            .env("RABBITMQ_CONFIG_FILE", base.join("rabbitmq.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins"),
            )
            .env("RABBITMQ_MNESIA_BASE", base.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", base.join("log"))
            .env("RABBITMQ_PID_FILE", base.join("rabbit.pid"))
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("ERL_EPMD_PORT", epmd_port.to_string())
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .env(
                "PATH",
                format!(
                    "/usr/lib/rabbitmq/bin:{}",
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .current_dir(&base)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("rabbitmq-server runs");
        let amqp: SocketAddr = format!("127.0.0.1:{amqp_port}").parse().expect("addr");
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::net::TcpStream::connect(amqp).is_err() {
            assert!(
                Instant::now() < deadline,
                "RabbitMQ did not open {amqp} in 120 s; see {}/console.log",
                base.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        RabbitMq {
            amqp,
            base,
            epmd_port,
            child: Some(child),
        }
    }

    pub fn uri(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.amqp)
    }

    /// The PIDs of processes whose environment names our epmd port: the node's
    /// beam and the epmd daemon it started.
    fn our_erlang_pids(&self) -> Vec<u32> {
        let needle = format!("ERL_EPMD_PORT={}", self.epmd_port);
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Ok(env) = std::fs::read(entry.path().join("environ"))
                && env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes())
            {
                pids.push(pid);
            }
        }
        pids
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The script's beam child and the epmd daemon outlive it: end them by PID.
        for pid in self.our_erlang_pids() {
            if pid != std::process::id() {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}
