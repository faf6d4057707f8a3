//! The client's connection as every request on it sees it: its address and
//! client key, whether it is TLS and with which certificate, the trust rule's
//! verdict for its forwarding fields, and the header values derived from it,
//! rendered once per connection rather than once per request.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use h1_codec::fields::{FieldsRef, Name};
use http::header::HeaderValue;
use per_source::{Client, ClientKey, KeyRule};

use super::activity::Activity;
use crate::tls::store::Served;

/// What the router knows about the client's connection, with the header values
/// derived from it rendered once per connection rather than once per request.
#[derive(Clone, Debug)]
pub struct ClientConn {
    pub ip: IpAddr,
    /// How client addresses are keyed for per-client counts (`limits.client_*_prefix`).
    pub(in crate::request) keys: KeyRule,
    /// The connection's requests in flight (for its idle deadline).
    pub activity: Arc<Activity>,
    /// The port the client connected to (X-Forwarded-Port).
    pub local_port: u16,
    pub https: bool,
    /// The client's own forwarding headers are kept (see the trust rule).
    pub(in crate::request) trusted: bool,
    /// It is one of the proxies `forwarded.trusted` names (an explicit list, not
    /// the default of every address): the real client is the one its
    /// `X-Forwarded-For` names (see [`ClientConn::share_source`]).
    pub(in crate::request) behind_proxy: bool,
    /// TLS with SNI: the certificate the connection presented (RFC 9110 §15.5.20:
    /// requests for names that would get another are 421).
    pub served: Option<Served>,
    /// The TLS server name the client asked for (header actions' `%{sni}`).
    pub sni: Option<Arc<str>>,
    /// What its client certificate tells members (`tls.client_certificates`).
    pub client_cert: Option<Arc<crate::tls::client_auth::ClientCert>>,
    /// The client-certificate policy its handshake was under (see
    /// [`crate::tls::client_auth::Policies`]): requests for names under
    /// another are 421.
    pub client_policy: u16,
    pub(in crate::request) ip_value: HeaderValue,
    pub(in crate::request) port_value: HeaderValue,
    /// `for=...;proto=...` and the `by=` part, when `Forwarded` is sent.
    pub(in crate::request) forwarded: Option<Arc<str>>,
    /// The per-core worker serving the connection (0 without workers): whose idle
    /// member connections its requests reuse (see [`crate::workers`]).
    pub worker: usize,
    /// Its listener's kill switch (the grace is over), for what outlives the
    /// connection's own task: a tunnel it became closes cleanly on it
    /// ([`super::tunnel`]). `None`: no tunnels (HTTP/3).
    pub kill: Option<tokio::sync::watch::Receiver<bool>>,
}

impl ClientConn {
    /// The client's address as text (header actions' `%{client_ip}`).
    pub fn ip_text(&self) -> &str {
        self.ip_value.to_str().unwrap_or("unknown")
    }

    /// Whether this client's own forwarding fields (and request ID) are kept:
    /// the trust rule, `forwarded.trusted`.
    pub fn trusted(&self) -> bool {
        self.trusted
    }

    pub fn new(
        ip: IpAddr,
        keys: KeyRule,
        local_port: u16,
        https: bool,
        activity: Arc<Activity>,
    ) -> ClientConn {
        let ip = ip.to_canonical();
        ClientConn {
            ip,
            keys,
            activity,
            local_port,
            https,
            trusted: true,
            behind_proxy: false,
            served: None,
            sni: None,
            client_cert: None,
            client_policy: 0,
            ip_value: ip_value(ip),
            port_value: HeaderValue::from(local_port),
            forwarded: None,
            worker: 0,
            kill: None,
        }
    }

    /// Applies `forwarded:` to this connection; `local` is the address the client
    /// connected to (for `by=ip`).
    pub fn with_forwarded(
        mut self,
        settings: &ForwardedSettings,
        local: Option<SocketAddr>,
    ) -> Self {
        self.trusted = settings.trusts(self.ip);
        self.behind_proxy = self.trusted && settings.trusted != everyone();
        if settings.header {
            let mut element = format!(
                "for={};proto={}",
                node(self.ip, None),
                if self.https { "https" } else { "http" }
            );
            match (settings.by.as_str(), local) {
                ("", _) => {}
                ("ip", Some(local)) => {
                    element.push_str(";by=");
                    element.push_str(&node(local.ip(), Some(local.port())));
                }
                ("ip", None) => {}
                (name, _) => {
                    element.push_str(";by=");
                    element.push_str(name);
                }
            }
            self.forwarded = Some(Arc::from(element));
        }
        self
    }
}

