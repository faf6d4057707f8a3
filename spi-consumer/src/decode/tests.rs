use super::*;
use crate::fixtures::fixture;

fn event(name: &str) -> RoutingEvent {
    match decode(&fixture(name)) {
        Ok(Decoded::Event(e)) => e,
        other => panic!("{name}: expected an event, got {other:?}"),
    }
}

fn app(name: &str, ns: &str) -> AppId {
    AppId {
        name: name.into(),
        namespace: ns.into(),
    }
}

#[test]
fn create_application_carries_scalable_and_ha() {
    assert_eq!(
        event("01-create_application.yaml"),
        RoutingEvent::CreateApplication {
            app: app("myapp", "demo"),
            scalable: Some(true),
            ha: Some(false)
        }
    );
}

#[test]
fn add_public_endpoint_decodes_every_field() {
    let RoutingEvent::AddPublicEndpoint { app: a, endpoint } =
        event("03-add_public_endpoint-load_balancer.yaml")
    else {
        panic!("wrong variant")
    };
    assert_eq!(a, app("myapp", "demo"));
    assert_eq!(
        endpoint.gear_id.as_deref(),
        Some("5464c9f6e0b8cd5a6e000001")
    );
    assert_eq!(endpoint.port_name.as_deref(), Some("haproxy-1.4"));
    assert_eq!(endpoint.key(), "10.0.0.11:38032");
    assert_eq!(endpoint.protocols, ["http", "ws"]);
    assert_eq!(endpoint.types, ["load_balancer"]);
    assert_eq!(
        endpoint.mappings,
        [
            Mapping {
                frontend: "".into(),
                backend: "".into()
            },
            Mapping {
                frontend: "/health".into(),
                backend: "/configuration/health".into()
            }
        ]
    );
}

#[test]
fn both_ruby_dialects_decode_to_identical_values() {
    assert_eq!(
        event("03-add_public_endpoint-load_balancer.yaml"),
        event("30-ruby2x-add_public_endpoint-load_balancer.yaml")
    );
    assert_eq!(
        event("01-create_application.yaml"),
        event("32-ruby2x-create_application.yaml")
    );
    assert_eq!(event("08-add_ssl.yaml"), event("31-ruby2x-add_ssl.yaml"));
}

#[test]
fn add_ssl_keeps_pem_intact_and_nil_pass_phrase_is_none() {
    let RoutingEvent::AddSsl { alias, bundle, .. } = event("08-add_ssl.yaml") else {
        panic!("wrong variant")
    };
    assert_eq!(alias, "www.example.net");
    assert!(
        bundle
            .certificate_pem
            .starts_with("-----BEGIN CERTIFICATE-----\n")
    );
    // Leaf plus the test CA: the chain survives the 1.9.3 doubled-newline encoding.
    assert_eq!(
        bundle.certificate_pem.matches("BEGIN CERTIFICATE").count(),
        2
    );
    assert!(!bundle.certificate_pem.contains("\n\n"));
    assert!(bundle.private_key_pem.contains("BEGIN RSA PRIVATE KEY"));
    assert_eq!(bundle.pass_phrase, None);
}

#[test]
fn add_ssl_with_pass_phrase() {
    let RoutingEvent::AddSsl { bundle, .. } = event("10-add_ssl-pass_phrase.yaml") else {
        panic!("wrong variant")
    };
    assert_eq!(bundle.pass_phrase.as_deref(), Some("correct-horse-battery"));
    assert!(bundle.private_key_pem.contains("Proc-Type: 4,ENCRYPTED"));
}

#[test]
fn cert_bundle_debug_never_shows_secrets() {
    let RoutingEvent::AddSsl { bundle, .. } = event("10-add_ssl-pass_phrase.yaml") else {
        panic!("wrong variant")
    };
    let shown = format!("{bundle:?}");
    assert!(!shown.contains("correct-horse-battery"));
    assert!(!shown.contains("PRIVATE KEY"));
}

