//! Routing-SPI messages: the YAML the broker's routing plugin publishes, decoded
//! into typed [`RoutingEvent`]s.
//!
//! The wire format is Ruby's `Hash#to_yaml` (Psych) with Symbol keys (`:action:`) and
//! Symbol values (`:add_public_endpoint`), in two dialects (Ruby 1.9.3's `! '...'`
//! strings and Ruby 2's `|` blocks); `fixtures/spi-events/` holds one message of
//! each kind in each dialect, and "Event flow" in `docs/architecture.md` lists the actions.
//! This module turns bytes into values and nothing else: it never touches state, and a
//! bad message is a [`DecodeError`] value, never a panic.
//!
//! What is decoded but not applied is a [`Decoded::Ignored`] (unknown actions, foreign
//! messages, deprecated `add_gear`/`delete_gear` duplicates): counted, then acknowledged.

use std::fmt;

use serde::Deserialize;

/// Identifies an application: its name (case preserved, as the broker sends it) and
/// its namespace (the domain).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppId {
    pub name: String,
    pub namespace: String,
}

/// One public endpoint of a gear: where the node's port proxy listens for it and what
/// sits behind it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    /// The gear's id; several endpoints share it, and a moved gear keeps it.
    pub gear_id: Option<String>,
    /// The cartridge name (e.g. `haproxy-1.4`), despite the field's name.
    pub port_name: Option<String>,
    /// The node's public address: dialled exactly, because the port proxy only
    /// translates traffic addressed to it.
    pub address: String,
    pub port: u16,
    pub protocols: Vec<String>,
    pub types: Vec<String>,
    pub mappings: Vec<Mapping>,
}

impl Endpoint {
    /// The key members are stored and matched by: removes carry nothing else.
    pub fn key(&self) -> String {
        endpoint_key(&self.address, self.port)
    }
}

/// `address:port`, the identity of an endpoint (`[v6]:port` for IPv6 literals).
pub fn endpoint_key(address: &str, port: u16) -> String {
    if address.contains(':') && !address.starts_with('[') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// A frontend/backend path mapping as the node reported it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mapping {
    #[serde(default)]
    pub frontend: String,
    #[serde(default)]
    pub backend: String,
}

/// A certificate chain and private key for one alias, exactly as uploaded.
///
/// `Debug` never prints the key or the pass phrase: secrets must not reach the logs.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CertBundle {
    /// PEM, possibly with extra chain certificates after the leaf.
    pub certificate_pem: String,
    /// PEM; may be encrypted (legacy `Proc-Type: 4,ENCRYPTED`).
    pub private_key_pem: String,
    pub pass_phrase: Option<String>,
}

impl fmt::Debug for CertBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertBundle")
            .field("certificate_pem_len", &self.certificate_pem.len())
            .field("private_key_pem", &"<redacted>")
            .field(
                "pass_phrase",
                &self.pass_phrase.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// A routing change, decoded and validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoutingEvent {
    CreateApplication {
        app: AppId,
        scalable: Option<bool>,
        ha: Option<bool>,
    },
    DeleteApplication {
        app: AppId,
    },
    AddPublicEndpoint {
        app: AppId,
        endpoint: Endpoint,
    },
    RemovePublicEndpoint {
        app: AppId,
        gear_id: Option<String>,
        address: String,
        port: u16,
    },
    AddAlias {
        app: AppId,
        alias: String,
    },
    RemoveAlias {
        app: AppId,
        alias: String,
    },
    AddSsl {
        app: AppId,
        alias: String,
        bundle: CertBundle,
    },
    RemoveSsl {
        app: AppId,
        alias: String,
    },
}

impl RoutingEvent {
    pub fn app(&self) -> &AppId {
        match self {
            RoutingEvent::CreateApplication { app, .. }
            | RoutingEvent::DeleteApplication { app }
            | RoutingEvent::AddPublicEndpoint { app, .. }
            | RoutingEvent::RemovePublicEndpoint { app, .. }
            | RoutingEvent::AddAlias { app, .. }
            | RoutingEvent::RemoveAlias { app, .. }
            | RoutingEvent::AddSsl { app, .. }
            | RoutingEvent::RemoveSsl { app, .. } => app,
        }
    }

