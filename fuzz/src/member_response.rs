//! `member_response`: a member's HTTP/1 response as the router's own member
//! client reads it (`h1_codec::response`), split anywhere, and against hyper's
//! client (the reader it replaced).
//!
//! Properties: the same status, headers, framing, body bytes, trailers and end for
//! any read split; and a response it reads whole (to the end of its body) is one
//! hyper's client also reads whole, with the same status, body and trailers.
//! Where hyper reads a response this reader refuses, the router is the stricter
//! of the two, which is allowed.

use bytes::BytesMut;
use http_body_util::BodyExt as _;

/// A member's response: head, then body (chunked or by length) decoded, for the
/// bytes in `pieces` arriving in order; what it came to, as text to compare.
fn member_reading(pieces: &[&[u8]]) -> String {
    use h1_codec::response::{BodyFraming, Chunked, Decoded, parse_response_head};
    let mut buf = BytesMut::new();
    let mut out = String::new();
    let mut head = None;
    let mut chunked = Chunked::default();
    let mut body = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        if head.is_none() {
            match parse_response_head(&mut buf, false) {
                Ok(Some(h)) => head = Some(h),
                Ok(None) => continue,
                Err(e) => return format!("head error {e}"),
            }
        }
        let Some(h) = &head else { continue };
        match h.framing {
            BodyFraming::Chunked => loop {
                match chunked.decode(&mut buf) {
                    Ok(Decoded::Data(d)) => body.extend_from_slice(&d),
                    Ok(Decoded::Trailers(t)) => out.push_str(&format!("trailers {t:?};")),
                    Ok(Decoded::End) => {
                        out.push_str("end;");
                        break;
                    }
                    Ok(Decoded::More) => break,
                    Err(e) => return format!("{out} body {body:?} chunk error {e}"),
                }
            },
            _ => {
                body.extend_from_slice(&buf);
                buf.clear();
            }
        }
        if out.ends_with("end;") {
            break;
        }
    }
    match head {
        Some(h) => format!(
            "{} {:?} {:?} keep-alive {} {out} body {body:?}",
            h.status,
            h.framing,
            h.fields.to_map(0),
            h.keep_alive
        ),
        None => "incomplete".into(),
    }
}

pub fn member_response(data: &[u8]) {
    let Some((at, stream)) = crate::split(data) else {
        return;
    };
    let (a, b) = stream.split_at(at);
    assert_eq!(
        member_reading(&[a, b]),
        member_reading(&[stream]),
        "split at {at}"
    );
    h2_head(stream);
    if let Some(whole) = ours(stream) {
        match hypers(stream) {
            Ok(theirs) => assert_eq!(whole, theirs, "hyper's client reads it otherwise"),
            // hyper's limits on trailers are lower (100 lines, 16 KiB; ours 100
            // fields, 64 KiB): a limit, not a disagreement on where it ends.
            Err(e) if !whole.trailers.is_empty() && trailer_limit(&e) => {}
            Err(e) => panic!("the router reads a response whole that hyper's client refuses: {e}"),
        }
    }
}

/// The member's head, when it reads as one, written as the h2 server writes
/// it to a client (`router::request::connection::h2::head`): the block reads
/// back with the codec's own decoder, `:status` first, every name in lower
/// case, none of HTTP/2's connection-specific fields, one `x-request-id`.
fn h2_head(stream: &[u8]) {
    use router::request::connection::h2::head::block;
    let mut buf = BytesMut::from(stream);
    let Ok(Some(head)) = h1_codec::response::parse_response_head(&mut buf, false) else {
        return;
    };
    let mut response = http::Response::new(());
    *response.status_mut() = head.status;
    let (parts, ()) = response.into_parts();
    let id = router::request::phases::trace::RequestId::kept(http::HeaderValue::from_static("id"));
    let mut out = BytesMut::new();
    let mut date = h1_codec::encode::response::DateCache::default();
    block(&parts, Some(&head.fields), &id, &mut date, &mut out);
    let mut names = Vec::new();
    h2_codec::hpack::Decoder::new(4096)
        .decode(&out.freeze(), |n, _| {
            names.push(n.as_bytes().to_vec());
            Ok(())
        })
        .expect("the router's block reads back");
    assert_eq!(names.first().map(Vec::as_slice), Some(&b":status"[..]));
    for n in &names[1..] {
        assert!(
            !n.is_empty() && !n.iter().any(u8::is_ascii_uppercase),
            "{n:?} not lower case"
        );
        let name = String::from_utf8_lossy(n);
        assert!(
            ![
                "connection",
                "keep-alive",
                "proxy-connection",
                "transfer-encoding",
                "upgrade"
            ]
            .contains(&&*name),
            "{name}: a connection-specific field"
        );
    }
    let ids = names
        .iter()
        .filter(|n| n.as_slice() == b"x-request-id")
        .count();
    assert_eq!(ids, 1, "one x-request-id, the router's");
}

