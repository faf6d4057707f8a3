//! `tls:` and `upstream.tls`: certificates served, tickets, and TLS to members; the
//! checks of `tls:`.

use super::*;

/// Client-facing TLS.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM chain served when no alias certificate matches the SNI name (normally the
    /// `*.<cloud_domain>` wildcard, which covers the HA names), and without SNI.
    pub default_cert: Option<PathBuf>,
    /// Its private key (PEM: PKCS#1, PKCS#8 or SEC1; may be encrypted).
    pub default_key: Option<PathBuf>,
    /// A file whose first line is the pass phrase of an encrypted `default_key`.
    pub default_key_pass_file: Option<PathBuf>,
    /// Secret shared by both routers of the pair (at least 32 random bytes) from
    /// which session-ticket keys are derived, so clients resume after failover.
    pub session_ticket_key_file: Option<PathBuf>,
    /// How often the ticket key changes (tickets live one to two periods).
    #[serde(with = "humantime_serde")]
    pub session_ticket_rotation: Duration,
    /// Session resumption at all (without a key file: this router's memory only).
    pub resumption: bool,
    /// A removed certificate whose alias stays is served this long, so that the
    /// broker's `remove_ssl` + `add_ssl` replacement leaves no gap.
    #[serde(with = "humantime_serde")]
    pub replace_grace: Duration,
    /// Answer plain HTTP for hosts that have a certificate with a redirect to HTTPS
    /// (301 for GET/HEAD, 308 otherwise).
    pub redirect_http: bool,
    /// Time a client has to finish its TLS handshake.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// The key-exchange groups offered, most preferred first (see
    /// `crate::tls::groups`): by default the hybrid post-quantum
    /// `x25519mlkem768`, then `x25519`, `secp256r1`, `secp384r1`.
    pub groups: Vec<String>,
    /// The versions and suites offered to clients (see `crate::tls::profile`):
    /// `old`, `intermediate` (default), `modern` or `custom`.
    pub profile: crate::tls::profile::Profile,
    /// `custom`: the lowest version, `1.2` (default) or `1.3`.
    pub min_version: Option<String>,
    /// `custom`: the suites, by IANA or OpenSSL name (none: every one).
    pub ciphers: Vec<String>,
    /// Client certificates (see `crate::tls::client_auth`); none: not asked for.
    pub client_certificates: Option<crate::tls::client_auth::ClientAuthSettings>,
    /// Names (or `*.domain`) with a client-certificate policy of their own.
    pub client_certificates_by_name: crate::tls::client_auth::ByName,
    /// OCSP stapling (see `crate::tls::ocsp`).
    pub ocsp: crate::tls::ocsp::OcspSettings,
}

impl TlsConfig {
    /// The client side's crypto: `tls.groups` and the profile's suites.
    pub fn provider(&self) -> rustls::crypto::CryptoProvider {
        self.profile()
            .apply(crate::tls::groups::provider(&self.groups))
    }

    /// The client side's profile.
    pub fn profile(&self) -> crate::tls::profile::Settings<'_> {
        crate::tls::profile::Settings {
            profile: self.profile,
            min_version: self.min_version.as_deref(),
            ciphers: &self.ciphers,
        }
    }
}

impl Default for TlsConfig {
    fn default() -> TlsConfig {
        TlsConfig {
            default_cert: None,
            default_key: None,
            default_key_pass_file: None,
            session_ticket_key_file: None,
            session_ticket_rotation: Duration::from_secs(3600),
            resumption: true,
            replace_grace: Duration::from_secs(10),
            redirect_http: false,
            handshake_timeout: Duration::from_secs(10),
            groups: crate::tls::groups::default_names(),
            profile: crate::tls::profile::Profile::default(),
            min_version: None,
            ciphers: Vec::new(),
            client_certificates: None,
            client_certificates_by_name: Default::default(),
            ocsp: crate::tls::ocsp::OcspSettings::default(),
        }
    }
}

