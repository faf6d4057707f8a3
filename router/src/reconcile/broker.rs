//! The broker's REST API, the part reconcile reads (routing-spi §1; OpenShift
//! origin-server's `RestReply`, `RestApplication`, `RestGearGroup` and
//! `PortInterface#to_hash`):
//!
//! - `GET {url}/domains/{namespace}/applications/{name}`: `data.aliases[].id`;
//! - `GET {url}/domains/{namespace}/applications/{name}/gear_groups?include=endpoints`:
//!   `data[].gears[].endpoints[]` with `cartridge_name`, `external_address`,
//!   `external_port`, `protocols`, `types` and `mappings`.
//!
//! - `GET {url}/domains`: `data[].name`, and for each domain
//!   `GET {url}/domains/{namespace}/applications`: `data[].name` (discovery: the apps
//!   the router never heard of; the listing carries no endpoints, so each app found
//!   missing is then fetched as above).
//!
//! All answers are wrapped in `{"status": "ok", "type": ..., "data": ...}`; a 404
//! means the app is gone. The client is strict about what it uses (status and type
//! checked, ports in range, addresses well formed, every field it needs present) and
//! ignores every other field. Bodies are capped at [`MAX_BODY`].

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use spi_consumer::decode::{Endpoint, Mapping};

/// Largest answer read from the broker.
pub const MAX_BODY: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("{url}: not the documented answer: {message}")]
    Format { url: String, message: String },
}

/// What the broker says about one app.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerApp {
    pub endpoints: Vec<Endpoint>,
    pub aliases: BTreeSet<String>,
}

#[derive(Deserialize)]
struct Envelope<T> {
    status: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    data: T,
}

#[derive(Deserialize)]
struct Application {
    #[serde(default)]
    aliases: Vec<Alias>,
}

#[derive(Deserialize)]
struct Alias {
    id: String,
}

#[derive(Deserialize)]
struct GearGroup {
    gears: Vec<Gear>,
}

#[derive(Deserialize)]
struct Gear {
    id: String,
    #[serde(default)]
    endpoints: Vec<PortInterface>,
}

#[derive(Deserialize)]
struct PortInterface {
    cartridge_name: String,
    external_address: String,
    /// A string in the broker's model (`field :external_port, type: String`); a
    /// number is accepted too.
    external_port: serde_json::Value,
    #[serde(default)]
    protocols: Vec<String>,
    #[serde(default)]
    types: Vec<String>,
    #[serde(default)]
    mappings: Vec<Mapping>,
}

#[derive(Deserialize)]
struct Domain {
    name: String,
}

#[derive(Deserialize)]
struct Listed {
    name: String,
}

/// One app the broker lists, by the names events carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedApp {
    pub name: String,
    pub namespace: String,
}

/// How to reach the broker.
pub struct Client {
    pub base: http::Uri,
    pub timeout: Duration,
    /// `Authorization` header value (Bearer token or Basic credentials).
    pub authorization: Option<http::HeaderValue>,
    pub tls: Option<tokio_rustls::TlsConnector>,
}

impl Client {
    /// The app as the broker has it, or `None` if the broker does not know it (404).
    pub async fn app(&self, name: &str, namespace: &str) -> Result<Option<BrokerApp>, FetchError> {
        let path = format!("domains/{namespace}/applications/{name}");
        let Some(app) = self.get(&path).await? else {
            return Ok(None);
        };
        let app: Envelope<Application> = parse(&self.url(&path), &app, "application")?;
        let groups = format!("{path}/gear_groups?include=endpoints");
        let Some(body) = self.get(&groups).await? else {
            return Ok(None);
        };
        let url = self.url(&groups);
        let groups: Envelope<Vec<GearGroup>> = parse(&url, &body, "gear_groups")?;
        let mut endpoints = Vec::new();
        for gear in groups.data.into_iter().flat_map(|g| g.gears) {
            for pi in gear.endpoints {
                let format = |message: String| FetchError::Format {
                    url: url.clone(),
                    message,
                };
                let port = match &pi.external_port {
                    serde_json::Value::String(s) => s.parse::<u16>().ok(),
                    serde_json::Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
                    _ => None,
                }
                .filter(|p| *p > 0)
                .ok_or_else(|| format(format!("external_port {}", pi.external_port)))?;
                if !valid_address(&pi.external_address) {
                    return Err(format(format!(
                        "external_address {:?}",
                        pi.external_address
                    )));
                }
                endpoints.push(Endpoint {
                    gear_id: Some(gear.id.clone()),
                    port_name: Some(pi.cartridge_name),
                    address: pi.external_address,
                    port,
                    protocols: pi.protocols,
                    types: pi.types,
                    mappings: pi.mappings,
                });
            }
        }
        Ok(Some(BrokerApp {
            endpoints,
            aliases: app
                .data
                .aliases
                .into_iter()
                .map(|a| a.id.to_ascii_lowercase())
                .collect(),
        }))
    }

