//! `GET /status`: everything the status page shows, as one JSON document, and the
//! page itself (`GET /`, `/status.js`, `/status.css`), embedded in the binary: it
//! works without internet and loads nothing from elsewhere.
//!
//! The page polls this document every two seconds and computes rates, error ratios
//! and latencies from the difference between two polls, so the router keeps only
//! counters (see [`crate::members::Stats`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::{Value, json};

use super::Admin;

pub const PAGE: &str = include_str!("page/index.html");
pub const SCRIPT: &str = include_str!("page/status.js");
pub const STYLE: &str = include_str!("page/status.css");

/// How many parked messages the page lists (newest first).
const DEAD_LETTERS_SHOWN: usize = 10;
/// Bytes of a parked message's reason file read.
const REASON_BYTES: usize = 512;

/// One sample line of the metrics text: name with labels → value.
fn samples(text: &str) -> BTreeMap<&str, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name, value.parse().ok()?))
        })
        .collect()
}

/// The value of label `label` in a sample name such as `x{alias="a"}`.
fn label<'a>(sample: &'a str, label: &str) -> Option<&'a str> {
    let start = sample.find(&format!("{label}=\""))? + label.len() + 2;
    let rest = &sample[start..];
    Some(&rest[..rest.find('"')?])
}

#[derive(Serialize)]
struct DeadLetter {
    file: String,
    at: u64,
    reason: String,
}

/// The newest parked messages with their reasons.
fn dead_letters(dir: &Path) -> Vec<DeadLetter> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut parked: Vec<(u64, std::path::PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "reason"))
        .filter_map(|p| {
            let at = std::fs::metadata(&p)
                .and_then(|m| m.modified())
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs();
            Some((at, p))
        })
        .collect();
    parked.sort_by_key(|p| std::cmp::Reverse(p.0));
    parked
        .into_iter()
        .take(DEAD_LETTERS_SHOWN)
        .map(|(at, p)| {
            use std::io::Read;
            let mut reason = String::new();
            if let Ok(f) = std::fs::File::open(&p) {
                let _ = f.take(REASON_BYTES as u64).read_to_string(&mut reason);
            }
            DeadLetter {
                file: p
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                at,
                reason: reason.trim().to_string(),
            }
        })
        .collect()
}

/// Each app of the live table: its names, members (health, slots, tunnels,
/// history), settings, requests refused (`sum_of`: the sum of the samples
/// under a prefix) and its traffic (see [`crate::metrics::apps::AppStats`]).
fn app_documents(
    table: &crate::table::RouteTable,
    sum_of: &impl Fn(&str) -> f64,
    traffic: &crate::metrics::apps::AppsTraffic,
) -> Vec<Value> {
    let now = std::time::Instant::now();
    traffic.pass(now);
    table
        .routes()
        .map(|r| {
            let members: Vec<Value> = r
                .members
                .iter()
                .map(|t| {
                    let b = &t.member;
                    json!({
                        "address": &*b.addr,
                        "health": b.health.get().as_str(),
                        "rotate": if b.rotated_out() { "out" } else { "in" },
                        "in_flight": b.in_flight(),
                        "tunnels": b.tunnels(),
                        "idle_connections": b.pool.idle_count(),
                        "tls": t.tls,
                        "stats": b.stats.snapshot(),
                        "history": b.health.history(),
                    })
                })
                .collect();
            let policy = table.policy_for(&r.app);
            let refused = policy.map_or(0.0, |p| {
                sum_of(&format!(
                    "router_app_requests_refused_total{{app=\"{}\"",
                    p.label
                ))
            });
            json!({
                "app": r.app.to_string(),
                "settings": policy.map(|p| p.effective.summary()).unwrap_or_default(),
                "refused": refused,
                "name": r.name,
                "namespace": r.namespace,
                "hosts": r.hosts.iter().map(|h| &**h).collect::<Vec<_>>(),
                "passthrough": r.passthrough,
                "members": members,
                "endpoints": r.endpoints.len(),
                "traffic": traffic.stats(&format!("{}-{}", r.name, r.namespace), now),
            })
        })
        .collect()
}

