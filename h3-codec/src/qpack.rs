//! QPACK field sections (RFC 9204) without a dynamic table: this server
//! advertises a table capacity of 0, so a client's sections may only name the
//! static table or carry literals, and the server's own use literals and the
//! static table. With no dynamic table there is no encoder or decoder stream
//! state and no blocked stream.
//!
//! The server's literals are not Huffman-coded: coding costs more CPU per
//! response than the bytes it saves are worth on a response head (see the
//! crate doc for the measurement); a client's Huffman-coded strings are
//! decoded by `httlib-huffman`.

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;

use crate::error::{Code, Error};
use crate::table::{self, STATIC};

const FAILED: Error =
    Error::connection(Code::QPACK_DECOMPRESSION_FAILED, "malformed field section");

/// A name or value as decoded: the static table's, or the section's own bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    Static(&'static str),
    Owned(Bytes),
}

impl Text {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Text::Static(s) => s.as_bytes(),
            Text::Owned(b) => b,
        }
    }

    /// The text as bytes to keep (a static one is not copied).
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Text::Static(s) => Bytes::from_static(s.as_bytes()),
            Text::Owned(b) => b.clone(),
        }
    }
}

/// Calls `each` with every field line of `section` in order.
pub fn decode(
    section: &Bytes,
    mut each: impl FnMut(Text, Text) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut at = 0;
    // Required Insert Count: 0, as no entry can have been inserted.
    let (required, n) = int(section, at, 8)?;
    at += n;
    if required != 0 {
        return Err(Error::connection(
            Code::QPACK_DECOMPRESSION_FAILED,
            "a field section refers to a dynamic table",
        ));
    }
    // Delta Base: meaningless without a dynamic table, but present.
    let (_, n) = int(section, at, 7)?;
    at += n;
    while at < section.len() {
        let first = section[at];
        let (name, value);
        if first & 0x80 != 0 {
            // Indexed field line; T (0x40) set for the static table.
            let (index, n) = int(section, at, 6)?;
            at += n;
            let (sname, svalue) = static_entry(first & 0x40 != 0, index)?;
            (name, value) = (Text::Static(sname), Text::Static(svalue));
        } else if first & 0x40 != 0 {
            // Literal with a name reference; T (0x10) set for the static table.
            let (index, n) = int(section, at, 4)?;
            at += n;
            name = Text::Static(static_entry(first & 0x10 != 0, index)?.0);
            (value, at) = string(section, at, 7)?;
        } else if first & 0x20 != 0 {
            // Literal with a literal name (its Huffman flag at 0x08).
            (name, at) = string(section, at, 3)?;
            (value, at) = string(section, at, 7)?;
        } else {
            // Post-base index or name reference: dynamic only.
            return Err(Error::connection(
                Code::QPACK_DECOMPRESSION_FAILED,
                "a post-base reference without a dynamic table",
            ));
        }
        each(name, value)?;
    }
    Ok(())
}

fn static_entry(is_static: bool, index: u64) -> Result<(&'static str, &'static str), Error> {
    if !is_static {
        return Err(Error::connection(
            Code::QPACK_DECOMPRESSION_FAILED,
            "a dynamic table reference without a dynamic table",
        ));
    }
    STATIC.get(index as usize).copied().ok_or(FAILED)
}

/// A prefixed integer (RFC 7541 §5.1) in the low `bits` of `buf[at]` and the
/// bytes after it; the value and the bytes it took. Values past 2^62 are
/// refused (no length or index here comes near). QPACK's integers and
/// string literals are HPACK's (RFC 9204 §4.1.1): `h2-codec` reads its
/// header blocks with these too.
pub fn int(buf: &[u8], at: usize, bits: u32) -> Result<(u64, usize), Error> {
    let max = (1u64 << bits) - 1;
    let first = u64::from(*buf.get(at).ok_or(FAILED)?) & max;
    if first < max {
        return Ok((first, 1));
    }
    let mut value = max;
    for (i, b) in buf.get(at + 1..).ok_or(FAILED)?.iter().enumerate().take(9) {
        value += u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, i + 2));
        }
    }
    Err(FAILED)
}

/// A string literal whose length has a `bits` prefix, its Huffman flag the bit
/// above; the text and the index after it.
pub fn string(section: &Bytes, at: usize, bits: u32) -> Result<(Text, usize), Error> {
    let huffman = section.get(at).ok_or(FAILED)? & (1 << bits) != 0;
    let (len, n) = int(section, at, bits)?;
    let start = at + n;
    let end = usize::try_from(len)
        .ok()
        .and_then(|len| start.checked_add(len))
        .filter(|end| *end <= section.len())
        .ok_or(FAILED)?;
    if !huffman {
        return Ok((Text::Owned(section.slice(start..end)), end));
    }
    let mut out = Vec::with_capacity((end - start) * 8 / 5 + 1);
    httlib_huffman::decode(
        &section[start..end],
        &mut out,
        httlib_huffman::DecoderSpeed::FiveBits,
    )
    .map_err(|_| FAILED)?;
    Ok((Text::Owned(out.into()), end))
}

/// A HEADERS frame whole: a response head (`status` set) or trailers.
pub fn headers_frame(status: Option<u16>, headers: &HeaderMap) -> Bytes {
    // Room in front for the frame's type and length, written once the
    // section's length is known, so that the frame is one buffer.
    const ROOM: usize = 1 + 8;
    let guess = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum::<usize>();
    let mut out = BytesMut::with_capacity(ROOM + 8 + guess);
    out.put_bytes(0, ROOM);
    // Required Insert Count 0, Delta Base 0.
    out.put_slice(&[0, 0]);
    if let Some(code) = status {
        match table::status(code) {
            Some(i) => indexed(i, &mut out),
            None => {
                let digits = status_digits(code);
                name_ref(24, &mut out);
                literal(&digits, &mut out);
            }
        }
    }
    for (name, value) in headers {
        field(name.as_str(), value.as_bytes(), &mut out);
    }
    let len = (out.len() - ROOM) as u64;
    let head = 1 + crate::varint::len(len);
    let start = ROOM - head;
    let mut head_bytes = &mut out[start..ROOM];
    crate::frame::frame_head(crate::frame::HEADERS, len, &mut head_bytes);
    out.freeze().slice(start..)
}