    /// Every app of every domain the broker lists, domain by domain (one request at
    /// a time: a walk of the whole broker stays a trickle beside its users' calls),
    /// at most `max` of them. Names that are not alphanumeric (the broker refuses
    /// them) are skipped with a warning.
    pub async fn list_apps(&self, max: usize) -> Result<Vec<ListedApp>, FetchError> {
        let Some(body) = self.get("domains").await? else {
            return Ok(Vec::new());
        };
        let domains: Envelope<Vec<Domain>> = parse(&self.url("domains"), &body, "domains")?;
        let mut apps = Vec::new();
        for domain in domains.data {
            if !plain_name(&domain.name) {
                tracing::warn!(domain = %domain.name, "reconcile: a domain name the broker would refuse; skipped");
                continue;
            }
            let path = format!("domains/{}/applications", domain.name);
            let Some(body) = self.get(&path).await? else {
                continue;
            };
            let listed: Envelope<Vec<Listed>> = parse(&self.url(&path), &body, "applications")?;
            for app in listed.data {
                if apps.len() == max {
                    return Ok(apps);
                }
                if plain_name(&app.name) {
                    apps.push(ListedApp {
                        name: app.name,
                        namespace: domain.name.clone(),
                    });
                } else {
                    tracing::warn!(app = %app.name, "reconcile: an app name the broker would refuse; skipped");
                }
            }
        }
        Ok(apps)
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base.to_string().trim_end_matches('/'))
    }

    /// GET `path` under the base URL: the body, `None` on 404.
    async fn get(&self, path: &str) -> Result<Option<Bytes>, FetchError> {
        let url = self.url(path);
        match tokio::time::timeout(self.timeout, self.get_url(&url)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Http {
                url,
                message: format!("no answer within {:?}", self.timeout),
            }),
        }
    }

    async fn get_url(&self, url: &str) -> Result<Option<Bytes>, FetchError> {
        let http = |message: String| FetchError::Http {
            url: url.to_string(),
            message,
        };
        let uri: http::Uri = url.parse().map_err(|e| http(format!("{e}")))?;
        let host = uri
            .host()
            .ok_or_else(|| http("no host".into()))?
            .to_string();
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
            .await
            .map_err(|e| http(e.to_string()))?;
        let req = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
            .header(
                header::HOST,
                uri.authority().map_or(host.as_str(), |a| a.as_str()),
            )
            .header(header::ACCEPT, "application/json");
        let req = match &self.authorization {
            Some(a) => req.header(header::AUTHORIZATION, a.clone()),
            None => req,
        }
        .body(Empty::<Bytes>::new())
        .map_err(|e| http(e.to_string()))?;
        let resp = if https {
            let tls = self
                .tls
                .as_ref()
                .ok_or_else(|| http("https without a TLS client".into()))?;
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .map_err(|e| http(e.to_string()))?;
            let stream = tls
                .connect(name, tcp)
                .await
                .map_err(|e| http(e.to_string()))?;
            send(TokioIo::new(stream), req).await
        } else {
            send(TokioIo::new(tcp), req).await
        }
        .map_err(http)?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(FetchError::Status {
                url: url.to_string(),
                status: status.as_u16(),
            });
        }
        let body = Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| http(format!("body: {e}")))?;
        Ok(Some(body.to_bytes()))
    }
}

/// One request on a new connection.
async fn send<T>(
    io: TokioIo<T>,
    req: Request<Empty<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    sender.send_request(req).await.map_err(|e| e.to_string())
}

fn parse<'a, T: Deserialize<'a>>(
    url: &str,
    body: &'a [u8],
    kind: &str,
) -> Result<Envelope<T>, FetchError> {
    let format = |message: String| FetchError::Format {
        url: url.to_string(),
        message,
    };
    let reply: Envelope<T> = serde_json::from_slice(body).map_err(|e| format(e.to_string()))?;
    if reply.status != "ok" {
        return Err(format(format!("status {:?}", reply.status)));
    }
    if reply.kind.as_deref().is_some_and(|k| k != kind) {
        return Err(format(format!("type {:?}, expected {kind:?}", reply.kind)));
    }
    Ok(reply)
}

/// An app or domain name as the broker allows them: ASCII letters and digits.
fn plain_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|c| c.is_ascii_alphanumeric())
}

/// An IP literal or a DNS name, as endpoints are announced.
fn valid_address(a: &str) -> bool {
    a.parse::<std::net::IpAddr>().is_ok()
        || (!a.is_empty()
            && a.len() <= 253
            && a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_on_what_it_uses_tolerant_of_the_rest() {
        let ok = br#"{"status":"ok","type":"gear_groups","version":"1.7","messages":[],
            "data":[{"id":"g","name":"g","gear_profile":"small","cartridges":[],
            "gears":[{"id":"abc","state":"started","ssh_url":"x","endpoints":[
              {"cartridge_name":"haproxy-1.4","external_address":"10.0.0.1","external_port":"35531",
               "internal_address":"127.1.2.3","internal_port":"8080","protocols":["http","ws"],
               "types":["load_balancer"],"mappings":[{"frontend":"","backend":""}],"extra":1}]}]}]}"#;
        let r: Envelope<Vec<GearGroup>> = parse("u", ok, "gear_groups").expect("parses");
        assert_eq!(
            r.data[0].gears[0].endpoints[0].cartridge_name,
            "haproxy-1.4"
        );
        let not_ok = br#"{"status":"not_found","type":"gear_groups","data":[]}"#;
        assert!(parse::<Vec<GearGroup>>("u", not_ok, "gear_groups").is_err());
        let wrong_type = br#"{"status":"ok","type":"application","data":[]}"#;
        assert!(parse::<Vec<GearGroup>>("u", wrong_type, "gear_groups").is_err());
        let missing = br#"{"status":"ok","type":"gear_groups","data":[{"gears":[{"id":"a","endpoints":[{"cartridge_name":"x"}]}]}]}"#;
        assert!(parse::<Vec<GearGroup>>("u", missing, "gear_groups").is_err());
        assert!(valid_address("node1.example.com") && valid_address("::1"));
        let domains = br#"{"status":"ok","type":"domains","data":[{"id":"5464","name":"demo","suffix":"x"}]}"#;
        let d: Envelope<Vec<Domain>> = parse("u", domains, "domains").expect("parses");
        assert_eq!(d.data[0].name, "demo");
        assert!(plain_name("MyApp1") && !plain_name("a/b") && !plain_name(""));
        assert!(!valid_address("a b") && !valid_address(""));
    }
}
