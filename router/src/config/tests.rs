use super::*;

const GOOD: &str = "\
cloud_domain: example.com
state_dir: /tmp/state
listen:
  http: 127.0.0.1:0
  admin: 127.0.0.1:0
spi:
  source: spool
  spool:
    path: /tmp/spool
    interval: 200ms
upstream:
  connect_timeout: 2s
";

fn err(text: &str) -> ConfigError {
    Config::parse(text, "r.yaml").expect_err("must be rejected")
}

#[test]
fn good_config_parses_with_defaults() {
    let c = Config::parse(GOOD, "r.yaml").expect("valid");
    assert_eq!(c.ha_dns_prefix, "ha-");
    assert_eq!(c.endpoint_types, ["load_balancer"]);
    assert_eq!(c.upstream.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.upstream.idle_timeout, Duration::from_secs(8));
    assert_eq!(
        c.spi.spool.expect("spool").interval,
        Duration::from_millis(200)
    );
}

#[test]
fn unknown_key_names_file_line_and_field() {
    let e = err(&GOOD.replace("  connect_timeout: 2s", "  conect_timeout: 2s"));
    assert_eq!(e.line, Some(12));
    assert_eq!(e.field, "upstream.conect_timeout");
    assert!(e.message.contains("unknown field"), "{e}");
    assert!(
        e.to_string()
            .starts_with("r.yaml:12: upstream.conect_timeout: "),
        "{e}"
    );
}

#[test]
fn bad_value_names_its_field() {
    let e = err(&GOOD.replace("http: 127.0.0.1:0", "http: not-an-address"));
    assert_eq!((e.line, e.field.as_str()), (Some(4), "listen.http"), "{e}");
    let e = err(&GOOD.replace("interval: 200ms", "interval: soon"));
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(10), "spi.spool.interval"),
        "{e}"
    );
    let e = err(&GOOD.replace("source: spool", "source: carrier-pigeon"));
    assert_eq!((e.line, e.field.as_str()), (Some(7), "spi.source"), "{e}");
}

#[test]
fn client_key_prefixes_default_and_are_checked() {
    let c = Config::parse(GOOD, "r.yaml").expect("valid");
    assert_eq!(c.limits.client_keys(), per_source::KeyRule::default());
    let wide = Config::parse(
        &format!("{GOOD}limits:\n  client_ipv6_prefix: 56\n"),
        "r.yaml",
    )
    .expect("valid");
    assert_eq!(
        wide.limits.client_keys(),
        per_source::KeyRule::new(32, 56).expect("rule")
    );
    let e = err(&format!("{GOOD}limits:\n  client_ipv6_prefix: 8\n"));
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(14), "limits.client_ipv6_prefix"),
        "{e}"
    );
    assert!(e.message.contains("from 32 to 128"), "{e}");
    let e = err(&format!("{GOOD}limits:\n  client_ipv4_prefix: 33\n"));
    assert_eq!(e.field, "limits.client_ipv4_prefix", "{e}");
}

#[test]
fn semantic_errors_point_at_the_field() {
    let e = err(&GOOD.replace("cloud_domain: example.com", "cloud_domain: 'bad domain'"));
    assert_eq!((e.line, e.field.as_str()), (Some(1), "cloud_domain"), "{e}");
    let e = err(&format!("{GOOD}limits:\n  max_header_bytes: 100\n"));
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(14), "limits.max_header_bytes"),
        "{e}"
    );
    // The lines to syslog only, with no syslog: refused, naming the key.
    let e = err(&format!("{GOOD}access_log:\n  stderr: false\n"));
    assert_eq!(e.field, "access_log.stderr", "{e}");
    assert!(
        e.to_string().contains("access_log.syslog is not set"),
        "{e}"
    );
    let syslog_only =
        "access_log:\n  stderr: false\n  syslog: {address: \"udp://127.0.0.1:514\"}\n";
    let c = Config::parse(&format!("{GOOD}{syslog_only}"), "r.yaml").expect("valid");
    assert!(!c.access_log.stderr);
}