    /// The action's wire name, a bounded label for metrics.
    pub fn action(&self) -> &'static str {
        match self {
            RoutingEvent::CreateApplication { .. } => "create_application",
            RoutingEvent::DeleteApplication { .. } => "delete_application",
            RoutingEvent::AddPublicEndpoint { .. } => "add_public_endpoint",
            RoutingEvent::RemovePublicEndpoint { .. } => "remove_public_endpoint",
            RoutingEvent::AddAlias { .. } => "add_alias",
            RoutingEvent::RemoveAlias { .. } => "remove_alias",
            RoutingEvent::AddSsl { .. } => "add_ssl",
            RoutingEvent::RemoveSsl { .. } => "remove_ssl",
        }
    }
}

impl fmt::Display for RoutingEvent {
    /// One line for operators; never shows keys or pass phrases.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let app = self.app();
        write!(f, "{} {}-{}", self.action(), app.name, app.namespace)?;
        match self {
            RoutingEvent::CreateApplication { scalable, ha, .. } => {
                write!(f, " scalable={scalable:?} ha={ha:?}")
            }
            RoutingEvent::DeleteApplication { .. } => Ok(()),
            RoutingEvent::AddPublicEndpoint { endpoint, .. } => write!(
                f,
                " {} types={} protocols={} cartridge={}",
                endpoint.key(),
                endpoint.types.join(","),
                endpoint.protocols.join(","),
                endpoint.port_name.as_deref().unwrap_or("-")
            ),
            RoutingEvent::RemovePublicEndpoint { address, port, .. } => {
                write!(f, " {}", endpoint_key(address, *port))
            }
            RoutingEvent::AddAlias { alias, .. }
            | RoutingEvent::RemoveAlias { alias, .. }
            | RoutingEvent::RemoveSsl { alias, .. } => write!(f, " {alias}"),
            RoutingEvent::AddSsl { alias, bundle, .. } => write!(
                f,
                " {alias} certificates={} key_encrypted={}",
                bundle.certificate_pem.matches("BEGIN CERTIFICATE").count(),
                bundle.pass_phrase.is_some()
            ),
        }
    }
}

/// What a message turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// A routing change to apply.
    Event(RoutingEvent),
    /// Understood and deliberately not applied (acknowledged and counted).
    Ignored {
        /// The action as sent (or `<none>`); only used for logs.
        action: String,
        reason: IgnoreReason,
    },
}

/// Why a well-formed message is not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IgnoreReason {
    /// An action this router does not know (e.g. `rotate_out`, another plugin's).
    UnknownAction,
    /// `add_gear`/`delete_gear` sent with `:deprecated:` beside the new-style event
    /// (OSE 2.0/2.1): applying it would apply the same change twice.
    DeprecatedDuplicate,
}

impl IgnoreReason {
    pub fn as_str(self) -> &'static str {
        match self {
            IgnoreReason::UnknownAction => "unknown_action",
            IgnoreReason::DeprecatedDuplicate => "deprecated_duplicate",
        }
    }
}

/// Why a message cannot be decoded. Such messages are dead-lettered: retrying them
/// would fail the same way.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("not valid YAML for a routing event: {0}")]
    Syntax(String),
    #[error("the message has no :action")]
    NoAction,
    #[error("{action}: required field {field} is missing or empty")]
    MissingField {
        action: &'static str,
        field: &'static str,
    },
    #[error("{action}: field {field} is invalid: {reason}")]
    InvalidField {
        action: &'static str,
        field: &'static str,
        reason: String,
    },
    #[error("the message is larger than {max} bytes; not read")]
    TooLarge { max: u64 },
}

