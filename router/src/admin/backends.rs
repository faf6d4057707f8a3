//! `GET /backends` and `POST /backends/{address:port}/rotate-out|rotate-in`: every
//! member's state, and taking one out of (or back into) service.

use super::*;

/// Longest rotate-out wait an operator may ask for.
pub(super) const MAX_DRAIN_WAIT: Duration = Duration::from_secs(3600);
pub(super) const DEFAULT_DRAIN_WAIT: Duration = Duration::from_secs(30);

#[derive(Serialize)]
pub(super) struct LiveMemberDoc<'a> {
    address: &'a str,
    health: &'static str,
    rotate: &'static str,
    in_flight: usize,
    tunnels: usize,
    idle_connections: usize,
    apps: &'a [String],
    /// Slow start: its share while it warms up; absent when warm.
    #[serde(skip_serializing_if = "Option::is_none")]
    warming: Option<crate::members::warm::Warming>,
}

#[derive(Serialize)]
pub(super) struct RotateDoc<'a> {
    address: &'a str,
    rotate: &'static str,
    /// Whether the address is a member of some route now.
    member: bool,
    /// rotate-out only: `drained` or `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'static str>,
    in_flight: usize,
    waited_ms: u128,
    /// With a pair: each router's own result (this one first), `result`
    /// being `drained` only when both drained.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routers: Vec<RouterRotate>,
}

/// One router's part of a pair's rotate-out or rotate-in.
#[derive(Serialize)]
pub(super) struct RouterRotate {
    /// `a` or `b`, or the peer's admin address.
    router: String,
    /// `drained`, `timeout`, `in`, or why the peer did not answer.
    result: String,
}

impl Admin {
    pub(super) fn backends(&self) -> Response<Full<Bytes>> {
        let table = self.table.load_full();
        let mut apps: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in table.routes() {
            for m in &r.members {
                apps.entry(&m.member.addr)
                    .or_default()
                    .push(format!("{}-{}", r.name, r.namespace));
            }
        }
        let live = self.registry.live();
        let members: Vec<LiveMemberDoc> = live
            .iter()
            .map(|b| LiveMemberDoc {
                address: &b.addr,
                health: b.health.get().as_str(),
                rotate: if b.rotated_out() { "out" } else { "in" },
                in_flight: b.in_flight(),
                tunnels: b.tunnels(),
                idle_connections: b.pool.idle_count(),
                apps: apps.get(&*b.addr).map_or(&[], |v| v.as_slice()),
                warming: b.health.warming(),
            })
            .collect();
        // Rotated out but not a member now (removed, or not announced yet).
        let absent: Vec<String> = self
            .registry
            .rotated_out()
            .into_iter()
            .filter(|a| !live.iter().any(|b| *b.addr == **a))
            .collect();
        json(&serde_json::json!({
            "backends": members,
            "rotated_out_absent": absent,
        }))
    }
}

impl Admin {
    /// `{address:port}/rotate-out` or `{address:port}/rotate-in`.
    pub(super) async fn rotate(&self, rest: &str, query: Option<&str>) -> Response<Full<Bytes>> {
        let Some((raw, action)) = rest.rsplit_once('/') else {
            return text(StatusCode::NOT_FOUND, "not found\n");
        };
        let out = match action {
            "rotate-out" => true,
            "rotate-in" => false,
            _ => return text(StatusCode::NOT_FOUND, "not found\n"),
        };
        let Some(addr) = percent_decode(raw).filter(|a| valid_member_address(a)) else {
            return text(
                StatusCode::BAD_REQUEST,
                "the member is written address:port, e.g. 10.0.0.1:35531\n",
            );
        };
        let (wait, local) = match rotate_query(query) {
            Ok(q) => q,
            Err(answer) => return answer,
        };
        if out && self.registry.find(&addr).is_none() {
            return text(
                StatusCode::NOT_FOUND,
                &format!("{addr} is not a member of any route\n"),
            );
        }
        let key = crate::pair::Key::Rotate(addr.clone());
        let member = match self.shared(key, &out, || self.registry.rotate(&addr, out)) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(member = %addr, error = %e, "cannot persist rotate state");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("rotate state not saved, nothing changed: {e}\n"),
                );
            }
        };
        tracing::info!(member = %addr, rotate = if out { "out" } else { "in" }, "rotated by operator");
        let start = Instant::now();
        let here = async {
            match (&member, out) {
                (Some(b), true) => Some(if b.drain(wait).await {
                    "drained"
                } else {
                    "timeout"
                }),
                _ => None,
            }
        };
        let peer = self.pair.as_ref().filter(|_| !local);
        let there = async {
            match peer {
                Some(link) => Some(rotate_on_peer(link, raw, action, wait).await),
                None => None,
            }
        };
        let (mut result, there) = tokio::join!(here, there);
        let mut routers = Vec::new();
        if let (Some(there), Some(link)) = (there, &self.pair) {
            routers.push(RouterRotate {
                router: link.state.node().as_str().to_string(),
                result: result.unwrap_or("in").to_string(),
            });
            if out && there.result != "drained" {
                result = Some("timeout");
            }
            routers.push(there);
        }
        json(&RotateDoc {
            address: &addr,
            rotate: if out { "out" } else { "in" },
            member: member.is_some(),
            result,
            in_flight: member.as_ref().map_or(0, |m| m.in_flight()),
            waited_ms: start.elapsed().as_millis(),
            routers,
        })
    }
}

/// A rotate call's `timeout` (default 30 s, at most an hour) and whether it
/// is for this router only (`pair=local`: the peer's own call), or the 400.
#[allow(clippy::result_large_err)]
fn rotate_query(query: Option<&str>) -> Result<(Duration, bool), Response<Full<Bytes>>> {
    let mut wait = DEFAULT_DRAIN_WAIT;
    let mut local = false;
    for (k, v) in query_params(query) {
        match k {
            "timeout" => match humantime::parse_duration(v) {
                Ok(d) if d <= MAX_DRAIN_WAIT => wait = d,
                _ => {
                    return Err(text(
                        StatusCode::BAD_REQUEST,
                        "timeout is a duration such as 90s or 2m, at most 1h\n",
                    ));
                }
            },
            "pair" => local = v == "local",
            _ => {}
        }
    }
    Ok((wait, local))
}

/// The same rotate call on the pair's other router, for it alone
/// (`pair=local`), within the drain wait and the link's own deadline: its
/// result, or why it did not answer.
async fn rotate_on_peer(
    link: &crate::pair::link::Link,
    raw: &str,
    action: &str,
    wait: Duration,
) -> RouterRotate {
    let path = format!(
        "/backends/{raw}/{action}?timeout={}ms&pair=local",
        wait.as_millis()
    );
    let answer = link
        .peer
        .call_within(wait + link.timeout, Method::POST, &path, Vec::new())
        .await;
    let result = match answer {
        Ok((StatusCode::OK, body)) => serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .map(|doc| match doc.get("result").and_then(|r| r.as_str()) {
                Some(r) => r.to_string(),
                // Rotated in, or not a member there: nothing to drain.
                None if action == "rotate-out" => "drained".to_string(),
                None => "in".to_string(),
            })
            .unwrap_or_else(|| "unreadable answer".to_string()),
        // Not a member there: nothing to drain (its rotate state is shared).
        Ok((StatusCode::NOT_FOUND, _)) if action == "rotate-out" => "drained".to_string(),
        Ok((status, body)) => format!("{status}: {}", String::from_utf8_lossy(&body).trim()),
        Err(e) => format!("unreachable: {e}"),
    };
    RouterRotate {
        router: link.peer.addr().to_string(),
        result,
    }
}