#[test]
fn threads_and_member_idle_connections() {
    let c = Config::parse(GOOD, "r.yaml").expect("valid");
    assert_eq!((c.worker_threads, c.work_stealing), (0, false));
    // Unset, as many idle connections as request slots.
    assert_eq!(
        c.upstream.max_idle(),
        c.upstream.max_connections_per_backend
    );
    let c = Config::parse(
        &format!("{GOOD}worker_threads: 4\nwork_stealing: true\n"),
        "r.yaml",
    )
    .expect("valid");
    assert_eq!((c.worker_threads, c.work_stealing), (4, true));
    let e = err(&format!("{GOOD}worker_threads: 100000\n"));
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(13), "worker_threads"),
        "{e}"
    );
    assert!(e.message.contains("1024"), "{e}");
}

#[test]
fn missing_required_key_is_reported() {
    let e = err("cloud_domain: example.com\n");
    assert!(e.message.contains("state_dir"), "{e}");
}

#[test]
fn spool_source_needs_a_path() {
    let e = err("cloud_domain: example.com\nstate_dir: /tmp/x\nspi:\n  source: spool\n");
    assert_eq!(e.field, "spi.spool");
}

#[test]
fn not_yaml_at_all() {
    let e = err("cloud_domain: [unclosed\n");
    assert!(e.line.is_some(), "{e}");
}

#[test]
fn missing_file_is_named() {
    let e = Config::load(Path::new("/nonexistent/router.yaml")).expect_err("missing");
    assert!(
        e.to_string().starts_with("/nonexistent/router.yaml: "),
        "{e}"
    );
}

#[test]
fn shipped_example_configs_are_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("deploy/examples") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
            seen += 1;
        }
    }
    assert!(seen >= 2, "router.yaml and demo.yaml");
}

#[test]
fn stomp_source_is_validated() {
    let base = "cloud_domain: example.com\nstate_dir: /tmp/x\nspi:\n  source: stomp\n";
    assert_eq!(err(base).field, "spi.stomp");
    let e = err(&format!(
        "{base}  stomp:\n    hosts: [amq1]\n    destination: /queue/a\n"
    ));
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(6), "spi.stomp.hosts"),
        "{e}"
    );
    let e = err(&format!(
        "{base}  stomp:\n    hosts: [amq1:61613]\n    destination: routinginfo\n"
    ));
    assert_eq!(e.field, "spi.stomp.destination");
    let e = err(&format!(
        "{base}  stomp:\n    hosts: [amq1:61613]\n    destination: /topic/routinginfo\n    subscription_name: a\n"
    ));
    assert_eq!(e.field, "spi.stomp.subscription_name");
    let ok = Config::parse(
        &format!("{base}  stomp:\n    hosts: [amq1:61613, amq2:61613]\n    destination: /topic/routinginfo\n    client_id: router-a\n    subscription_name: router-a\n    heartbeat: 2s\n"),
        "r.yaml",
    )
    .expect("valid");
    let stomp = ok.spi.stomp.expect("stomp");
    assert_eq!(stomp.prefetch, 256);
    assert_eq!(stomp.heartbeat, Duration::from_secs(2));
}

#[test]
fn health_defaults_and_errors() {
    let c = Config::parse(GOOD, "r.yaml").expect("valid");
    let s = c.health.settings();
    assert!(s.active && s.gate_new && c.health.fail_open);
    assert_eq!((s.rise, s.fall, s.passive_failures), (2, 3, 3));
    assert_eq!(s.check.statuses.len(), 3);
    let with = |block: &str| format!("{GOOD}health:\n{block}");
    let e = err(&with("  statuses: [2xx, 7xx]\n"));
    assert_eq!(e.field, "health.statuses", "{e}");
    assert!(e.message.contains("7xx"), "{e}");
    let e = err(&with("  path: health\n"));
    assert_eq!((e.line, e.field.as_str()), (Some(14), "health.path"), "{e}");
    let e = err(&with("  fall: 0\n"));
    assert_eq!(e.field, "health.fall", "{e}");
    let e = err(&with("  interval: 1s\n  timeout: 2s\n"));
    assert_eq!(e.field, "health.timeout", "{e}");
    let c = Config::parse(
        &with("  checks: false\n  keep_awake_port: 80\n  host: www.example.com\n"),
        "r.yaml",
    )
    .expect("valid");
    assert!(!c.health.checks);
    assert_eq!(c.health.keep_awake_port, Some(80));
}