/// Decodes one message body.
pub fn decode(body: &[u8]) -> Result<Decoded, DecodeError> {
    let text = std::str::from_utf8(body)
        .map_err(|e| DecodeError::Syntax(format!("body is not UTF-8: {e}")))?;
    // The parser's message ends with an excerpt of the input; the input may hold a
    // private key, and this message reaches logs and .reason files: keep line one.
    let raw = match flat::read(text) {
        Some(raw) => raw,
        None => general(text)?,
    };
    raw.into_decoded()
}

/// Reads any message with the general YAML parser.
fn general(text: &str) -> Result<RawEvent, DecodeError> {
    serde_saphyr::from_str(text).map_err(|e| {
        let full = e.to_string();
        let first = full.lines().next().unwrap_or("").trim();
        DecodeError::Syntax(first.strip_prefix("error: ").unwrap_or(first).to_string())
    })
}

/// For the `routing_event` fuzz target: where the flat reader reads `body`, what
/// it read and what the general parser read, if they differ.
#[doc(hidden)]
pub fn flat_differs(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let flat = flat::read(text)?;
    match general(text) {
        Ok(general) if general == flat => None,
        other => Some(format!("flat: {flat:?}\ngeneral: {other:?}")),
    }
}

/// Every field any action may carry; each action then takes what it needs.
/// Unknown keys are allowed: foreign plugins' messages carry other fields.
#[derive(Deserialize, Default, Debug, PartialEq)]
struct RawEvent {
    #[serde(rename = ":action")]
    action: Option<Scalar>,
    #[serde(rename = ":app_name")]
    app_name: Option<Scalar>,
    #[serde(rename = ":namespace")]
    namespace: Option<Scalar>,
    #[serde(rename = ":scalable")]
    scalable: Option<bool>,
    #[serde(rename = ":ha")]
    ha: Option<bool>,
    #[serde(rename = ":gear_id")]
    gear_id: Option<Scalar>,
    #[serde(rename = ":public_port_name")]
    public_port_name: Option<Scalar>,
    #[serde(rename = ":public_address")]
    public_address: Option<Scalar>,
    #[serde(rename = ":public_port")]
    public_port: Option<Scalar>,
    #[serde(rename = ":protocols")]
    protocols: Option<Vec<Scalar>>,
    #[serde(rename = ":types")]
    types: Option<Vec<Scalar>>,
    #[serde(rename = ":mappings")]
    mappings: Option<Vec<RawMapping>>,
    #[serde(rename = ":alias")]
    alias: Option<Scalar>,
    #[serde(rename = ":ssl")]
    ssl: Option<Scalar>,
    #[serde(rename = ":private_key")]
    private_key: Option<Scalar>,
    #[serde(rename = ":pass_phrase")]
    pass_phrase: Option<Scalar>,
    #[serde(rename = ":deprecated")]
    deprecated: Option<Scalar>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct RawMapping {
    #[serde(default)]
    frontend: Option<Scalar>,
    #[serde(default)]
    backend: Option<Scalar>,
}

/// A YAML scalar read as text whatever its implicit type: Psych quotes `'2048'` but
/// emits `5465012345e7890123456789` plain, and both are strings to Ruby.
#[derive(Clone, Debug, PartialEq)]
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Asking for a string makes the reader hand over the scalar's text instead of
        // guessing a type from its looks (YAML 1.2 would make the id above a float).
        String::deserialize(d).map(Scalar)
    }
}

impl Scalar {
    /// The text without a Ruby Symbol's leading colon.
    fn symbol(&self) -> &str {
        self.0.strip_prefix(':').unwrap_or(&self.0)
    }
}

/// Reads one field of one action, turning absence into a typed error.
struct Fields {
    action: &'static str,
}

impl Fields {
    fn text(&self, v: Option<Scalar>, field: &'static str) -> Result<String, DecodeError> {
        match v {
            Some(Scalar(s)) if !s.trim().is_empty() => Ok(s),
            _ => Err(DecodeError::MissingField {
                action: self.action,
                field,
            }),
        }
    }

