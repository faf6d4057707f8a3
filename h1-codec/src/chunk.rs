//! The one chunk-size line grammar (RFC 9112 §7.1), for a client's request body
//! followed a byte at a time ([`crate::framing`]) and a member's response body
//! decoded from a buffer ([`crate::response::Chunked`]).
//!
//! `chunk-size [ BWS ";" chunk-ext ] CRLF`: 1 to 16 hex digits (so a size fits a
//! `u64`), then optional blanks, then nothing or a `;` and the extension. The
//! extension is not interpreted (no peer here uses one) but may hold no control
//! byte other than a tab: a bare CR would end the line for one reader and not
//! for another (found by the `client_stream` and `member_response` fuzz
//! targets). Blanks followed by anything but `;` are refused, as hyper does.

/// Why a chunk-size line was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkLineError {
    /// An LF without its CR, or a CR followed by anything else.
    BareLineEnd,
    /// Not a chunk-size line (no digits, more than 16, a stray byte).
    Bad,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Part {
    #[default]
    Digits,
    /// Blanks after the digits.
    Blank,
    /// After the `;`.
    Extension,
    /// The CR: its LF must follow.
    Cr,
}

/// A chunk-size line being read, a byte at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkLine {
    size: u64,
    digits: u8,
    part: Part,
}

/// The most hex digits of a size: 16 always fit a `u64`.
pub const MAX_DIGITS: u8 = 16;

impl ChunkLine {
    /// Takes the line's next byte: `Ok(Some(size))` once its LF is taken.
    pub fn push(&mut self, b: u8) -> Result<Option<u64>, ChunkLineError> {
        match (self.part, b) {
            (Part::Cr, b'\n') => return Ok(Some(self.size)),
            (Part::Cr, _) | (_, b'\n') => return Err(ChunkLineError::BareLineEnd),
            (_, b'\r') if self.digits == 0 => return Err(ChunkLineError::Bad),
            (_, b'\r') => self.part = Part::Cr,
            (Part::Digits, _) if b.is_ascii_hexdigit() => {
                if self.digits == MAX_DIGITS {
                    return Err(ChunkLineError::Bad);
                }
                self.digits += 1;
                self.size = self.size << 4 | u64::from(hex(b));
            }
            (Part::Digits | Part::Blank, b' ' | b'\t') if self.digits > 0 => {
                self.part = Part::Blank;
            }
            (Part::Digits | Part::Blank, b';') if self.digits > 0 => {
                self.part = Part::Extension;
            }
            (Part::Extension, b) if b == b'\t' || (b >= 0x20 && b != 0x7f) => {}
            _ => return Err(ChunkLineError::Bad),
        }
        Ok(None)
    }
}

fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(bytes: &[u8]) -> Result<Option<u64>, ChunkLineError> {
        let mut l = ChunkLine::default();
        for (i, &b) in bytes.iter().enumerate() {
            if let Some(size) = l.push(b)? {
                assert_eq!(i, bytes.len() - 1, "the LF ends the line");
                return Ok(Some(size));
            }
        }
        Ok(None)
    }

    #[test]
    fn sizes_with_and_without_extensions() {
        assert_eq!(line(b"0\r\n"), Ok(Some(0)));
        assert_eq!(line(b"1a\r\n"), Ok(Some(26)));
        assert_eq!(line(b"FF ;name=\"v\"\r\n"), Ok(Some(255)));
        assert_eq!(line(b"5;a\tb\r\n"), Ok(Some(5)));
        assert_eq!(line(b"5 \t \r\n"), Ok(Some(5)));
        assert_eq!(line(b"ffffffffffffffff\r\n"), Ok(Some(u64::MAX)));
        assert_eq!(line(b"12"), Ok(None), "more to come");
    }

    #[test]
    fn everything_else_is_refused() {
        use ChunkLineError::*;
        for (bad, why) in [
            (&b"\r\n"[..], Bad),
            (b";x\r\n", Bad),
            (b" 5\r\n", Bad),
            (b"5 x\r\n", Bad),
            (b"-5\r\n", Bad),
            (b"0x5\r\n", Bad),
            (b"10000000000000000\r\n", Bad),
            (b"5;a\x01\r\n", Bad),
            (b"5;a\x7f\r\n", Bad),
            (b"5\n", BareLineEnd),
            (b"5\rx", BareLineEnd),
            (b"5;a\rb\r\n", BareLineEnd),
        ] {
            assert_eq!(line(bad), Err(why), "{bad:?}");
        }
    }
}