#[test]
fn remove_public_endpoint_needs_only_address_and_port() {
    assert_eq!(
        event("13-remove_public_endpoint-web_framework-gear2.yaml"),
        RoutingEvent::RemovePublicEndpoint {
            app: app("myapp", "demo"),
            gear_id: Some("5464ca1be0b8cd5a6e00002a".into()),
            address: "10.0.0.12".into(),
            port: 38036
        }
    );
}

#[test]
fn aliases_and_ssl_removal() {
    assert_eq!(
        event("07-add_alias.yaml"),
        RoutingEvent::AddAlias {
            app: app("myapp", "demo"),
            alias: "www.example.net".into()
        }
    );
    assert_eq!(
        event("12-remove_alias.yaml"),
        RoutingEvent::RemoveAlias {
            app: app("myapp", "demo"),
            alias: "www.example.net".into()
        }
    );
    assert_eq!(
        event("11-remove_ssl.yaml"),
        RoutingEvent::RemoveSsl {
            app: app("myapp", "demo"),
            alias: "www.example.net".into()
        }
    );
}

#[test]
fn numeric_looking_strings_stay_strings() {
    let RoutingEvent::AddPublicEndpoint { app: a, endpoint } =
        event("41-edge-add_public_endpoint-numeric-looking-strings.yaml")
    else {
        panic!("wrong variant")
    };
    assert_eq!(a.name, "2048");
    assert_eq!(
        endpoint.gear_id.as_deref(),
        Some("5465012345e7890123456789")
    );
}

#[test]
fn mixed_case_app_name_is_preserved() {
    assert_eq!(
        event("40-edge-create_application-mixed-case.yaml")
            .app()
            .name,
        "ShopFront"
    );
}

#[test]
fn deprecated_gear_duplicates_are_ignored() {
    for name in [
        "25-add_gear-deprecated.yaml",
        "26-delete_gear-deprecated.yaml",
    ] {
        assert!(
            matches!(
                decode(&fixture(name)),
                Ok(Decoded::Ignored {
                    reason: IgnoreReason::DeprecatedDuplicate,
                    ..
                })
            ),
            "{name}"
        );
    }
}

#[test]
fn legacy_2013_gear_events_become_endpoint_events() {
    let RoutingEvent::AddPublicEndpoint { endpoint, .. } = event("27-add_gear-legacy-2013.yaml")
    else {
        panic!("wrong variant")
    };
    assert_eq!(endpoint.key(), "10.0.0.11:38032");
    assert_eq!(endpoint.gear_id, None);
    assert_eq!(
        event("28-delete_gear-legacy-2013.yaml"),
        RoutingEvent::RemovePublicEndpoint {
            app: app("myapp", "demo"),
            gear_id: None,
            address: "10.0.0.11".into(),
            port: 38032
        }
    );
    assert_eq!(
        event("29-create_application-legacy-2013.yaml"),
        RoutingEvent::CreateApplication {
            app: app("myapp", "demo"),
            scalable: None,
            ha: None
        }
    );
}

#[test]
fn unknown_and_foreign_actions_are_ignored() {
    for name in [
        "90-foreign-sso-register_gear.yaml",
        "91-synthetic-unknown-action.yaml",
    ] {
        assert!(
            matches!(
                decode(&fixture(name)),
                Ok(Decoded::Ignored {
                    reason: IgnoreReason::UnknownAction,
                    ..
                })
            ),
            "{name}"
        );
    }
}