    /// The app's name and namespace, held to what the broker allows (routing-spi §2:
    /// app `[A-Za-z0-9]{1,32}`, namespace `[a-z0-9]{1,16}`): they end up in host names
    /// and in the health check's `Host:` line, so a CR/LF or a space must never pass.
    fn app(&self, raw: &mut RawEvent) -> Result<AppId, DecodeError> {
        let name = self.text(raw.app_name.take(), ":app_name")?;
        let namespace = self.text(raw.namespace.take(), ":namespace")?;
        if name.len() > 32 || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(DecodeError::InvalidField {
                action: self.action,
                field: ":app_name",
                reason: "not [A-Za-z0-9]{1,32}".into(),
            });
        }
        if namespace.len() > 16
            || !namespace
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        {
            return Err(DecodeError::InvalidField {
                action: self.action,
                field: ":namespace",
                reason: "not [a-z0-9]{1,16}".into(),
            });
        }
        Ok(AppId { name, namespace })
    }

    fn alias(&self, raw: &mut RawEvent) -> Result<String, DecodeError> {
        let alias = self.text(raw.alias.take(), ":alias")?;
        // The broker lower-cases aliases before use; DNS names are case-insensitive.
        let alias = alias.trim().trim_end_matches('.').to_ascii_lowercase();
        // A DNS name: labels of [a-z0-9-] (1-63, no leading or trailing hyphen), at
        // most 253 in all; nothing else may reach a Host header or an SNI table.
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        // A wildcard alias (`*.customer.com`) is `*` and a name of two labels
        // or more: whether the router routes it is its admission switch.
        let name = alias.strip_prefix("*.").unwrap_or(&alias);
        let wildcard_ok = name.len() == alias.len() || name.contains('.');
        if name.is_empty() || alias.len() > 253 || !wildcard_ok || !name.split('.').all(label_ok) {
            return Err(DecodeError::InvalidField {
                action: self.action,
                field: ":alias",
                reason: "not a host name".into(),
            });
        }
        Ok(alias)
    }

    fn port(&self, v: Option<Scalar>) -> Result<u16, DecodeError> {
        let text = self.text(v, ":public_port")?;
        text.trim()
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| DecodeError::InvalidField {
                action: self.action,
                field: ":public_port",
                reason: format!("{text:?} is not a TCP port"),
            })
    }

    fn address(&self, v: Option<Scalar>) -> Result<String, DecodeError> {
        let address = self.text(v, ":public_address")?.trim().to_string();
        if address.contains(|c: char| c.is_whitespace() || c == '/') {
            return Err(DecodeError::InvalidField {
                action: self.action,
                field: ":public_address",
                reason: "not an address".into(),
            });
        }
        Ok(address)
    }

    fn endpoint(&self, raw: &mut RawEvent) -> Result<Endpoint, DecodeError> {
        let list = |v: Option<Vec<Scalar>>| -> Vec<String> {
            v.unwrap_or_default().into_iter().map(|s| s.0).collect()
        };
        let address = self.address(raw.public_address.take())?;
        // Members are dialled by address on the request path, which resolves no names:
        // a host name here would be a member that every request fails to reach (and
        // ejects). Refused at decode, so it is dead-lettered with its reason. Removes
        // stay lenient, so a name stored by an older version can still be removed.
        if address.parse::<std::net::IpAddr>().is_err() {
            return Err(DecodeError::InvalidField {
                action: self.action,
                field: ":public_address",
                reason: format!("{address:?} is not an IP address (member names are not resolved)"),
            });
        }
        Ok(Endpoint {
            gear_id: raw.gear_id.take().map(|s| s.0),
            port_name: raw.public_port_name.take().map(|s| s.0),
            address,
            port: self.port(raw.public_port.take())?,
            protocols: list(raw.protocols.take()),
            types: list(raw.types.take()),
            mappings: raw
                .mappings
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|m| Mapping {
                    frontend: m.frontend.map(|s| s.0).unwrap_or_default(),
                    backend: m.backend.map(|s| s.0).unwrap_or_default(),
                })
                .collect(),
        })
    }
}