/// TLS towards `ssl_to_gear` members.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// PEM bundle of the CAs that sign the members' certificates (default: the
    /// system bundle).
    pub ca_file: Option<PathBuf>,
    /// Check the member's certificate. `false` encrypts without authenticating.
    #[serde(default = "yes")]
    pub verify: bool,
    /// The versions and suites offered to members (see `crate::tls::profile`).
    #[serde(default)]
    pub profile: crate::tls::profile::Profile,
    /// `custom`: the lowest version, `1.2` (default) or `1.3`.
    #[serde(default)]
    pub min_version: Option<String>,
    /// `custom`: the suites, by IANA or OpenSSL name (none: every one).
    #[serde(default)]
    pub ciphers: Vec<String>,
}

impl UpstreamTls {
    /// The member side's profile.
    pub fn profile(&self) -> crate::tls::profile::Settings<'_> {
        crate::tls::profile::Settings {
            profile: self.profile,
            min_version: self.min_version.as_deref(),
            ciphers: &self.ciphers,
        }
    }
}

impl Default for UpstreamTls {
    fn default() -> UpstreamTls {
        UpstreamTls {
            ca_file: None,
            verify: true,
            profile: crate::tls::profile::Profile::default(),
            min_version: None,
            ciphers: Vec::new(),
        }
    }
}

impl Config {
    /// `tls`.
    pub(super) fn validate_tls(&self) -> Result<(), Invalid> {
        let t = &self.tls;
        crate::tls::groups::check(&t.groups).map_err(|e| ("tls.groups", e))?;
        t.profile()
            .check()
            .map_err(|(f, e)| (profile_field("tls", f), e))?;
        self.upstream
            .tls
            .profile()
            .check()
            .map_err(|(f, e)| (profile_field("upstream.tls", f), e))?;
        if t.default_cert.is_some() != t.default_key.is_some() {
            let field = if t.default_cert.is_some() {
                "tls.default_key"
            } else {
                "tls.default_cert"
            };
            return Err((
                field,
                "tls.default_cert and tls.default_key go together".into(),
            ));
        }
        if self.tls.redirect_http && self.listen.https.is_none() {
            return Err((
                "tls.redirect_http",
                "redirecting to HTTPS needs listen.https".into(),
            ));
        }
        if self.listen.http3.is_some() && self.listen.https.is_none() {
            return Err((
                "listen.http3",
                "HTTP/3 is announced on HTTPS responses and shares its certificates: it needs listen.https".into(),
            ));
        }
        if self.http3.max_concurrent_streams == Some(0) {
            return Err(("http3.max_concurrent_streams", "must be at least 1".into()));
        }
        if t.session_ticket_rotation < Duration::from_secs(60) {
            return Err(("tls.session_ticket_rotation", "must be at least 1m".into()));
        }
        for name in t.client_certificates_by_name.keys() {
            let host = name.strip_prefix("*.").unwrap_or(name);
            let ok = host.contains('.')
                && *name == name.to_ascii_lowercase()
                && host.split('.').all(|l| {
                    !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            if !ok {
                return Err((
                    "tls.client_certificates_by_name",
                    format!("{name:?} is not a lower-case host name or *.domain"),
                ));
            }
        }
        if t.client_certificates_by_name.len() > usize::from(u16::MAX) {
            return Err((
                "tls.client_certificates_by_name",
                "at most 65535 names".into(),
            ));
        }
        let o = &t.ocsp;
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&o.timeout) {
            return Err(("tls.ocsp.timeout", "must be from 1s to 5m".into()));
        }
        if o.refresh < crate::tls::ocsp::MIN_REFRESH {
            return Err(("tls.ocsp.refresh", "must be at least 5m".into()));
        }
        if o.retry < Duration::from_secs(1) || o.retry > o.refresh {
            return Err((
                "tls.ocsp.retry",
                "must be at least 1s and at most tls.ocsp.refresh".into(),
            ));
        }
        Ok(())
    }
}

/// `tls.profile` and its like, as a static field path.
fn profile_field(side: &str, field: &str) -> &'static str {
    match (side, field) {
        ("tls", "min_version") => "tls.min_version",
        ("tls", "ciphers") => "tls.ciphers",
        ("tls", _) => "tls.profile",
        (_, "min_version") => "upstream.tls.min_version",
        (_, "ciphers") => "upstream.tls.ciphers",
        _ => "upstream.tls.profile",
    }
}
