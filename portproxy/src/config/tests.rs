use super::*;
use crate::numbers::PortRange;
use ipnet::IpNet;

const GOOD: &str = "\
state_dir: /tmp/pp
admin_socket: /tmp/pp/admin.sock
metrics: 127.0.0.1:0
limits:
  max_connections: 100
  idle_timeout: 30s
gear:
  bind: 127.0.0.1
  ports: 40000-40100
cluster:
  proxy_conf: /etc/sns/proxy.conf
  trusted_sources: [10.0.0.5/32]
";

fn err(text: &str) -> ConfigError {
    Config::parse(text, "pp.yaml").expect_err("must be rejected")
}

#[test]
fn good_config_parses_with_defaults() {
    let c = Config::parse(GOOD, "pp.yaml").expect("valid");
    assert_eq!(c.limits.max_connections, 100);
    assert_eq!(c.limits.connect_timeout, Duration::from_secs(10));
    let g = c.gear.expect("gear");
    assert_eq!(g.ports, PortRange(40000..=40100));
    assert_eq!(
        g.allowed_targets,
        vec!["127.0.0.0/8".parse::<IpNet>().expect("net")]
    );
    assert_eq!(g.allocation.ports_per_user, 5);
    let cl = c.cluster.expect("cluster");
    assert_eq!(cl.peer_timeout, Duration::from_secs(3));
    assert!(cl.peers_from_hosts_only);
}

#[test]
fn errors_name_line_and_field() {
    let e = err("gear:\n  ports: 40000-30000\n");
    assert_eq!((e.line, e.field.as_str()), (Some(2), "gear.ports"), "{e}");
    let e = err("gear:\n  bnid: 1.2.3.4\n");
    assert_eq!(e.line, Some(2), "{e}");
    let e = err("limits:\n  max_connections: 0\ngear: {}\n");
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(2), "limits.max_connections"),
        "{e}"
    );
    let e = err("limits:\n  client_ipv6_prefix: 129\ngear: {}\n");
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(2), "limits.client_ipv6_prefix"),
        "{e}"
    );
    let e = err("state_dir: /x\n");
    assert!(e.to_string().contains("nothing to do"), "{e}");
    let e = err("gear:\n  allocation:\n    wraparound_uid: 0\n");
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(3), "gear.allocation.wraparound_uid"),
        "{e}"
    );
    let e = err("gear:\n  ports: 80-90\n");
    assert_eq!(e.field, "gear.ports", "{e}");
}

#[test]
fn the_shipped_example_and_its_simplenetes_files_are_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/examples/portproxy/portproxy.yaml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let cluster = c.cluster.expect("the example turns cluster mode on");
    let loaded =
        crate::cluster::load(&cluster, &Default::default()).unwrap_or_else(|(_, e)| panic!("{e}"));
    assert_eq!(loaded.live.hosts.len(), 2);
    assert_eq!(loaded.live.table.items(), 2);
}

#[test]
fn limits_fit_the_descriptors_and_share_per_source() {
    let mut l = Limits {
        max_connections: 30_000,
        ..Limits::default()
    };
    assert_eq!(l.per_source(), 15_000);
    // 20 000 descriptors: an eighth kept, two a relay.
    assert_eq!(l.fit(20_000, 0), Some(30_000));
    assert_eq!(l.max_connections, 8_750);
    assert_eq!(l.per_source(), 4_375);
    assert_eq!(l.fit(20_000, 0), None, "fits now");
    // Listeners counted too, and never below one.
    let mut tiny = Limits::default();
    tiny.fit(100, 1_000);
    assert_eq!(tiny.max_connections, 1);
    let own = Limits {
        max_connections_per_source: Some(7),
        ..Limits::default()
    };
    assert_eq!(own.per_source(), 7);
}
