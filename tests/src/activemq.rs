//! A real ActiveMQ (Debian's `activemq` package) for tests: a private base directory,
//! STOMP and OpenWire on free loopback ports, started with the JVM directly (`java -jar
//! activemq.jar start` with its own `activemq.base` and `activemq.data`, not the
//! system service) and stopped by PID when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct ActiveMq {
    pub stomp: std::net::SocketAddr,
    /// STOMP over TLS, when started with [`ActiveMq::start_tls`].
    pub stomp_tls: Option<std::net::SocketAddr>,
    pub base: PathBuf,
    child: Option<Child>,
    /// The network namespace it runs in (its ports are reachable there only).
    netns: Option<String>,
}

/// PKCS12 stores for the broker's TLS connector (password `changeit`).
pub struct BrokerTls {
    pub keystore: PathBuf,
    pub truststore: PathBuf,
}

const JAR: &str = "/usr/share/activemq/bin/activemq.jar";

const LOCALHOST: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

impl ActiveMq {
    /// Starts a broker and waits until its STOMP port accepts connections.
    pub fn start() -> ActiveMq {
        ActiveMq::start_with(None)
    }

    /// Also listens for STOMP over TLS, requiring a client certificate signed by the
    /// truststore's CA.
    pub fn start_tls(tls: BrokerTls) -> ActiveMq {
        ActiveMq::start_with(Some(tls))
    }

    /// Starts a broker inside network namespace `ns`, listening on `ip` (STOMP 61613,
    /// OpenWire 61616: the namespace is ours alone).
    pub fn start_in_netns(ns: &str, ip: &str) -> ActiveMq {
        ActiveMq::start_full(None, Some((ns.to_string(), ip.to_string())))
    }

    fn start_with(tls: Option<BrokerTls>) -> ActiveMq {
        ActiveMq::start_full(tls, None)
    }