#[test]
fn slow_start_is_off_by_default_and_bounded() {
    let c = Config::parse(GOOD, "r.yaml").expect("valid");
    assert_eq!(c.member_health().slow_start, Duration::ZERO);
    let c = Config::parse(&format!("{GOOD}  slow_start: 30s\n"), "r.yaml").expect("valid");
    assert_eq!(c.member_health().slow_start, Duration::from_secs(30));
    let e = err(&format!("{GOOD}  slow_start: 2h\n"));
    assert_eq!(
        (e.line, e.field.as_str()),
        (Some(13), "upstream.slow_start"),
        "{e}"
    );
}

#[test]
fn tls_keys_go_together_and_redirect_needs_https() {
    let e = err(&format!(
        "{GOOD}tls:\n  default_cert: /etc/router/wild.pem\n"
    ));
    assert_eq!(e.field, "tls.default_key", "{e}");
    let e = err(&format!("{GOOD}tls:\n  redirect_http: true\n"));
    assert_eq!(e.field, "tls.redirect_http", "{e}");
    let text = GOOD
        .replace(
            "  admin: 127.0.0.1:0\n",
            "  admin: 127.0.0.1:0\n  https: 127.0.0.1:0\n",
        )
        .replace("upstream:\n", "upstream:\n  tls:\n    verify: false\n")
        + "tls:\n  default_cert: /c.pem\n  default_key: /k.pem\n  redirect_http: true\n";
    let c = Config::parse(&text, "r.yaml").expect("valid");
    assert!(c.listen.https.is_some() && c.tls.redirect_http && !c.upstream.tls.verify);
}

#[test]
fn http3_needs_https_and_its_settings_are_checked() {
    let with = |listen: &str, extra: &str| {
        GOOD.replace(
            "  admin: 127.0.0.1:0\n",
            &format!("  admin: 127.0.0.1:0\n{listen}"),
        ) + extra
    };
    let e = err(&with("  http3: 127.0.0.1:0\n", ""));
    assert_eq!(e.field, "listen.http3", "{e}");
    let both = "  https: 127.0.0.1:0\n  http3: 127.0.0.1:0\n";
    let e = err(&with(both, "http3:\n  max_concurrent_streams: 0\n"));
    assert_eq!(e.field, "http3.max_concurrent_streams", "{e}");
    let e = err(&with(both, "http3:\n  alt_svc_maxage: 1h\n"));
    assert!(e.to_string().contains("alt_svc_maxage"), "{e}");
    let c = Config::parse(
        &with(
            both,
            "http3:\n  alt_svc_max_age: 1h\n  retry_above_handshakes: 0\n",
        ),
        "r.yaml",
    )
    .expect("valid");
    assert!(c.listen.http3.is_some());
    assert_eq!(
        c.http3.alt_svc_max_age,
        std::time::Duration::from_secs(3600)
    );
    assert_eq!(c.http3.retry_above_handshakes, 0);
    assert!(c.http3.alt_svc, "on by default");
}

#[test]
fn admin_defaults_to_loopback_9090_even_in_a_listen_block_and_null_turns_it_off() {
    let base = "cloud_domain: example.com\nstate_dir: /tmp/state\nspi:\n  source: none\n";
    let c = Config::parse(
        &format!("{base}listen:\n  http: 127.0.0.1:8080\n"),
        "r.yaml",
    )
    .expect("valid");
    assert_eq!(
        c.listen.admin,
        Some("127.0.0.1:9090".parse().expect("addr"))
    );
    let c = Config::parse(
        &format!("{base}listen:\n  http: 127.0.0.1:8080\n  admin: null\n"),
        "r.yaml",
    )
    .expect("valid");
    assert_eq!(c.listen.admin, None);
    let e = err(&format!("{GOOD}limits:\n  max_admin_connections: 0\n"));
    assert_eq!(e.field, "limits.max_admin_connections", "{e}");
}

