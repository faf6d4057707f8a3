use super::*;

fn pm(text: &str) -> Result<Parsed<Vec<Item>>, ConfigError> {
    parse_port_mappings(text, "pm.conf", DEFAULT_PORT)
}

fn pm_err(text: &str) -> ConfigError {
    pm(text).expect_err(text)
}

#[test]
fn port_mappings_in_the_simplenetes_format() {
    let p = pm("1024:30000:101:true 1025:30000:101:false\r\n\n# a comment\n  \n61001:30001:1024:true\t61001:30002:5:v2").expect("valid");
    assert_eq!(p.value.len(), 4);
    assert_eq!(
        p.value[0],
        Item {
            cluster_port: 1024,
            host_port: 30000,
            max_conn: 101,
            send_proxy: Some(Version::V1)
        }
    );
    assert_eq!(p.value[1].send_proxy, None);
    assert_eq!(p.value[3].send_proxy, Some(Version::V2));
    // Same cluster port on several items and lines accumulates (unlike the Go proxy).
    assert_eq!(
        p.value.iter().filter(|i| i.cluster_port == 61001).count(),
        2
    );
    // Empty file, BOM, no trailing newline.
    assert!(pm("").expect("empty").value.is_empty());
    assert_eq!(
        pm("\u{feff}1024:30000:1:false").expect("bom").value.len(),
        1
    );
}

#[test]
fn every_malformed_item_names_its_line_and_field() {
    let cases: &[(&str, &str)] = &[
        ("1024:30000:8", ""),
        ("1024:30000:8:true:x", ""),
        ("1024::8:true", "hostPort"),
        ("abc:30000:8:true", "clusterPort"),
        ("1024:30000abc:8:true", "hostPort"),
        ("+1024:30000:8:true", "clusterPort"),
        ("-1024:30000:8:true", "clusterPort"),
        ("01024:30000:8:true", "clusterPort"),
        ("0:30000:8:true", "clusterPort"),
        ("65536:30000:8:true", "clusterPort"),
        ("99999999999:30000:8:true", "clusterPort"),
        ("30001:30000:8:true", "clusterPort"),
        ("1000:30000:8:true", "clusterPort"),
        ("1024:32767:8:true", "hostPort"),
        ("1024:30000:0:true", "maxConn"),
        ("1024:30000:-1:true", "maxConn"),
        ("1024:30000:1.5:true", "maxConn"),
        ("1024:30000:4294967296:true", "maxConn"),
        ("1024:30000:8:TRUE", "sendProxy"),
        ("1024:30000:8:1", "sendProxy"),
        ("1024:30000:8:yes", "sendProxy"),
        ("1024:30000:8:", "sendProxy"),
        ("1024:30000:8:true 1024:30000:9:true", ""),
    ];
    for (text, field) in cases {
        let e = pm_err(&format!("# first\n{text}\n"));
        assert_eq!(e.line, Some(2), "{text}: {e}");
        assert_eq!(e.field, *field, "{text}: {e}");
        assert!(e.to_string().starts_with("pm.conf:2"), "{e}");
    }
}

#[test]
fn duplicate_identical_items_are_skipped_with_a_warning() {
    let p = pm("1024:30000:8:true\n1024:30000:8:true\n").expect("valid");
    assert_eq!(p.value.len(), 1);
    assert_eq!(p.warnings.len(), 1);
    assert!(p.warnings[0].starts_with("pm.conf:2:"), "{:?}", p.warnings);
}

#[test]
fn a_large_file_parses() {
    let mut text = String::new();
    for i in 0..100_000u32 {
        text.push_str(&format!(
            "{}:{}:10:false ",
            33000 + i % 30000,
            1 + i / 30000
        ));
        if i % 10 == 9 {
            text.push('\n');
        }
    }
    assert_eq!(pm(&text).expect("valid").value.len(), 100_000);
}