impl RawEvent {
    fn into_decoded(mut self) -> Result<Decoded, DecodeError> {
        let action = self.action.take().ok_or(DecodeError::NoAction)?;
        let event = match action.symbol() {
            "create_application" => {
                let f = Fields {
                    action: "create_application",
                };
                RoutingEvent::CreateApplication {
                    app: f.app(&mut self)?,
                    scalable: self.scalable,
                    ha: self.ha,
                }
            }
            "delete_application" => {
                let f = Fields {
                    action: "delete_application",
                };
                RoutingEvent::DeleteApplication {
                    app: f.app(&mut self)?,
                }
            }
            "add_public_endpoint" => self.add_endpoint("add_public_endpoint")?,
            "remove_public_endpoint" => self.remove_endpoint("remove_public_endpoint")?,
            "add_alias" => {
                let f = Fields {
                    action: "add_alias",
                };
                RoutingEvent::AddAlias {
                    app: f.app(&mut self)?,
                    alias: f.alias(&mut self)?,
                }
            }
            "remove_alias" => {
                let f = Fields {
                    action: "remove_alias",
                };
                RoutingEvent::RemoveAlias {
                    app: f.app(&mut self)?,
                    alias: f.alias(&mut self)?,
                }
            }
            "add_ssl" => self.add_ssl()?,
            "remove_ssl" => {
                let f = Fields {
                    action: "remove_ssl",
                };
                RoutingEvent::RemoveSsl {
                    app: f.app(&mut self)?,
                    alias: f.alias(&mut self)?,
                }
            }
            // Pre-2014 brokers sent only these; OSE 2.0/2.1 sent them *besides* the
            // new-style events, marked `:deprecated:`. Only the former are applied.
            "add_gear" | "delete_gear" if self.deprecated.is_some() => {
                return Ok(Decoded::Ignored {
                    action: action.symbol().to_string(),
                    reason: IgnoreReason::DeprecatedDuplicate,
                });
            }
            "add_gear" => self.add_endpoint("add_gear")?,
            "delete_gear" => self.remove_endpoint("delete_gear")?,
            other => {
                return Ok(Decoded::Ignored {
                    action: other.to_string(),
                    reason: IgnoreReason::UnknownAction,
                });
            }
        };
        Ok(Decoded::Event(event))
    }

    fn add_ssl(mut self) -> Result<RoutingEvent, DecodeError> {
        let f = Fields { action: "add_ssl" };
        let app = f.app(&mut self)?;
        let alias = f.alias(&mut self)?;
        let bundle = CertBundle {
            certificate_pem: f.text(self.ssl.take(), ":ssl")?,
            private_key_pem: f.text(self.private_key.take(), ":private_key")?,
            // Psych writes nil as an empty value; an empty phrase means none.
            pass_phrase: self
                .pass_phrase
                .take()
                .map(|s| s.0)
                .filter(|s| !s.is_empty()),
        };
        Ok(RoutingEvent::AddSsl { app, alias, bundle })
    }

    fn add_endpoint(mut self, action: &'static str) -> Result<RoutingEvent, DecodeError> {
        let f = Fields { action };
        Ok(RoutingEvent::AddPublicEndpoint {
            app: f.app(&mut self)?,
            endpoint: f.endpoint(&mut self)?,
        })
    }

    fn remove_endpoint(mut self, action: &'static str) -> Result<RoutingEvent, DecodeError> {
        let f = Fields { action };
        Ok(RoutingEvent::RemovePublicEndpoint {
            app: f.app(&mut self)?,
            gear_id: self.gear_id.take().map(|s| s.0),
            address: f.address(self.public_address.take())?,
            port: f.port(self.public_port.take())?,
        })
    }
}

#[cfg(test)]
mod tests;

mod flat;
