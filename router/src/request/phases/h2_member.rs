//! A request to a member that speaks h2 (its app's `members_protocol: h2`; see
//! [`crate::upstream::h2`]): the same slot, the same headers as an HTTP/1.1 member
//! gets, sent as an h2 stream on the member's shared connection, and the answer
//! streamed back with its trailers (gRPC's status travels in them). No retry: a
//! stream may have reached the member before it failed.

use h1_codec::fields::{FieldsRef, Name};
use http::header::{self, HeaderValue};
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;

use super::error::ProxyError;
use crate::members::MemberSlot;
use crate::metrics::UpstreamError;
use crate::request::Proxy;
use crate::table::Target;
use crate::upstream::RequestBody;

/// Whether the client asked for trailers (`TE: trailers`; gRPC clients do). The
/// header is hop-by-hop and removed with the others; h2 members get it back.
pub fn wants_trailers<'a>(fields: impl Into<FieldsRef<'a>>) -> bool {
    fields
        .into()
        .values(Name::Te)
        .flat_map(|v| v.split(|b| *b == b','))
        .any(|t| {
            t.trim_ascii()
                .split(|b| *b == b';')
                .next()
                .is_some_and(|t| t.eq_ignore_ascii_case(b"trailers"))
        })
}

/// A member's shared h2 connection, to send one request on.
pub(in crate::request) type H2Sender = hyper::client::conn::http2::SendRequest<RequestBody>;

impl Proxy {
    /// A slot on `target` and its member's shared h2 connection (made if there is
    /// none yet): the h2 path's checkout, retried on another member by the one
    /// decision like HTTP/1's (see [`Proxy::with_other_member`]).
    pub(in crate::request) async fn h2_checkout(
        &self,
        target: &Target,
        (sni, source): (&str, super::admit::Requester),
    ) -> Result<(MemberSlot, H2Sender), ProxyError> {
        let member = &target.member;
        let slot = self.slot(target, source.key).await?;
        let tls = self.member_tls(target, sni)?;
        let send = member
            .pool
            .h2(self.upstream, tls)
            .await
            .map_err(|e| self.failed(member, e.kind()))?;
        Ok((slot, send))
    }

    /// Sends `parts` (already as a member gets them over HTTP/1.1) and `body` to
    /// `target` over `send`, its member's h2 connection; the member's answer.
    pub(in crate::request) async fn exchange_h2(
        &self,
        target: &Target,
        mut send: H2Sender,
        (mut parts, body): (http::request::Parts, RequestBody),
        (trailers, timeout): (bool, std::time::Duration),
    ) -> Result<Response<Incoming>, ProxyError> {
        let member = &target.member;
        // h2 names the host in :authority, from an absolute URI.
        let authority = parts
            .headers
            .remove(header::HOST)
            .ok_or(ProxyError::BadHost)?;
        let scheme = if target.tls { "https" } else { "http" };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = Uri::try_from(format!(
            "{scheme}://{}{path}",
            authority.to_str().map_err(|_| ProxyError::BadHost)?
        ))
        .map_err(|_| ProxyError::BadTarget)?;
        parts.version = Version::HTTP_2;
        if trailers {
            parts
                .headers
                .insert(header::TE, HeaderValue::from_static("trailers"));
        }
        let request = Request::from_parts(parts, body);
        let response = match tokio::time::timeout(timeout, send.send_request(request)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::debug!(member = %member.addr, error = %e, "h2 request to member failed");
                let kind = if e.is_user() {
                    UpstreamError::ClientBody
                } else {
                    UpstreamError::Reset
                };
                return Err(self.failed(member, kind));
            }
            Err(_) => return Err(self.failed(member, UpstreamError::ResponseTimeout)),
        };
        member.health.record_success();
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    #[test]
    fn trailers_are_asked_for_by_token() {
        let te = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::TE, HeaderValue::from_static(v));
            wants_trailers(&h)
        };
        assert!(te("trailers"));
        assert!(te("gzip, Trailers"));
        assert!(te("trailers;q=1"));
        assert!(!te("gzip"));
        assert!(!te("trailersx"));
        assert!(!wants_trailers(&HeaderMap::new()));
    }
}