/// A status code's three digits (one outside 100 to 999 is clamped: the
/// `http` crate makes none).
pub fn status_digits(code: u16) -> [u8; 3] {
    let code = code.clamp(100, 999);
    [
        b'0' + (code / 100) as u8,
        b'0' + (code / 10 % 10) as u8,
        b'0' + (code % 10) as u8,
    ]
}

/// One field: the static entry if it is there whole, else a literal value
/// after the static name, else both literal.
fn field(name: &str, value: &[u8], out: &mut BytesMut) {
    let Some(first) = table::first_with_name(name) else {
        prefixed(0x20, 3, name.len() as u64, out);
        out.put_slice(name.as_bytes());
        literal(value, out);
        return;
    };
    let whole = STATIC[first..]
        .iter()
        .take_while(|(n, _)| *n == name)
        .position(|(_, v)| v.as_bytes() == value);
    match whole {
        Some(k) => indexed(first + k, out),
        None => {
            name_ref(first, out);
            literal(value, out);
        }
    }
}

fn indexed(index: usize, out: &mut BytesMut) {
    prefixed(0xc0, 6, index as u64, out);
}

fn name_ref(index: usize, out: &mut BytesMut) {
    prefixed(0x50, 4, index as u64, out);
}

fn literal(value: &[u8], out: &mut BytesMut) {
    prefixed(0, 7, value.len() as u64, out);
    out.put_slice(value);
}

/// A prefixed integer: `flags` in the bits above the `bits`-bit prefix.
pub fn prefixed(flags: u8, bits: u32, mut value: u64, out: &mut BytesMut) {
    let max = (1u64 << bits) - 1;
    if value < max {
        out.put_u8(flags | value as u8);
        return;
    }
    out.put_u8(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        out.put_u8(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderName, HeaderValue};

    fn fields(section: &[u8]) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::new();
        decode(&Bytes::copy_from_slice(section), |n, v| {
            out.push((
                String::from_utf8_lossy(n.as_bytes()).into_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            ));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn the_rfc_example_request_decodes() {
        // RFC 9204 §B.1: a literal with a static name reference (:path).
        let section = [
            0x00, 0x00, 0x51, 0x0b, b'/', b'i', b'n', b'd', b'e', b'x', b'.', b'h', b't', b'm',
            b'l',
        ];
        assert_eq!(
            fields(&section),
            Ok(vec![(":path".into(), "/index.html".into())])
        );
    }

    #[test]
    fn huffman_strings_and_literal_names_decode() {
        // "www.example.com" Huffman-coded (RFC 7541 §C.4.1) as :authority's value,
        // then a literal name "custom-key" with the value "custom-value".
        let mut s = vec![0x00, 0x00, 0x50, 0x8c];
        s.extend([
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ]);
        s.extend([0x27, 0x03]);
        s.extend(b"custom-key");
        s.push(0x0c);
        s.extend(b"custom-value");
        s.push(0xd1); // indexed static 17: :method GET
        assert_eq!(
            fields(&s),
            Ok(vec![
                (":authority".into(), "www.example.com".into()),
                ("custom-key".into(), "custom-value".into()),
                (":method".into(), "GET".into()),
            ])
        );
    }

    #[test]
    fn dynamic_references_and_cut_sections_are_refused() {
        assert!(fields(&[0x01, 0x00]).is_err(), "a Required Insert Count");
        assert!(
            fields(&[0x00, 0x00, 0x80]).is_err(),
            "a dynamic indexed line"
        );
        assert!(fields(&[0x00, 0x00, 0x10]).is_err(), "post-base");
        assert!(fields(&[0x00, 0x00, 0xff, 0x80]).is_err(), "integer cut");
        assert!(
            fields(&[0x00, 0x00, 0xff, 0x7f]).is_err(),
            "index past the table"
        );
        assert!(
            fields(&[0x00, 0x00, 0x51, 0x05, b'/']).is_err(),
            "string cut"
        );
        assert!(fields(&[0x00]).is_err(), "no Delta Base");
        let huge = [
            0x00, 0x00, 0x51, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert!(fields(&huge).is_err(), "a length past everything");
    }

    #[test]
    fn a_response_head_encodes_and_decodes_back() {
        let mut headers = HeaderMap::new();
        for (n, v) in [
            ("content-type", "text/html; charset=utf-8"),
            ("content-length", "1234"),
            ("server", "nginx"),
            ("x-request-id", "abc"),
            ("set-cookie", &"v".repeat(300)),
        ] {
            headers.append(
                HeaderName::from_static(n),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        for status in [200, 299, 421, 999] {
            let frame = headers_frame(Some(status), &headers);
            let head = crate::frame::head(&frame).expect("frame head");
            assert_eq!(head.ty, crate::frame::HEADERS);
            assert_eq!(head.size + head.len as usize, frame.len());
            let got = fields(&frame[head.size..]).expect("decodes");
            assert_eq!(got[0], (":status".into(), status.to_string()));
            let rest: Vec<_> = headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_str().expect("ascii").to_string()))
                .collect();
            assert_eq!(&got[1..], &rest[..]);
        }
    }
}
