//! `/acme/*`: what the two routers of a pair put on and take from each other
//! for ACME: the admin API's one entry to `crate::issuer::shared`, which holds
//! what these calls read and change and decides what it keeps; this file only
//! maps HTTP onto it. Every call, reads included, needs the admin token: the
//! account and the certificates carry private keys.
//!
//! | call | answer |
//! |---|---|
//! | `GET /acme/account` | the ACME account (`account.json`), 404 if none yet |
//! | `PUT /acme/account` | saves the peer's account if this router has none (201); 200 if it is the same, 409 if this router has another |
//! | `PUT`/`DELETE /acme/answers` | body: a challenge's answer (`{"type": "http01", "token", "key_authorization"}` or `{"type": "tls_alpn01", "name", "cert"}`), served to the CA from now on / no longer |
//! | `GET /acme/orders` | the peer's orders in flight here: `[[alias, url], ...]` |
//! | `PUT`/`DELETE /acme/orders/{alias}` | body `{"url", "key_pem"?}`: the peer's order for the alias, taken over if the peer goes away / it ended |
//! | `GET /acme/certificates?after=ISSUED_AT:ALIAS` | up to 100 saved certificates issued after that one, oldest first (`[{alias, chain_pem, key_pem, issued_at, order_url}]`) |
//! | `PUT /acme/certificates/{alias}` | body as one of those: checked (it loads, its key is its own), saved if newer than this router's, served (200; 400 with the reason) |

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;

use super::{Admin, json, read_limited, text};
use crate::issuer::shared::{AccountRefused, AccountTaken, IssuedCert, Shared, valid_alias};

/// Largest `/acme/*` body: a certificate chain and its key, as JSON.
const MAX_ACME_BODY: usize = 256 * 1024;

impl Admin {
    /// `/acme/{rest}`; 404 without `acme.directory`.
    pub(super) async fn acme_call(
        &self,
        rest: &str,
        req: Request<Incoming>,
    ) -> Response<Full<Bytes>> {
        let Some(shared) = self.acme.as_deref() else {
            return text(StatusCode::NOT_FOUND, "ACME is off (no acme.directory)\n");
        };
        let method = req.method().clone();
        let query = req.uri().query().map(str::to_string);
        let body = if matches!(method, Method::PUT | Method::DELETE) {
            match read_limited(req.into_body(), MAX_ACME_BODY, self.body_deadline).await {
                Ok(b) => b,
                Err(status) => return text(status, "the body is JSON under 256 KiB\n"),
            }
        } else {
            Bytes::new()
        };
        match (&method, rest) {
            (&Method::GET, "account") => account(shared),
            (&Method::PUT, "account") => put_account(shared, &body),
            (&Method::PUT | &Method::DELETE, "answers") => match serde_json::from_slice(&body) {
                Ok(_) if method == Method::PUT && shared.answers_full() => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many ACME answers served here already\n",
                ),
                Ok(answer) => {
                    if method == Method::PUT {
                        shared.publish(&answer);
                    } else {
                        shared.withdraw(&answer);
                    }
                    text(StatusCode::OK, "ok\n")
                }
                Err(e) => text(StatusCode::BAD_REQUEST, &format!("answer: {e}\n")),
            },
            (&Method::GET, "orders") => json(&shared.peer_orders()),
            (&Method::GET, "certificates") => match after(query.as_deref()) {
                Some(after) => json(&shared.page(&after)),
                None => text(
                    StatusCode::BAD_REQUEST,
                    "after=ISSUED_AT:ALIAS (the last one taken)\n",
                ),
            },
            _ => match rest.split_once('/') {
                Some(("orders", alias)) if valid_alias(alias) => {
                    order(shared, alias, &method, &body)
                }
                Some(("certificates", alias)) if method == Method::PUT => {
                    match serde_json::from_slice::<IssuedCert>(&body) {
                        Ok(saved) => match shared.accept(alias, &saved) {
                            Ok(true) => text(StatusCode::OK, "saved and served\n"),
                            Ok(false) => text(StatusCode::OK, "this router's is as recent\n"),
                            Err(e) => text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
                        },
                        Err(e) => text(StatusCode::BAD_REQUEST, &format!("certificate: {e}\n")),
                    }
                }
                _ => text(StatusCode::NOT_FOUND, "not found\n"),
            },
        }
    }
}

fn account(shared: &Shared) -> Response<Full<Bytes>> {
    match shared.account() {
        Some(bytes) => Response::builder()
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(bytes)))
            .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "answer\n")),
        None => text(StatusCode::NOT_FOUND, "no ACME account yet\n"),
    }
}

fn put_account(shared: &Shared, body: &[u8]) -> Response<Full<Bytes>> {
    match shared.take_account(body) {
        Ok(AccountTaken::Same) => text(StatusCode::OK, "the same account\n"),
        Ok(AccountTaken::Saved) => text(StatusCode::CREATED, "saved\n"),
        Err(e @ AccountRefused::NotAnAccount) => text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
        Err(e @ AccountRefused::Another) => text(StatusCode::CONFLICT, &format!("{e}\n")),
        Err(e @ AccountRefused::Io(_)) => {
            text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n"))
        }
    }
}

fn order(shared: &Shared, alias: &str, method: &Method, body: &[u8]) -> Response<Full<Bytes>> {
    match *method {
        Method::PUT => match serde_json::from_slice(body) {
            Ok(record) => {
                if shared.peer_order(alias, Some(record)) {
                    text(StatusCode::OK, "ok\n")
                } else {
                    text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "too many of the peer's ACME orders recorded here already\n",
                    )
                }
            }
            Err(e) => text(StatusCode::BAD_REQUEST, &format!("order: {e}\n")),
        },
        Method::DELETE => {
            shared.peer_order(alias, None);
            text(StatusCode::OK, "ok\n")
        }
        _ => text(StatusCode::METHOD_NOT_ALLOWED, "use PUT or DELETE\n"),
    }
}

/// `after=ISSUED_AT:ALIAS` (the alias may be empty: from the start).
fn after(query: Option<&str>) -> Option<(i64, String)> {
    let value = super::query_params(query).find(|(k, _)| *k == "after")?.1;
    let (at, alias) = value.split_once(':')?;
    Some((at.parse().ok()?, alias.to_string()))
}