/// `ip` as a field value (`X-Forwarded-For`, `%{client_ip}`).
fn ip_value(ip: IpAddr) -> HeaderValue {
    let mut text = Vec::with_capacity(40);
    write_ip(ip, &mut text);
    HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
        .unwrap_or_else(|_| HeaderValue::from_static("unknown"))
}

/// An address as text, IPv4 without `core::fmt` (each connection's, and
/// each again behind a PROXY header: `to_string` took about 375
/// instructions of a connection), IPv6 with it.
pub fn write_ip(ip: IpAddr, out: &mut Vec<u8>) {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let mut n = itoa::Buffer::new();
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(n.format(octet).as_bytes());
            }
        }
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

impl ClientConn {
    /// The same connection, its client at `ip` (a PROXY header named it): the
    /// address, its header values and the trust rule's verdict anew.
    pub fn moved_to(mut self, ip: IpAddr, forwarded: &ForwardedSettings) -> ClientConn {
        self.ip = ip.to_canonical();
        self.ip_value = ip_value(self.ip);
        self.with_forwarded(forwarded, None)
    }

    /// The connection's own client key (the peer's, whatever its requests say).
    pub fn key(&self) -> ClientKey {
        self.keys.key(self.ip)
    }

    /// Who a request is from: the connection's address, or, from a proxy that
    /// `forwarded.trusted` names, the address that proxy put last in
    /// `X-Forwarded-For` (the client it saw). With the default trust of every
    /// address a client could name anyone, so its own address counts.
    pub fn client<'a>(&self, fields: impl Into<FieldsRef<'a>>) -> Client {
        let ip = if self.behind_proxy {
            fields
                .into()
                .values(Name::XForwardedFor)
                .next_back()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.rsplit(',').next())
                .and_then(|last| last.trim().parse::<IpAddr>().ok())
                .unwrap_or(self.ip)
        } else {
            self.ip
        };
        self.keys.client(ip)
    }
}

/// `forwarded:` in the configuration (the trust rule: see [`crate::request::phases::headers`]).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardedSettings {
    /// Also send RFC 7239 `Forwarded` (`for`, `proto`, `host`, and `by` if set).
    #[serde(default)]
    pub header: bool,
    /// `by=`: empty for none, `ip` for the address and port the client connected
    /// to, or an obfuscated name (`_` then letters, digits, `.`, `_`, `-`).
    #[serde(default)]
    pub by: String,
    /// Clients whose `X-Forwarded-For` and `Forwarded` are kept and appended to.
    #[serde(default = "everyone")]
    pub trusted: Vec<ipnet::IpNet>,
}

fn everyone() -> Vec<ipnet::IpNet> {
    vec![
        ipnet::IpNet::V4(ipnet::Ipv4Net::default()),
        ipnet::IpNet::V6(ipnet::Ipv6Net::default()),
    ]
}

impl Default for ForwardedSettings {
    fn default() -> ForwardedSettings {
        ForwardedSettings {
            header: false,
            by: String::new(),
            trusted: everyone(),
        }
    }
}

impl ForwardedSettings {
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.trusted.iter().any(|n| n.contains(&ip))
    }

    /// `by` is empty, `ip` or an RFC 7239 obfuscated node name.
    pub fn by_is_valid(&self) -> bool {
        let b = self.by.as_str();
        b.is_empty()
            || b == "ip"
            || (b.len() > 1
                && b.starts_with('_')
                && b[1..]
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-')))
    }
}

/// An RFC 7239 node: an IPv4 address bare, an IPv6 one bracketed; with a port (or
/// any IPv6) quoted.
fn node(ip: IpAddr, port: Option<u16>) -> String {
    let ip = ip.to_canonical();
    match (ip, port) {
        (IpAddr::V4(v4), None) => v4.to_string(),
        (IpAddr::V4(v4), Some(p)) => format!("\"{v4}:{p}\""),
        (IpAddr::V6(v6), None) => format!("\"[{v6}]\""),
        (IpAddr::V6(v6), Some(p)) => format!("\"[{v6}]:{p}\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_written_as_to_string_writes_it_canonical() {
        for (ip, want) in [
            ("192.0.2.7", "192.0.2.7"),
            ("0.0.0.0", "0.0.0.0"),
            ("255.255.255.255", "255.255.255.255"),
            ("2001:db8::1", "2001:db8::1"),
            ("::ffff:10.1.2.3", "10.1.2.3"),
        ] {
            let ip: IpAddr = ip.parse().expect("address");
            let mut out = Vec::new();
            write_ip(ip, &mut out);
            assert_eq!(String::from_utf8_lossy(&out), want);
            assert_eq!(ip_value(ip), want);
        }
    }
}