#[test]
fn truncated_yaml_is_a_syntax_error_that_quotes_no_input() {
    let Err(DecodeError::Syntax(msg)) = decode(&fixture("92-synthetic-malformed-truncated.yaml"))
    else {
        panic!("syntax error expected")
    };
    assert!(msg.contains("line 6"), "{msg}");
    // The body may hold key material: the message must not echo it.
    assert!(!msg.contains("MII"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    let key =
        b":action: :add_ssl\n:private_key: '-----BEGIN RSA PRIVATE KEY-----\n  SECRETSECRET\n";
    let Err(e) = decode(key) else {
        panic!("unclosed quote")
    };
    assert!(!e.to_string().contains("SECRETSECRET"), "{e}");
}

#[test]
fn missing_public_port_is_named() {
    assert_eq!(
        decode(&fixture("93-synthetic-missing-public_port.yaml")),
        Err(DecodeError::MissingField {
            action: "add_public_endpoint",
            field: ":public_port"
        })
    );
}

#[test]
fn hostile_inputs_are_errors_not_panics() {
    let cases: &[&[u8]] = &[
        b"",
        b"---\n",
        b"\xff\xfe",
        b"- a\n- b\n",
        b":action: [1, 2]\n",
        b":action: :add_public_endpoint\n:app_name: a\n:namespace: b\n:public_address: 1.2.3.4\n:public_port: 70000\n",
        b":action: :add_public_endpoint\n:app_name: a\n:namespace: b\n:public_address: 1.2.3.4\n:public_port: -1\n",
        b":action: :add_alias\n:app_name: a\n:namespace: b\n:alias: '  '\n",
        b":action: :add_alias\n:app_name: a\n:namespace: b\n:alias: a b\n",
        b"{{{{{{{{{{{{{{{{{{{{{{{{",
    ];
    for body in cases {
        assert!(decode(body).is_err(), "{:?}", String::from_utf8_lossy(body));
    }
}

#[test]
fn every_fixture_decodes_or_fails_as_documented() {
    // 92 and 93 are the only bodies the fixtures' README calls undecodable.
    for entry in crate::fixtures::all() {
        let name = entry.as_str();
        let result = decode(&fixture(name));
        if name.starts_with("92-") || name.starts_with("93-") {
            assert!(result.is_err(), "{name} must be dead-lettered");
        } else {
            assert!(result.is_ok(), "{name}: {result:?}");
        }
    }
}

#[test]
fn names_that_could_inject_into_headers_are_refused_at_decode() {
    let with = |app: &str, ns: &str| {
        format!(
            ":action: :create_application\n:app_name: {app}\n:namespace: {ns}\n:scalable: true\n"
        )
    };
    for (app, ns, field) in [
        ("\"app\\r\\nX-Evil: 1\"", "ns", ":app_name"),
        ("\"my app\"", "ns", ":app_name"),
        ("my-app", "ns", ":app_name"),
        ("a23456789012345678901234567890123", "ns", ":app_name"),
        ("app", "\"ns\\r\\nHost: x\"", ":namespace"),
        ("app", "NS", ":namespace"),
        ("app", "n_s", ":namespace"),
        ("app", "n12345678901234567", ":namespace"),
    ] {
        match decode(with(app, ns).as_bytes()) {
            Err(DecodeError::InvalidField { field: f, .. }) => assert_eq!(f, field, "{app} {ns}"),
            other => panic!("{app} {ns}: {other:?}"),
        }
    }
    assert!(decode(with("ShopFront", "acme1").as_bytes()).is_ok());
    let alias =
        |a: &str| format!(":action: :add_alias\n:app_name: app\n:namespace: ns\n:alias: {a}\n");
    for bad in [
        "\"www.example.com\\r\\nX: 1\"",
        "\"a b.example.com\"",
        "-x.example.com",
        "x..example.com",
        "x_y.example.com",
        "\"é.example.com\"",
    ] {
        assert!(
            matches!(
                decode(alias(bad).as_bytes()),
                Err(DecodeError::InvalidField {
                    field: ":alias",
                    ..
                })
            ),
            "{bad}"
        );
    }
    assert!(decode(alias("WWW.Example.COM.").as_bytes()).is_ok());
}

#[test]
fn a_member_named_by_host_name_is_refused_but_can_still_be_removed() {
    let ev = |action: &str, addr: &str| {
        format!(
            ":action: :{action}\n:app_name: app\n:namespace: ns\n:public_address: {addr}\n:public_port: 35531\n\
             :protocols: [http]\n:types: [load_balancer]\n:mappings: []\n"
        )
    };
    match decode(ev("add_public_endpoint", "node1.example.com").as_bytes()) {
        Err(DecodeError::InvalidField {
            field: ":public_address",
            reason,
            ..
        }) => {
            assert!(reason.contains("not an IP address"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(decode(ev("add_public_endpoint", "10.0.0.11").as_bytes()).is_ok());
    assert!(decode(ev("add_public_endpoint", "fd00::11").as_bytes()).is_ok());
    assert!(decode(ev("remove_public_endpoint", "node1.example.com").as_bytes()).is_ok());
}

/// The flat reader reads the common messages (else it would never be used), and
/// wherever it reads one, the general parser reads the same.
#[test]
fn the_flat_reader_reads_what_serde_saphyr_reads() {
    let mut read = Vec::new();
    for name in crate::fixtures::all() {
        let body = fixture(&name);
        assert_eq!(flat_differs(&body), None, "{name}");
        if super::flat::read(std::str::from_utf8(&body).unwrap()).is_some() {
            read.push(name);
        }
    }
    for common in [
        "01-create_application.yaml",
        "03-add_public_endpoint-load_balancer.yaml",
        "07-add_alias.yaml",
        "30-ruby2x-add_public_endpoint-load_balancer.yaml",
    ] {
        assert!(
            read.iter().any(|n| n == common),
            "{common} not read flat: {read:?}"
        );
    }
    // Values whose implicit YAML type is not a string, and shapes near the edge.
    let base = ":action: :add_alias\n:app_name: myapp\n:namespace: demo\n";
    for value in [
        "true",
        "false",
        "TRUE",
        "0x1F",
        "0o17",
        "017",
        "1e5",
        "1_000",
        ".inf",
        "-1",
        "null",
        "Null",
        "NULL",
        "nUll",
        "~",
        "''",
        "\"\"",
        "'x'",
        "\"x\"",
        "a:b",
        "a:",
        ":a",
        "::1",
        "fe80::1",
        "-",
        "--",
        "- a",
        "a b",
        "'a b'",
        "\"a\\nb\"",
        "'it''s'",
        "a#b",
        "a #b",
        "!tag",
        "&a",
        "*a",
        "|",
        ">",
        "[a]",
        "{a: 1}",
        "%a",
        "@a",
        "`a",
        "?a",
        "? a",
        "a\t",
        "a ",
        "\"x",
        "x\"",
        "'x",
    ] {
        for text in [
            format!("{base}:alias: {value}\n"),
            format!("---\n{base}:gear_id: {value}\n"),
            format!("{base}:scalable: {value}\n"),
            format!("{base}:protocols:\n- {value}\n"),
            format!("{base}:mappings:\n- frontend: {value}\n  backend: {value}\n"),
        ] {
            assert_eq!(flat_differs(text.as_bytes()), None, "{text:?}");
        }
    }
    for text in [
        format!("{base}:alias: a\n:alias: b\n"),
        format!("{base}:protocols:\n:types:\n- x\n"),
        format!("{base}:protocols:\n  - x\n"),
        format!("{base}:mappings:\n- frontend: a\n  frontend: b\n"),
        format!("{base}:mappings:\n- frontend: a\n    backend: b\n"),
        format!("{base}:other: x\n"),
        format!("{base}:alias: x\r\n"),
        format!("{base}\n"),
        format!("{base}:alias: x"),
        format!("--- \n{base}"),
        format!("{base}---\n"),
    ] {
        assert_eq!(flat_differs(text.as_bytes()), None, "{text:?}");
    }
}

#[test]
fn a_wildcard_alias_is_star_and_two_labels_or_more() {
    let alias = |a: &str| {
        let body = format!(
            "---\n:action: :add_alias\n:app_name: myapp\n:namespace: demo\n:alias: \"{a}\"\n"
        );
        match decode(body.as_bytes()) {
            Ok(Decoded::Event(RoutingEvent::AddAlias { alias, .. })) => Ok(alias),
            other => Err(format!("{other:?}")),
        }
    };
    assert_eq!(alias("*.Customer.com").as_deref(), Ok("*.customer.com"));
    for bad in [
        "*.com",
        "*",
        "*.",
        "a.*.com",
        "**.customer.com",
        "*x.customer.com",
    ] {
        assert!(alias(bad).is_err(), "{bad} taken");
    }
}
