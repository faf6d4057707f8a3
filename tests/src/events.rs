//! Routing-SPI event bodies (Ruby 1.9.3 dialect, as the broker sends them) that
//! point at local backends.

use std::net::SocketAddr;

/// `add_public_endpoint` of a `load_balancer` (haproxy) endpoint at `addr`.
pub fn add_lb(app: &str, ns: &str, addr: SocketAddr) -> String {
    add_endpoint(app, ns, addr, "load_balancer", "haproxy-1.4")
}

pub fn add_endpoint(app: &str, ns: &str, addr: SocketAddr, kind: &str, cart: &str) -> String {
    format!(
        "---\n:action: :add_public_endpoint\n:app_name: {app}\n:namespace: {ns}\n\
         :gear_id: 5464c9f6e0b8cd5a6e000001\n:public_port_name: {cart}\n\
         :public_address: {ip}\n:public_port: {port}\n:protocols:\n- http\n- ws\n\
         :types:\n- {kind}\n:mappings:\n- frontend: ''\n  backend: ''\n",
        ip = addr.ip(),
        port = addr.port()
    )
}

pub fn remove_endpoint(app: &str, ns: &str, addr: SocketAddr) -> String {
    format!(
        "---\n:action: :remove_public_endpoint\n:app_name: {app}\n:namespace: {ns}\n\
         :gear_id: 5464c9f6e0b8cd5a6e000001\n:public_address: {ip}\n:public_port: {port}\n",
        ip = addr.ip(),
        port = addr.port()
    )
}

pub fn add_alias(app: &str, ns: &str, alias: &str) -> String {
    format!("---\n:action: :add_alias\n:app_name: {app}\n:namespace: {ns}\n:alias: {alias}\n")
}

/// A fixture's body with its member address rewritten to `addr`.
pub fn fixture_at(name: &str, from: &str, addr: SocketAddr) -> String {
    let text = std::fs::read_to_string(crate::fixtures().join(name)).expect("fixture");
    let (ip, port) = from.split_once(':').expect("from is ip:port");
    text.replace(
        &format!(":public_address: {ip}"),
        &format!(":public_address: {}", addr.ip()),
    )
    .replace(
        &format!(":public_port: {port}"),
        &format!(":public_port: {}", addr.port()),
    )
    .replace(
        &format!(":public_port: '{port}'"),
        &format!(":public_port: '{}'", addr.port()),
    )
}

/// `add_public_endpoint` of a load_balancer that expects TLS (`ssl_to_gear`, like
/// fixture 42: protocols `https` and `wss`).
pub fn add_tls_lb(app: &str, ns: &str, addr: SocketAddr) -> String {
    add_lb(app, ns, addr).replace(
        ":protocols:\n- http\n- ws\n",
        ":protocols:\n- https\n- wss\n",
    )
}

/// `add_ssl` for `alias`, PEM as literal blocks (as Ruby 2.x writes them).
pub fn add_ssl(
    app: &str,
    ns: &str,
    alias: &str,
    cert_pem: &str,
    key_pem: &str,
    pass: Option<&str>,
) -> String {
    let block = |pem: &str| {
        pem.trim_end()
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    };
    format!(
        "---\n:action: :add_ssl\n:app_name: {app}\n:namespace: {ns}\n:alias: {alias}\n\
         :ssl: |\n{}:private_key: |\n{}:pass_phrase: {}\n",
        block(cert_pem),
        block(key_pem),
        pass.unwrap_or("")
    )
}

/// The events for app `app` with `member` as its member and the alias `alias`
/// with `leaf` as its certificate.
pub fn app_with_alias_cert(
    app: &str,
    ns: &str,
    member: SocketAddr,
    alias: &str,
    leaf: &crate::pki::Leaf,
) -> [String; 3] {
    [
        add_lb(app, ns, member),
        add_alias(app, ns, alias),
        add_ssl(app, ns, alias, &leaf.cert_pem, &leaf.key_pem, None),
    ]
}

pub fn remove_ssl(app: &str, ns: &str, alias: &str) -> String {
    format!("---\n:action: :remove_ssl\n:app_name: {app}\n:namespace: {ns}\n:alias: {alias}\n")
}

/// Decodes a synthetic event and applies it to `state` (benchmark tools that build a
/// state directly).
pub fn apply(state: &mut spi_consumer::RoutingState, yaml: &str) {
    match spi_consumer::decode::decode(yaml.as_bytes()) {
        Ok(spi_consumer::decode::Decoded::Event(e)) => {
            state.apply(&e);
        }
        other => panic!("bad synthetic event: {other:?}"),
    }
}