#[test]
fn hosts_conf_keeps_order_and_refuses_what_it_cannot_use() {
    let p = parse_hosts_conf(
        "10.0.0.2:32767\r\n\n10.0.0.1:32767\n[::1]:32767\n10.0.0.2:32767\n",
        "h.conf",
    )
    .expect("valid");
    let want: Vec<SocketAddr> = ["10.0.0.2:32767", "10.0.0.1:32767", "[::1]:32767"]
        .iter()
        .map(|s| s.parse().expect("a"))
        .collect();
    assert_eq!(p.value, want);
    assert_eq!(p.warnings.len(), 1, "duplicate skipped with a warning");
    for bad in [
        "10.0.0.1",
        "10.0.0.1:0",
        "10.0.0.1:70000",
        "host.example:32767",
        "10.0.0.1 :32767",
        "10.0.0.1:32767 x",
    ] {
        let e = parse_hosts_conf(&format!("10.0.0.9:1\n{bad}\n"), "h.conf").expect_err(bad);
        assert_eq!((e.line, e.field.as_str()), (Some(2), "host"), "{bad}: {e}");
    }
    assert!(
        parse_hosts_conf("", "h.conf")
            .expect("empty")
            .value
            .is_empty()
    );
}

fn proxy(text: &str) -> Result<ProxyConf, ConfigError> {
    parse_proxy_conf(text, "/etc/sns/proxy.conf", Path::new("/etc/sns"))
}

#[test]
fn proxy_conf_keys_defaults_and_relative_paths() {
    let p = proxy("# c\nPORTSCONF ../../pm.conf\nhost 0.0.0.0\nPORT 32000\nPODHOST \"\"\nclusterPorts 1024-2248,2000-3000,5000\n").expect("valid");
    assert_eq!(p.ports_conf, Path::new("/etc/sns/../../pm.conf"));
    assert_eq!(p.hosts_conf, Path::new("/etc/sns/hosts.conf"));
    assert_eq!(p.host, Some("0.0.0.0".parse().expect("ip")));
    assert_eq!(p.port, 32000, "PORT is honoured");
    assert_eq!(p.pod_host, None, "PODHOST \"\" means unset");
    assert_eq!(
        p.cluster_ports,
        vec![1024..=3000, 5000..=5000],
        "overlaps merge"
    );
    let d = proxy("").expect("defaults");
    assert_eq!(d.port, 32767);
    assert_eq!(d.cluster_ports, vec![1024..=29999, 32768..=65535]);
    // Tab separators work.
    assert_eq!(
        proxy("PORT\t32001\nCLUSTERPORTS 61000-61010")
            .expect("tab")
            .port,
        32001
    );
}

#[test]
fn proxy_conf_errors_name_line_and_key() {
    let cases: &[(&str, usize, &str)] = &[
        ("FOO bar", 1, "FOO"),
        ("PORT", 1, "PORT"),
        ("\nPORT 32767,", 2, "PORT"),
        ("PORT 0", 1, "PORT"),
        ("HOST not-an-ip", 1, "HOST"),
        ("CLUSTERPORTS 3000-1000", 1, "CLUSTERPORTS"),
        ("CLUSTERPORTS 0-10", 1, "CLUSTERPORTS"),
        ("CLUSTERPORTS 65000-70000", 1, "CLUSTERPORTS"),
        ("CLUSTERPORTS 1024,,2048", 1, "CLUSTERPORTS"),
        ("CLUSTERPORTS abc", 1, "CLUSTERPORTS"),
        ("CLUSTERPORTS 32000-33000", 1, "CLUSTERPORTS"),
        ("PORT 1500\n#\nCLUSTERPORTS 1024-2048", 3, "CLUSTERPORTS"),
        ("PORT 1500", 1, "PORT"),
        ("a=b c", 1, ""),
    ];
    for (text, line, field) in cases {
        let e = proxy(text).expect_err(text);
        assert_eq!(
            (e.line, e.field.as_str()),
            (Some(*line as u64), *field),
            "{text}: {e}"
        );
    }
}
