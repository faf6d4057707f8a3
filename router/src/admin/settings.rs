//! `/apps/settings` and `/apps/{app}/settings`: an app's own settings (see
//! [`crate::policy`]), saved in the state directory before the answer, applied to
//! the live table at once.
//!
//! | call | answer |
//! |---|---|
//! | `GET /apps/settings` | every app's own settings, the defaults (`app_defaults:`) and the affinity key's fingerprint: what `router check-pair` compares |
//! | `GET /apps/{app}/settings` | the app's own settings and what applies (own over defaults) |
//! | `PUT /apps/{app}/settings` | replaces the app's own settings with the JSON body (400 naming the field if one cannot apply; 404 if the app is not in the table) |
//! | `DELETE /apps/{app}/settings` | the app follows the defaults again |

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde::Serialize;
use spi_consumer::AppKey;

use super::{Admin, json, read_limited, text};
use crate::policy::pages::MAX_PAGE;
use crate::policy::settings::AppSettings;

/// Largest settings body: a maintenance page and the rest.
const MAX_SETTINGS_BODY: usize = MAX_PAGE + 64 * 1024;

/// `GET /apps/settings`.
#[derive(Serialize)]
pub struct AllSettings {
    pub defaults: AppSettings,
    pub apps: BTreeMap<String, AppSettings>,
    /// Both routers of a pair must show the same (see `policy::affinity`).
    pub affinity_key: String,
}

#[derive(Serialize)]
struct OneApp<'a> {
    app: &'a str,
    own: Option<AppSettings>,
    effective: AppSettings,
}

impl Admin {
    pub(super) fn all_settings(&self) -> AllSettings {
        AllSettings {
            defaults: self.policies.defaults(),
            apps: self.policies.store.all(),
            affinity_key: self.policies.key.fingerprint(),
        }
    }

    /// `GET`, `PUT` (with the body) or `DELETE` `/apps/{app}/settings`.
    pub(super) async fn app_settings(
        &self,
        raw: &str,
        method: &http::Method,
        body: Incoming,
    ) -> Response<Full<Bytes>> {
        let Some(key) = AppKey::parse(raw) else {
            return text(
                StatusCode::BAD_REQUEST,
                "an app is written name-namespace, e.g. myapp-mydomain\n",
            );
        };
        let app = key.to_string();
        let change = match *method {
            http::Method::GET | http::Method::HEAD => return self.show(&app),
            http::Method::DELETE => None,
            http::Method::PUT => match self.settings_body(body).await {
                Ok(s) => Some(s),
                Err(answer) => return answer,
            },
            _ => return text(StatusCode::METHOD_NOT_ALLOWED, "use GET, PUT or DELETE\n"),
        };
        if let Some(settings) = &change {
            let table = self.table.load();
            let Some(route) = table.app(&key) else {
                return text(
                    StatusCode::NOT_FOUND,
                    &format!("{app} is not an app in the route table\n"),
                );
            };
            let names = route.hosts.iter().map(|h| &**h);
            if let Err(why) = self.policies.admit_hsts(names, settings) {
                return text(StatusCode::BAD_REQUEST, &format!("hsts: {why}\n"));
            }
        }
        let key = crate::pair::Key::Settings(app.clone());
        if let Err(e) = self.shared(key, &change, || self.put_settings(&app, change.clone())) {
            tracing::error!(app, error = %e, "cannot persist the app settings");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("settings not saved, nothing changed: {e}\n"),
            );
        }
        self.show(&app)
    }

    /// Saves `app`'s own settings (`None`: it follows the defaults again),
    /// then applies them to the live table: the same for an operator's call
    /// and an entry from the peer.
    pub(super) fn put_settings(
        &self,
        app: &str,
        settings: Option<AppSettings>,
    ) -> Result<(), crate::policy::store::StoreError> {
        self.policies.store.set(app, settings)?;
        crate::table::publish_policies(&self.table, &self.policies);
        Ok(())
    }

    fn show(&self, app: &str) -> Response<Full<Bytes>> {
        let (effective, own) = self.policies.of(app);
        json(&OneApp {
            app,
            own,
            effective,
        })
    }

    /// The body of a `PUT`: JSON settings that can apply, or the 4xx to answer.
    async fn settings_body(&self, body: Incoming) -> Result<AppSettings, Response<Full<Bytes>>> {
        let body = read_limited(body, MAX_SETTINGS_BODY, self.body_deadline)
            .await
            .map_err(|status| {
                text(
                    status,
                    "the body is a JSON object under 128 KiB, sent within limits.header_read_timeout\n",
                )
            })?;
        let settings: AppSettings = serde_json::from_slice(&body).map_err(|e| {
            let field = unreadable_field(&body).unwrap_or_else(|| "settings".into());
            text(StatusCode::BAD_REQUEST, &format!("{field}: {e}\n"))
        })?;
        settings
            .check()
            .map_err(|e| text(StatusCode::BAD_REQUEST, &format!("{e}\n")))?;
        Ok(settings)
    }
}

/// The first field of a settings body that cannot be read on its own (serde
/// names a wrong value's type or variant, not its field), if the body is a
/// JSON object.
fn unreadable_field(body: &[u8]) -> Option<String> {
    let serde_json::Value::Object(fields) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    fields.into_iter().find_map(|(name, value)| {
        let alone = serde_json::Value::Object([(name.clone(), value)].into_iter().collect());
        serde_json::from_value::<AppSettings>(alone)
            .is_err()
            .then_some(name)
    })
}