/// A response read to the end of its body: what both readers must agree on.
#[derive(Debug, PartialEq, Eq)]
struct Whole {
    status: u16,
    body: Vec<u8>,
    trailers: Vec<(String, Vec<u8>)>,
}

/// The router's reader on `bytes`, then the end of the stream: the response, if
/// its body ends within them (by length, chunked end, or the close).
fn ours(bytes: &[u8]) -> Option<Whole> {
    use h1_codec::response::{BodyFraming, Chunked, Decoded, parse_response_head};
    let mut buf = BytesMut::from(bytes);
    let head = parse_response_head(&mut buf, false).ok()??;
    let mut whole = Whole {
        status: head.status.as_u16(),
        body: Vec::new(),
        trailers: Vec::new(),
    };
    match head.framing {
        BodyFraming::Empty => {}
        BodyFraming::Length(n) => {
            let n = usize::try_from(n).ok()?;
            whole.body = buf.get(..n)?.to_vec();
        }
        BodyFraming::Close => whole.body = buf.to_vec(),
        BodyFraming::Chunked => {
            let mut chunked = Chunked::default();
            loop {
                match chunked.decode(&mut buf).ok()? {
                    Decoded::Data(d) => whole.body.extend_from_slice(&d),
                    Decoded::Trailers(t) => whole.trailers = fields(&t),
                    Decoded::End => break,
                    Decoded::More => return None,
                }
            }
        }
    }
    Some(whole)
}

fn fields(map: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = map
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    v.sort();
    v
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
}

/// Whether hyper's error is one of its limits on trailers.
fn trailer_limit(e: &str) -> bool {
    ["TooManyHeaders", "trailer", "overflow"]
        .iter()
        .any(|t| e.contains(t))
}

/// hyper's HTTP/1 client on `bytes` as the answer to a GET, then the end of the
/// stream: the response, if it reads it whole, else hyper's error.
fn hypers(bytes: &[u8]) -> Result<Whole, String> {
    RUNTIME.with(|rt| {
        rt.block_on(async {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let (client, mut member) = tokio::io::duplex(64 * 1024);
            // The member answers once the request has come (hyper's client
            // refuses an answer that comes before its request).
            let answer = bytes.to_vec();
            let member = tokio::spawn(async move {
                let mut request = Vec::new();
                while !request.ends_with(b"\r\n\r\n") {
                    let mut b = [0u8; 256];
                    match member.read(&mut b).await {
                        Ok(0) | Err(_) => return member,
                        Ok(n) => request.extend_from_slice(&b[..n]),
                    }
                }
                let _ = member.write_all(&answer).await;
                let _ = member.shutdown().await;
                member
            });
            let io = hyper_util::rt::TokioIo::new(client);
            let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("{e:?}"))?;
            let conn = tokio::spawn(conn);
            let request = http::Request::get("/")
                .header("host", "member")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .map_err(|e| e.to_string())?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("{e:?}"))?;
            let status = response.status().as_u16();
            let collected = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("{e:?}"))?;
            let trailers = collected.trailers().map(fields).unwrap_or_default();
            conn.abort();
            member.abort();
            Ok(Whole {
                status,
                body: collected.to_bytes().to_vec(),
                trailers,
            })
        })
    })
}
