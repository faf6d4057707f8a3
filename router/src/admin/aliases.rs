//! `POST`/`DELETE /aliases/{name}/split`: a name's requests shared between apps by
//! weight (blue/green); `POST`/`DELETE /aliases/{name}/paths`: its path prefixes
//! routed to other apps (see [`crate::table::paths`]).

use super::*;

impl Admin {
    /// `POST` (with the weights) or `DELETE` (`req` is `None`) `/aliases/{name}/split`.
    pub(super) async fn split(
        &self,
        raw: &str,
        req: Option<Request<Incoming>>,
    ) -> Response<Full<Bytes>> {
        let Some(name) = alias_name(raw) else {
            return text(StatusCode::BAD_REQUEST, "not a host name\n");
        };
        let weights = match req {
            Some(req) => {
                let body = match read_limited(req.into_body(), MAX_ADMIN_BODY, self.body_deadline)
                    .await
                {
                    Ok(b) => b,
                    Err(status) => {
                        return text(
                            status,
                            "the body is a JSON object under 16 KiB, sent within limits.header_read_timeout\n",
                        );
                    }
                };
                let weights: BTreeMap<String, u32> = match serde_json::from_slice(&body) {
                    Ok(w) => w,
                    Err(e) => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            &format!(
                                "the body is {{\"app-namespace\": weight, ...}} with whole weights: {e}\n"
                            ),
                        );
                    }
                };
                let split = match Split::new(weights.clone()) {
                    Ok(s) => s,
                    Err(e) => return text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
                };
                let table = self.table.load();
                if table.lookup(&name).is_none() {
                    return text(
                        StatusCode::NOT_FOUND,
                        &format!("{name} is not a name in the route table\n"),
                    );
                }
                if let Some(missing) = split.apps().find(|k| table.app(k).is_none()) {
                    return text(
                        StatusCode::NOT_FOUND,
                        &format!("{missing} is not an app in the route table\n"),
                    );
                }
                Some((weights, Arc::new(split)))
            }
            None => None,
        };
        let shared = weights.as_ref().map(|(w, _)| w);
        let key = crate::pair::Key::Split(name.clone());
        if let Err(e) = self.shared(key, &shared, || self.put_split(&name, weights.clone())) {
            tracing::error!(name, error = %e, "cannot persist the split");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("split not saved, nothing changed: {e}\n"),
            );
        }
        json(&serde_json::json!({
            "name": name,
            "split": weights.map(|(w, _)| w),
        }))
    }

    /// Saves `name`'s split (`None`: removes it), then puts it in the live
    /// table: the same for an operator's call and an entry from the peer.
    pub(super) fn put_split(
        &self,
        name: &str,
        weights: Option<(BTreeMap<String, u32>, Arc<Split>)>,
    ) -> Result<(), crate::table::split::SplitStoreError> {
        self.splits
            .set(name, weights.as_ref().map(|(w, _)| w.clone()))?;
        let key: Arc<str> = Arc::from(name);
        self.table.rcu(|t| {
            let mut next = RouteTable::clone(t);
            match &weights {
                Some((_, split)) => {
                    next.splits.insert(key.clone(), split.clone());
                }
                None => {
                    next.splits.remove(&key);
                }
            }
            Arc::new(next)
        });
        Ok(())
    }
}

impl Admin {
    /// `POST` (with the rules) or `DELETE` (`req` is `None`) `/aliases/{name}/paths`.
    pub(super) async fn paths(
        &self,
        raw: &str,
        req: Option<Request<Incoming>>,
    ) -> Response<Full<Bytes>> {
        let Some(name) = alias_name(raw) else {
            return text(StatusCode::BAD_REQUEST, "not a host name\n");
        };
        let table = match req {
            Some(req) => match self.path_body(&name, req).await {
                Ok(t) => Some(t),
                Err(answer) => return answer,
            },
            None => None,
        };
        let rules = table.as_ref().map(|t| &t.rules);
        let key = crate::pair::Key::Paths(name.clone());
        if let Err(e) = self.shared(key, &rules, || self.put_paths(&name, table.clone())) {
            tracing::error!(name, error = %e, "cannot persist the path routes");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("paths not saved, nothing changed: {e}\n"),
            );
        }
        json(&serde_json::json!({ "name": name, "paths": rules }))
    }

    /// A `POST`'s rules, checked against the table: the name and every app
    /// they name are in it; or the 4xx.
    async fn path_body(
        &self,
        name: &str,
        req: Request<Incoming>,
    ) -> Result<Arc<PathTable>, Response<Full<Bytes>>> {
        let body = read_limited(req.into_body(), MAX_PATHS_BODY, self.body_deadline)
            .await
            .map_err(|status| {
                text(
                    status,
                    "the body is a JSON object under 256 KiB, sent within limits.header_read_timeout\n",
                )
            })?;
        let rules: PathRules = serde_json::from_slice(&body).map_err(|e| {
            text(
                StatusCode::BAD_REQUEST,
                &format!("the body is {{\"/prefix\": {{\"app\": \"app-namespace\", \"rewrite\": \"/\"}}, ...}}: {e}\n"),
            )
        })?;
        let paths = PathTable::new(rules)
            .map_err(|e| text(StatusCode::BAD_REQUEST, &format!("paths: {e}\n")))?;
        let table = self.table.load();
        if table.lookup(name).is_none() {
            return Err(text(
                StatusCode::NOT_FOUND,
                &format!("{name} is not a name in the route table\n"),
            ));
        }
        if let Some(missing) = paths.apps().find(|k| table.app(k).is_none()) {
            return Err(text(
                StatusCode::NOT_FOUND,
                &format!("{missing} is not an app in the route table\n"),
            ));
        }
        Ok(Arc::new(paths))
    }

    /// Saves `name`'s path routes (`None`: removes them), then puts them in
    /// the live table: the same for an operator's call and an entry from the
    /// peer.
    pub(super) fn put_paths(
        &self,
        name: &str,
        paths: Option<Arc<PathTable>>,
    ) -> Result<(), crate::table::split::SplitStoreError> {
        self.splits
            .set_paths(name, paths.as_ref().map(|t| t.rules.clone()))?;
        let key: Arc<str> = Arc::from(name);
        self.table.rcu(|t| {
            let mut next = RouteTable::clone(t);
            match &paths {
                Some(p) => {
                    next.paths.insert(key.clone(), p.clone());
                }
                None => {
                    next.paths.remove(&key);
                }
            }
            Arc::new(next)
        });
        Ok(())
    }
}

/// Largest `/aliases/{name}/paths` body: 100 prefixes with rewrites, each up
/// to 1 KiB.
const MAX_PATHS_BODY: usize = 256 * 1024;

/// The name an `/aliases/{name}/...` path names: percent-decoded, normalised
/// as a request's host is.
fn alias_name(raw: &str) -> Option<String> {
    percent_decode(raw)
        .and_then(|n| crate::request::phases::route::normalize_host(&n).map(|n| n.to_string()))
}
