//! `POST /reconcile`: a run against the broker's REST API, asked by an operator.

use super::*;

impl Admin {
    /// `POST /reconcile[?apply=true|false]`: one run now; answers with its report.
    pub(super) async fn reconcile(&self, query: Option<&str>) -> Response<Full<Bytes>> {
        let Some(jobs) = &self.reconcile else {
            return text(
                StatusCode::NOT_FOUND,
                "reconcile is off: set reconcile.url in the configuration\n",
            );
        };
        let mut apply = None;
        for (k, v) in query_params(query) {
            if k == "apply" {
                apply = match v {
                    "true" | "1" => Some(true),
                    "false" | "0" => Some(false),
                    _ => return text(StatusCode::BAD_REQUEST, "apply is true or false\n"),
                };
            }
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = crate::reconcile::Job {
            apply,
            reply: Some(reply),
        };
        if jobs.send(job).await.is_err() {
            return text(StatusCode::SERVICE_UNAVAILABLE, "the router is stopping\n");
        }
        match answer.await {
            Ok(report) => json(&report),
            Err(_) => text(StatusCode::SERVICE_UNAVAILABLE, "the router is stopping\n"),
        }
    }
}