#[test]
fn reconcile_and_admin_settings_are_checked_with_their_line() {
    let ok = format!(
        "{GOOD}admin:\n  token_file: /etc/router/admin.token\nreconcile:\n  url: https://broker.example.com/broker/rest\n  interval: 0s\n"
    );
    let c = Config::parse(&ok, "r.yaml").expect("valid");
    let r = c.reconcile.expect("reconcile");
    assert!(r.interval.is_zero() && !r.apply && r.concurrency == 4);
    for (bad, field) in [
        ("reconcile:\n  url: ftp://broker/x\n", "reconcile.url"),
        (
            "reconcile:\n  url: http://b/x\n  concurrency: 0\n",
            "reconcile.concurrency",
        ),
        (
            "reconcile:\n  url: http://b/x\n  user: admin\n",
            "reconcile.user",
        ),
        ("reconcile:\n  url: http://b/x\n  nope: 1\n", "nope"),
        ("admin:\n  token: x\n", "token"),
    ] {
        let e = err(&format!("{GOOD}{bad}")).to_string();
        assert!(e.contains("r.yaml:") && e.contains(field), "{bad}: {e}");
    }
}

#[test]
fn a_partial_section_keeps_the_defaults_of_the_keys_it_leaves_out() {
    let text = format!(
        "{GOOD}limits:\n  idle_timeout: 5s\ntls:\n  resumption: false\nhealth:\n  rise: 3\n"
    );
    let c = Config::parse(&text, "r.yaml").expect("valid");
    let want = Limits {
        idle_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    assert_eq!(format!("{:?}", c.limits), format!("{want:?}"));
    let want = TlsConfig {
        resumption: false,
        ..TlsConfig::default()
    };
    assert_eq!(format!("{:?}", c.tls), format!("{want:?}"));
    let want = HealthConfig {
        rise: 3,
        ..HealthConfig::default()
    };
    assert_eq!(format!("{:?}", c.health), format!("{want:?}"));
    let want = UpstreamConfig {
        connect_timeout: Duration::from_secs(2),
        ..UpstreamConfig::default()
    };
    assert_eq!(format!("{:?}", c.upstream), format!("{want:?}"));
    // A `listen:` block without `http` has no plain listener (no struct default):
    // here none at all, which is refused.
    let e = err(&GOOD.replace("  http: 127.0.0.1:0\n", ""));
    assert_eq!(e.field, "listen.http", "{e}");
}

#[test]
fn acme_settings_are_checked_with_their_line() {
    let ok = format!(
        "{GOOD}acme:\n  directory: https://acme-staging-v02.api.letsencrypt.org/directory\n  contact: [\"mailto:ops@example.com\"]\napp_defaults:\n  acme: true\n"
    );
    let c = Config::parse(&ok, "r.yaml").expect("valid");
    assert_eq!(c.acme.challenge, AcmeChallenge::Http01);
    assert_eq!(c.acme.check_interval, Duration::from_secs(10));
    assert_eq!(c.app_defaults.acme, Some(true));
    let pair = ok.replace(
        "acme:\n",
        "admin:\n  token_file: /etc/router/admin.token\nacme:\n  peer: \"10.0.0.2:9090\"\n  node: b\n  peer_timeout: 5s\n",
    );
    let c = Config::parse(&pair, "r.yaml").expect("a pair");
    assert_eq!(c.acme.node, Some(crate::config::Node::B));
    assert_eq!(c.acme.peer_timeout, Duration::from_secs(5));
    for (bad, field) in [
        (
            "acme:\n  directory: http://ca.example/dir\n",
            "acme.directory",
        ),
        (
            "acme:\n  directory: https://ca.example/dir\n  contact: [ops@example.com]\n",
            "acme.contact",
        ),
        (
            "acme:\n  directory: https://ca.example/dir\n  challenge: tls-alpn-01\n",
            "acme.challenge",
        ),
        (
            "acme:\n  directory: https://ca.example/dir\n  challenge: dns-01\n",
            "challenge",
        ),
        (
            "acme:\n  directory: https://ca.example/dir\n  retry_after: 0s\n",
            "acme.retry_after",
        ),
        ("app_defaults:\n  acme: maybe\n", "acme"),
        (
            "acme:\n  directory: https://ca.example/dir\n  peer: router-b\n  node: a\n",
            "acme.peer",
        ),
        (
            "acme:\n  directory: https://ca.example/dir\n  peer: 10.0.0.2:9090\n",
            "acme.node",
        ),
        (
            "acme:\n  directory: https://ca.example/dir\n  peer: 10.0.0.2:9090\n  node: c\n",
            "node",
        ),
        // Private keys cross the admin API: not without a token.
        (
            "acme:\n  directory: https://ca.example/dir\n  peer: 10.0.0.2:9090\n  node: b\n",
            "acme.peer",
        ),
    ] {
        let e = err(&format!("{GOOD}{bad}")).to_string();
        assert!(e.contains("r.yaml:") && e.contains(field), "{bad}: {e}");
    }
}

#[test]
fn tls_groups_are_named_known_and_once() {
    let c = Config::parse(GOOD, "r.yaml").expect("valid");
    assert_eq!(c.tls.groups, crate::tls::groups::default_names());
    let ok = format!("{GOOD}tls:\n  groups: [X25519, secp256r1]\n");
    assert_eq!(
        Config::parse(&ok, "r.yaml").expect("valid").tls.groups,
        ["X25519", "secp256r1"]
    );
    for bad in ["[x448]", "[]", "[x25519, X25519]"] {
        let e = err(&format!("{GOOD}tls:\n  groups: {bad}\n")).to_string();
        assert!(
            e.contains("r.yaml:") && e.contains("tls.groups"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn pair_settings_default_to_acme_and_are_checked() {
    let with_admin = format!("{GOOD}admin:\n  token_file: /etc/router/admin.token\n");
    let ok =
        format!("{with_admin}pair:\n  peer: \"10.0.0.2:9090\"\n  node: a\n  interval: 500ms\n");
    let c = Config::parse(&ok, "r.yaml").expect("a pair");
    assert_eq!(c.pair.node, Some(crate::config::Node::A));
    assert_eq!(c.pair.interval, Duration::from_millis(500));
    assert_eq!(c.pair.timeout, Duration::from_secs(3));
    // acme.peer and acme.node alone still make the pair.
    let acme = format!("{with_admin}acme:\n  peer: \"10.0.0.2:9090\"\n  node: b\n");
    let c = Config::parse(&acme, "r.yaml").expect("acme's pair");
    let link = crate::pair::link::effective(&c.pair, (c.acme.peer.as_deref(), c.acme.node));
    assert_eq!(
        link,
        Some(("10.0.0.2:9090".to_string(), crate::config::Node::B))
    );
    for (bad, field) in [
        (
            format!("{with_admin}pair:\n  peer: \"10.0.0.2:9090\"\n"),
            "pair.node",
        ),
        (format!("{with_admin}pair:\n  node: a\n"), "pair.peer"),
        (
            format!("{with_admin}pair:\n  peer: \"10.0.0.2\"\n  node: a\n"),
            "pair.peer",
        ),
        (
            format!("{GOOD}pair:\n  peer: \"10.0.0.2:9090\"\n  node: a\n"),
            "pair.peer",
        ),
        (
            format!("{with_admin}pair:\n  peer: \"10.0.0.2:9090\"\n  node: a\n  timeout: 10ms\n"),
            "pair.timeout",
        ),
    ] {
        assert_eq!(err(&bad).field, field, "{bad}");
    }
}