/// Each alias certificate's expiry, from the metrics' samples, at `now`,
/// where it comes from (`upload`, `acme`, `default`) and the age of its OCSP
/// staple (none: not stapled).
fn certificate_documents(
    m: &BTreeMap<&str, f64>,
    now: u64,
    certs: Option<&crate::tls::store::Certs>,
) -> Vec<Value> {
    m.iter()
        .filter(|(k, _)| k.starts_with("router_tls_certificate_expiry_timestamp_seconds{"))
        .filter_map(|(k, v)| {
            let not_after = *v as i64;
            let name = label(k, "alias")?;
            let source = match certs {
                _ if name == "default" => "default",
                Some(c) => c.source(name),
                None => "upload",
            };
            // The OCSP answer stapled for it (`tls.ocsp`): its age in seconds.
            let stapled = m
                .get(
                    format!("router_tls_ocsp_staple_timestamp_seconds{{alias=\"{name}\"}}")
                        .as_str(),
                )
                .map(|t| now as i64 - *t as i64);
            Some(json!({
                "name": name,
                "not_after": not_after,
                "days": (not_after - now as i64).div_euclid(86_400),
                "source": source,
                "staple_age_seconds": stapled,
            }))
        })
        .collect()
}

/// The status document.
pub fn document(admin: &Admin) -> Value {
    let now = crate::ring::unix_now();
    let text = admin.metrics.render();
    let m = samples(&text);
    let get = |k: &str| m.get(k).copied().unwrap_or(0.0);
    let sum_of = |prefix: &str| -> f64 {
        m.iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    };
    let table = admin.table.load_full();
    let apps = app_documents(&table, &sum_of, &admin.metrics.app_traffic);
    let certs = admin.certs.as_ref().map(|c| c.load_full());
    let certificates = certificate_documents(&m, now, certs.as_deref());
    let outcomes: BTreeMap<&str, f64> = m
        .iter()
        .filter(|(k, _)| k.starts_with("spi_events_total{"))
        .filter_map(|(k, v)| Some((label(k, "outcome")?, *v)))
        .fold(BTreeMap::new(), |mut acc, (o, v)| {
            *acc.entry(o).or_default() += v;
            acc
        });
    let latency: Vec<Value> = m
        .iter()
        .filter(|(k, _)| k.starts_with("router_http_request_duration_seconds_bucket{"))
        .filter_map(|(k, v)| Some(json!({ "le": label(k, "le")?, "count": v })))
        .collect();
    json!({
        "now": now,
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "ready": admin.ready.load(std::sync::atomic::Ordering::Acquire),
        "token_required": admin.token.load().is_some(),
        "totals": {
            "requests": sum_of("router_http_requests_total{"),
            "errors": get("router_http_requests_total{class=\"5xx\"}"),
            "open_connections": sum_of("router_open_connections{"),
            "latency_sum": get("router_http_request_duration_seconds_sum"),
            "latency_count": get("router_http_request_duration_seconds_count"),
            "latency_buckets": latency,
            "apps": table.app_count(),
            "hosts": table.host_count(),
        },
        "apps": apps,
        "splits": table.splits.iter().map(|(n, s)| (n.to_string(), s.weights.clone())).collect::<BTreeMap<_, _>>(),
        "certificates": certificates,
        "source": {
            "kind": admin.source,
            // Only a broker has a connection to speak of.
            "connected": matches!(admin.source, "stomp" | "amqp")
                .then(|| m.get("spi_broker_connected").copied())
                .flatten(),
            "last_event": get("spi_last_event_timestamp_seconds"),
            "propagation_sum": get("spi_route_propagation_seconds_sum"),
            "propagation_count": get("spi_route_propagation_seconds_count"),
            "events": outcomes,
            "dead_letters": get("spi_dead_letters_total"),
            "recent_dead_letters": dead_letters(&admin.dead_letters),
        },
        "changes": admin.recent.list(),
        "audit": admin.audit.entries().into_iter().rev().collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_labels() {
        let m = samples("# HELP x\nx{alias=\"a.example.com\"} 17\ny 2.5\nbad\n");
        assert_eq!(m.get("y"), Some(&2.5));
        let (k, _) = m.iter().next().expect("one");
        assert_eq!(label(k, "alias"), Some("a.example.com"));
        assert_eq!(label(k, "nope"), None);
    }
}
