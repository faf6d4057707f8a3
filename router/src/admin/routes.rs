//! `GET /routes` (the live route table, PEP 005's routing-table API) and
//! `GET /apps/{app}/stats`.

use super::*;

#[derive(Serialize)]
pub(super) struct RoutesDoc<'a> {
    apps: Vec<AppDoc<'a>>,
    /// Names shared between apps by weight: name → app → weight.
    splits: BTreeMap<&'a str, &'a BTreeMap<String, u32>>,
    /// Each name's path routes (`/aliases/{name}/paths`).
    paths: BTreeMap<&'a str, &'a crate::table::paths::PathRules>,
}

#[derive(Serialize)]
pub(super) struct AppDoc<'a> {
    name: &'a str,
    namespace: &'a str,
    hosts: Vec<&'a str>,
    members: Vec<MemberDoc<'a>>,
    endpoints: &'a [EndpointInfo],
    aliases: &'a [String],
    certificates: &'a [String],
    /// Aliases served a certificate from the ACME CA (see `crate::issuer`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    acme_certificates: Vec<&'a str>,
    /// What applies of its settings (own over `app_defaults`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    settings: Option<&'a crate::policy::settings::AppSettings>,
}

#[derive(Serialize)]
pub(super) struct MemberDoc<'a> {
    address: &'a str,
    in_flight: usize,
    /// Upgraded connections (WebSocket) open to it; they hold no request slot.
    tunnels: usize,
    tls: bool,
}

impl Admin {
    pub(super) fn routes(&self) -> Response<Full<Bytes>> {
        let table = self.table.load_full();
        let certs = self.certs.as_ref().map(|c| c.load_full());
        let doc = RoutesDoc {
            apps: table
                .routes()
                .map(|r| AppDoc {
                    name: &r.name,
                    namespace: &r.namespace,
                    hosts: r.hosts.iter().map(|h| &**h).collect(),
                    members: r
                        .members
                        .iter()
                        .map(|m| MemberDoc {
                            address: &m.member.addr,
                            in_flight: m.member.in_flight(),
                            tunnels: m.member.tunnels(),
                            tls: m.tls,
                        })
                        .collect(),
                    endpoints: &r.endpoints,
                    aliases: &r.aliases,
                    certificates: &r.certificates,
                    acme_certificates: r
                        .aliases
                        .iter()
                        .filter(|a| certs.as_ref().is_some_and(|c| c.has_acme(a)))
                        .map(String::as_str)
                        .collect(),
                    settings: table.policy_for(&r.app).map(|p| &p.effective),
                })
                .collect(),
            splits: table
                .splits
                .iter()
                .map(|(name, s)| (&**name, &s.weights))
                .collect(),
            paths: table
                .paths
                .iter()
                .map(|(name, p)| (&**name, &p.rules))
                .collect(),
        };
        json(&doc)
    }
}

impl Admin {
    /// `GET /apps/{app}/stats`: the app's traffic (see
    /// [`crate::metrics::apps::AppStats`]); 404 for an app not in the table.
    pub(super) fn app_stats(&self, app: &str) -> Response<Full<Bytes>> {
        let traffic = &self.metrics.app_traffic;
        let now = std::time::Instant::now();
        traffic.pass(now);
        match traffic.stats(app, now) {
            Some(stats) => json(&stats),
            None => text(StatusCode::NOT_FOUND, "no such app in the table\n"),
        }
    }
}