    fn start_full(tls: Option<BrokerTls>, netns: Option<(String, String)>) -> ActiveMq {
        assert!(
            std::path::Path::new(JAR).exists(),
            "{JAR} is missing: apt-get install activemq (tests/run.sh does)"
        );
        let base = crate::tempdir("activemq");
        let (host, stomp_port, openwire_port) = match &netns {
            Some((_, ip)) => (ip.clone(), 61613, 61616),
            None => (
                "127.0.0.1".to_string(),
                crate::free_port(LOCALHOST),
                crate::free_port(LOCALHOST),
            ),
        };
        let tls_port = crate::free_port(LOCALHOST);
        let (ssl_context, ssl_connector) = match &tls {
            Some(t) => (
                format!(
                    r#"<sslContext><sslContext keyStore="file:{}" keyStorePassword="changeit" keyStoreType="PKCS12"
        trustStore="file:{}" trustStorePassword="changeit" trustStoreType="PKCS12"/></sslContext>"#,
                    t.keystore.display(),
                    t.truststore.display()
                ),
                format!(
                    r#"<transportConnector name="stomp+ssl" uri="stomp+ssl://127.0.0.1:{tls_port}?needClientAuth=true&amp;transport.closeAsync=false"/>"#
                ),
            ),
            None => (String::new(), String::new()),
        };
        // In a namespace (the HA pair): deploy/activemq's composite topic, which copies
        // every event published to `routinginfo` into each router's queue.
        let fan_out = if netns.is_some() {
            let snippet = std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../deploy/activemq/activemq-routers.xml"),
            )
            .expect("deploy/activemq/activemq-routers.xml");
            let start = snippet
                .find("<destinationInterceptors>")
                .expect("interceptors in the snippet");
            let end = snippet
                .find("</destinationInterceptors>")
                .expect("interceptors end")
                + "</destinationInterceptors>".len();
            snippet[start..end].to_string()
        } else {
            String::new()
        };
        std::fs::create_dir_all(base.join("conf")).expect("conf");
        std::fs::create_dir_all(base.join("data")).expect("data");
        std::fs::write(
            base.join("conf/activemq.xml"),
            format!(
                r#"<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <bean class="org.springframework.beans.factory.config.PropertyPlaceholderConfigurer"/>
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="test"
          schedulerSupport="false" dataDirectory="${{activemq.data}}">
    <persistenceAdapter><kahaDB directory="${{activemq.data}}/kahadb"/></persistenceAdapter>
    {fan_out}
    {ssl_context}
    <transportConnectors>
      <transportConnector name="openwire" uri="tcp://{host}:{openwire_port}"/>
      <transportConnector name="stomp" uri="stomp://{host}:{stomp_port}?transport.closeAsync=false"/>
      {ssl_connector}
    </transportConnectors>
  </broker>
</beans>
"#
            ),
        )
        .expect("activemq.xml");
        std::fs::write(
            base.join("conf/log4j.properties"),
            "log4j.rootLogger=WARN, stdout\n\
             log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n\
             log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n\
             log4j.appender.stdout.layout.ConversionPattern=%d %-5p %c{1} - %m%n\n",
        )
        .expect("log4j");
        let mut amq = ActiveMq {
            stomp: format!("{host}:{stomp_port}").parse().expect("addr"),
            stomp_tls: tls
                .as_ref()
                .map(|_| format!("127.0.0.1:{tls_port}").parse().expect("addr")),
            base,
            child: None,
            netns: netns.map(|(ns, _)| ns),
        };
        amq.launch();
        amq
    }

    fn launch(&mut self) {
        let b = self.base.display().to_string();
        let log = std::fs::File::create(self.base.join("console.log")).expect("log");
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "java"]);
                c
            }
            None => Command::new("java"),
        };
        let child = cmd
            .args(["-Xms64m", "-Xmx256m", "--add-reads=java.xml=java.logging"])
            .args([
                "--add-opens",
                "java.base/java.security=ALL-UNNAMED",
                "--add-opens",
                "java.base/java.net=ALL-UNNAMED",
                "--add-opens",
                "java.base/java.lang=ALL-UNNAMED",
                "--add-opens",
                "java.base/java.util=ALL-UNNAMED",
                "--add-opens",
                "java.naming/javax.naming.spi=ALL-UNNAMED",
                "--add-opens",
                "java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
                "--add-opens",
                "java.base/java.util.concurrent=ALL-UNNAMED",
                "--add-opens",
                "java.base/java.util.concurrent.atomic=ALL-UNNAMED",
            ])
            .arg(format!("-Dactivemq.classpath={b}/conf"))
            .arg("-Dactivemq.home=/usr/share/activemq")
            .arg(format!("-Dactivemq.base={b}"))
            .arg(format!("-Dactivemq.conf={b}/conf"))
            .arg(format!("-Dactivemq.data={b}/data"))
            .args(["-jar", JAR, "start"])
            .arg(format!("xbean:file:{b}/conf/activemq.xml"))
            .current_dir(&self.base)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("java runs (apt-get install activemq)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        let ports = [Some(self.stomp), self.stomp_tls];
        let netns = self.netns.clone();
        let open = |p: &std::net::SocketAddr| match &netns {
            None => std::net::TcpStream::connect(p).is_ok(),
            Some(ns) => Command::new("ip")
                .args(["netns", "exec", ns, "bash", "-c"])
                .arg(format!("exec 3<>/dev/tcp/{}/{}", p.ip(), p.port()))
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        };
        while ports.iter().flatten().any(|p| !open(p)) {
            assert!(
                Instant::now() < deadline,
                "ActiveMQ did not open {} in 90 s; see {}/console.log",
                self.stomp,
                b
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A plain-TCP session to this broker consuming `destination` (prefetch 1).
    pub fn session_config(&self, destination: &str) -> spi_consumer::source::stomp::SessionConfig {
        spi_consumer::source::stomp::SessionConfig {
            hosts: vec![self.stomp.to_string()],
            login: None,
            passcode: None,
            vhost: "localhost".into(),
            client_id: None,
            destination: destination.into(),
            subscription_name: None,
            prefetch: 1,
            heartbeat: Duration::from_millis(1000),
            timeout: Duration::from_secs(10),
            tls: None,
        }
    }

    /// Stops the broker (SIGTERM, then SIGKILL after 30 s) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// Stops and starts the broker on the same data (persistent messages survive).
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

impl Drop for ActiveMq {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Its private base directory (data, logs) goes with it.
        let _ = std::fs::remove_dir_all(&self.base);
    }
}
