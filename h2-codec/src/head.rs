//! A request head from its header block (RFC 9113 §8.3): the rules are
//! HTTP/3's (`h3_codec::head`: pseudo-header fields first and once,
//! lowercase names, none of HTTP/1's connection-specific fields), refused
//! as HTTP/2 refuses them: a stream PROTOCOL_ERROR.
//!
//! Unlike HTTP/3's, a refused head is still decoded to its end: the client's
//! block may add entries to the dynamic table after the field that is wrong,
//! and its next block may name them (RFC 9113 §4.3: a header block is
//! processed whole, or the connection ends with COMPRESSION_ERROR). What
//! bounds that work is the block's own size, which the connection caps
//! before it gets here.

use bytes::Bytes;
use h3_codec::head::{Rules, request_from};
use http::Request;

use crate::error::{Code, Error};
use crate::hpack::Decoder;

/// A head past its decoded-size bound (SETTINGS_MAX_HEADER_LIST_SIZE): the
/// server answers it with 431 (RFC 9113 §10.5.1).
pub const TOO_LARGE: Error = Error::stream(Code::PROTOCOL_ERROR, "header list too large");

/// HTTP/2's.
pub const H2: Rules<Code> = Rules {
    version: http::Version::HTTP_2,
    malformed: Code::PROTOCOL_ERROR,
    too_large: TOO_LARGE,
};

/// The request `block` (a whole header block) carries, its decoded size at
/// most `max_size`; the block is decoded whole by `decoder` either way.
pub fn request(
    decoder: &mut Decoder,
    block: &Bytes,
    max_size: usize,
) -> Result<Request<()>, Error> {
    request_from(&H2, max_size, |field| {
        let mut refused = None;
        decoder.decode(block, |name, value| {
            if refused.is_none()
                && let Err(e) = field(name, value)
            {
                if e.connection {
                    return Err(e);
                }
                refused = Some(e);
            }
            Ok(())
        })?;
        refused.map_or(Ok(()), Err)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hex as block;

    /// RFC 7541 C.4.1 and C.4.3 (Huffman-coded) as requests.
    #[test]
    fn a_header_block_becomes_a_request() {
        let mut d = Decoder::new(4096);
        let first = block("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
        let req = request(&mut d, &first, 16_384).expect("a request");
        assert_eq!(req.method(), http::Method::GET);
        assert_eq!(req.uri().to_string(), "http://www.example.com/");
        assert_eq!(req.version(), http::Version::HTTP_2);
        let third = block("8287 85be 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        let req = request(&mut d, &third, 16_384).expect("a request");
        assert_eq!(req.uri().to_string(), "https://www.example.com/index.html");
        assert_eq!(req.headers()["custom-key"], "custom-value");
    }

    /// A refused head is decoded whole: the entry it adds after the wrong
    /// field is there for the next block.
    #[test]
    fn a_refused_head_still_keeps_the_table_in_step() {
        let mut d = Decoder::new(4096);
        // :method GET, "Upper: x" (a literal name, not indexed), then
        // "custom-key: custom-value" with incremental indexing.
        let mut bad = vec![0x82, 0x00, 0x05];
        bad.extend_from_slice(b"Upper");
        bad.extend_from_slice(&[0x01, b'x', 0x40, 0x0a]);
        bad.extend_from_slice(b"custom-key");
        bad.push(0x0c);
        bad.extend_from_slice(b"custom-value");
        let err = request(&mut d, &Bytes::from(bad), 16_384).expect_err("uppercase");
        assert_eq!((err.code, err.connection), (Code::PROTOCOL_ERROR, false));
        // :method GET, :scheme http, :path /, :authority (literal), then entry 62.
        let next = vec![0x82, 0x86, 0x84, 0x01, 0x01, b'a', 0xbe];
        let req = request(&mut d, &Bytes::from(next), 16_384).expect("in step");
        assert_eq!(req.headers()["custom-key"], "custom-value");
    }

    #[test]
    fn a_head_past_its_bound_is_too_large_and_still_decoded() {
        let mut d = Decoder::new(4096);
        let first = block("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d");
        assert_eq!(request(&mut d, &first, 60).err(), Some(TOO_LARGE));
        assert_eq!(d.size(), 57, ":authority indexed all the same");
        let again = block("8286 84be");
        let req = request(&mut d, &again, 16_384).expect("entry 62 is there");
        assert_eq!(
            req.uri().authority().map(|a| a.as_str()),
            Some("www.example.com")
        );
    }
}
