use super::*;
use crate::hex;

fn fields(d: &mut Decoder, block: &Bytes) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    d.decode(block, |n, v| {
        let text = |t: &Text| String::from_utf8_lossy(t.as_bytes()).into_owned();
        out.push((text(&n), text(&v)));
        Ok(())
    })?;
    Ok(out)
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// RFC 7541 C.3 and C.4: three requests on one connection, their fields
/// indexed as they come, without and with Huffman coding.
#[test]
fn the_rfcs_requests_decode_with_the_table_they_build() {
    for blocks in [
        [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ],
        [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ],
    ] {
        let mut d = Decoder::new(4096);
        let base = [(":method", "GET"), (":scheme", "http"), (":path", "/")];
        let authority = (":authority", "www.example.com");
        let first = [base[0], base[1], base[2], authority];
        assert_eq!(fields(&mut d, &hex(blocks[0])), Ok(pairs(&first)));
        assert_eq!(d.size(), 57);
        let second = [
            base[0],
            base[1],
            base[2],
            authority,
            ("cache-control", "no-cache"),
        ];
        assert_eq!(fields(&mut d, &hex(blocks[1])), Ok(pairs(&second)));
        assert_eq!(d.size(), 110);
        let third = [
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            authority,
            ("custom-key", "custom-value"),
        ];
        assert_eq!(fields(&mut d, &hex(blocks[2])), Ok(pairs(&third)));
        assert_eq!(d.size(), 164);
    }
}

/// RFC 7541 C.5.1 and C.5.2: a table of 256 bytes evicts its oldest entry.
#[test]
fn the_oldest_entries_are_evicted_when_the_table_is_full() {
    let mut d = Decoder::new(256);
    let first = hex(
        "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 \
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
         6c65 2e63 6f6d",
    );
    let date = ("date", "Mon, 21 Oct 2013 20:13:21 GMT");
    let location = ("location", "https://www.example.com");
    let want = [
        (":status", "302"),
        ("cache-control", "private"),
        date,
        location,
    ];
    assert_eq!(fields(&mut d, &first), Ok(pairs(&want)));
    assert_eq!(d.size(), 222);
    let second = hex("4803 3330 37c1 c0bf");
    let want = [
        (":status", "307"),
        ("cache-control", "private"),
        date,
        location,
    ];
    assert_eq!(fields(&mut d, &second), Ok(pairs(&want)));
    assert_eq!(d.size(), 222, ":status 302 evicted for :status 307");
}

/// What a client must not send: an index past both tables, a size update
/// after a field or past the advertised size, a string past the block.
#[test]
fn a_malformed_block_is_a_compression_error() {
    for block in [
        "be",
        "82 3f e1 1f",
        "3f e2 1f",
        "40 05 61",
        "41 8a",
        "ff ff ff ff ff ff ff ff ff ff ff",
    ] {
        let mut d = Decoder::new(4096);
        let got = fields(&mut d, &hex(block));
        let err = got.expect_err(block);
        assert_eq!(
            (err.code, err.connection),
            (Code::COMPRESSION_ERROR, true),
            "{block}"
        );
    }
    let mut d = Decoder::new(4096);
    assert_eq!(
        fields(&mut d, &hex("20 82")),
        Ok(pairs(&[(":method", "GET")]))
    );
    assert_eq!(d.max, 0, "a size update to 0 at the start is taken");
}

/// A response head written here reads back as itself, and takes the bytes
/// the static table saves.
#[test]
fn a_response_head_reads_back_as_written() {
    let given: [(&str, &[u8]); 4] = [
        ("content-type", b"text/html"),
        ("set-cookie", b"a=1"),
        ("x-request-id", b"0123456789abcdef"),
        ("strict-transport-security", b"max-age=31536000"),
    ];
    for status in [200, 302, 404, 503] {
        let mut out = BytesMut::new();
        encode(Some(status), given.iter().copied(), &mut out);
        let mut d = Decoder::new(4096);
        let got = fields(&mut d, &out.freeze()).expect("decodes");
        let mut want = vec![(":status".to_string(), status.to_string())];
        want.extend(
            given
                .iter()
                .map(|(n, v)| (n.to_string(), String::from_utf8_lossy(v).into_owned())),
        );
        assert_eq!(got, want);
        assert_eq!(d.size(), 0, "nothing for the client to keep");
    }
    let mut out = BytesMut::new();
    encode(
        Some(200),
        std::iter::once(("content-type", &b"a"[..])),
        &mut out,
    );
    assert_eq!(
        &out[..],
        [0x88, 0x0f, 0x10, 0x01, b'a'],
        "indexed status, name 31"
    );
}

/// Huffman-coded strings as a client writes them (here by
/// `httlib-huffman`, as the RFC's examples were) read back as their text.
#[test]
fn huffman_coded_literals_are_read() {
    let mut block = vec![0x40];
    for text in [&b"custom-key"[..], b"a value with spaces, 0123 and ~^|"] {
        let mut coded = Vec::new();
        httlib_huffman::encode(text, &mut coded).expect("codes");
        block.push(0x80 | coded.len() as u8);
        block.extend_from_slice(&coded);
    }
    let mut d = Decoder::new(4096);
    let got = fields(&mut d, &Bytes::from(block)).expect("decodes");
    assert_eq!(
        got,
        pairs(&[("custom-key", "a value with spaces, 0123 and ~^|")])
    );
}

/// An HTTP/1 peer's names in any case come out in lower case, the static
/// table's by index, a long one as a literal.
#[test]
fn names_in_any_case_are_written_in_lower_case() {
    let long = "X-A-Very-Long-Header-Name-Past-Thirty-Two-Bytes";
    let mut out = BytesMut::new();
    put_status(200, &mut out);
    put_field_any_case(b"Content-Type", b"a", &mut out);
    put_field_any_case(b"X-Custom", b"b", &mut out);
    put_field_any_case(long.as_bytes(), b"c", &mut out);
    assert_eq!(&out[..5], [0x88, 0x0f, 0x10, 0x01, b'a']);
    let mut d = Decoder::new(4096);
    let got = fields(&mut d, &out.freeze().slice(1..)).expect("decodes");
    let lower = long.to_ascii_lowercase();
    assert_eq!(
        got,
        pairs(&[("content-type", "a"), ("x-custom", "b"), (&lower, "c")])
    );
}
