//! Header blocks (RFC 7541): a client's read with the dynamic table the
//! connection keeps ([`Decoder`]), the server's written without one
//! ([`encode`]).
//!
//! A client's blocks may index its earlier fields (browsers, curl and
//! nghttp2 index nearly all of a request's fields, so that from the second
//! request on a head is mostly one-byte references). The table holds at
//! most the size this server advertised (`SETTINGS_HEADER_TABLE_SIZE`,
//! [`Decoder::new`]), and a block's decoded size is bounded by the caller
//! (each field is handed over as it is read).
//!
//! The server's blocks name the static table (`:status 200` is one byte,
//! `content-type` a one-byte name) and carry their values as raw literals
//! "without indexing": no Huffman coding (about 9,400 instructions a
//! request in `h3`'s, see `h3-codec`), nothing for the client to keep.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};
use h3_codec::qpack::{Text, int, prefixed, status_digits, string};

use crate::error::{Code, Error};
use crate::table::{self, STATIC};

const FAILED: Error = Error::connection(Code::COMPRESSION_ERROR, "malformed header block");

/// What each dynamic table entry counts beyond its name and value (§4.1).
const ENTRY_OVERHEAD: usize = 32;

/// A connection's HPACK decoding context: its dynamic table.
#[derive(Debug)]
pub struct Decoder {
    /// Newest first: entry 62 is `entries[0]`.
    entries: VecDeque<(Bytes, Bytes)>,
    /// The entries' size (§4.1).
    size: usize,
    /// The size the client set (a size update), at most `limit`.
    max: usize,
    /// The size this server advertised.
    limit: usize,
}

impl Decoder {
    /// A context for a connection whose `SETTINGS_HEADER_TABLE_SIZE` is
    /// `limit` (4,096 by default, RFC 9113 §6.5.2).
    pub fn new(limit: usize) -> Decoder {
        Decoder {
            entries: VecDeque::new(),
            size: 0,
            max: limit,
            limit,
        }
    }

    /// Calls `each` with every field of `block` (a whole header block: a
    /// HEADERS frame's fragment and its CONTINUATIONs), in order.
    pub fn decode(
        &mut self,
        block: &Bytes,
        mut each: impl FnMut(Text, Text) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut at = 0;
        let mut fields = false;
        while let Some(&first) = block.get(at) {
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let (index, n) = int(block, at, 7).map_err(|_| FAILED)?;
                at += n;
                let (name, value) = self.entry(index)?;
                each(name, value)?;
            } else if first & 0x40 != 0 {
                // Literal with incremental indexing (§6.2.1).
                let (name, value, next) = self.literal(block, at, 6)?;
                at = next;
                self.insert(name.to_bytes(), value.to_bytes());
                each(name, value)?;
            } else if first & 0x20 != 0 {
                // Dynamic table size update (§6.3): only before the fields.
                if fields {
                    return Err(Error::connection(
                        Code::COMPRESSION_ERROR,
                        "a table size update after a field",
                    ));
                }
                let (max, n) = int(block, at, 5).map_err(|_| FAILED)?;
                at += n;
                self.resize(max)?;
                continue;
            } else {
                // Literal without indexing (0000) or never indexed (0001).
                let (name, value, next) = self.literal(block, at, 4)?;
                at = next;
                each(name, value)?;
            }
            fields = true;
        }
        Ok(())
    }

    /// Entry `index`: the static table's (1 to 61), else the dynamic one's.
    fn entry(&self, index: u64) -> Result<(Text, Text), Error> {
        let index = usize::try_from(index).map_err(|_| FAILED)?;
        if let Some(&(name, value)) = index.checked_sub(1).and_then(|i| STATIC.get(i)) {
            return Ok((Text::Static(name), Text::Static(value)));
        }
        let (name, value) = index
            .checked_sub(STATIC.len() + 1)
            .and_then(|i| self.entries.get(i))
            .ok_or(Error::connection(
                Code::COMPRESSION_ERROR,
                "an index past the tables",
            ))?;
        Ok((Text::Owned(name.clone()), Text::Owned(value.clone())))
    }

    /// A literal field whose name index has a `bits` prefix (0: the name is
    /// a literal too); the name, the value, and where the next field starts.
    fn literal(&self, block: &Bytes, at: usize, bits: u32) -> Result<(Text, Text, usize), Error> {
        let (index, n) = int(block, at, bits).map_err(|_| FAILED)?;
        let (name, at) = match index {
            0 => string(block, at + n, 7).map_err(|_| FAILED)?,
            i => (self.entry(i)?.0, at + n),
        };
        let (value, at) = string(block, at, 7).map_err(|_| FAILED)?;
        Ok((name, value, at))
    }

    /// Adds a field, evicting the oldest entries to make room; a field
    /// larger than the table empties it (§4.4).
    fn insert(&mut self, name: Bytes, value: Bytes) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        self.evict(self.max.saturating_sub(size));
        if size <= self.max {
            self.size += size;
            self.entries.push_front((name, value));
        } else {
            self.entries.clear();
            self.size = 0;
        }
    }

    /// The client's new maximum, at most what this server advertised.
    fn resize(&mut self, max: u64) -> Result<(), Error> {
        match usize::try_from(max) {
            Ok(max) if max <= self.limit => {
                self.max = max;
                self.evict(max);
                Ok(())
            }
            _ => Err(Error::connection(
                Code::COMPRESSION_ERROR,
                "a table size past SETTINGS_HEADER_TABLE_SIZE",
            )),
        }
    }

    /// Evicts the oldest entries until the table's size is at most `to`.
    fn evict(&mut self, to: usize) {
        while self.size > to {
            let Some((name, value)) = self.entries.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= name.len() + value.len() + ENTRY_OVERHEAD;
        }
    }

    /// The table's size (§4.1), for tests and metrics.
    pub fn size(&self) -> usize {
        self.size
    }
}

/// A response head (`status` set) or trailers (`None`) as a header block:
/// `:status` indexed when the static table has it, each field's name
/// indexed when the static table has it (lowercase, as `http` keeps names),
/// every value a raw literal without indexing.
pub fn encode<'a>(
    status: Option<u16>,
    fields: impl Iterator<Item = (&'a str, &'a [u8])>,
    out: &mut BytesMut,
) {
    if let Some(code) = status {
        put_status(code, out);
    }
    for (name, value) in fields {
        put_field(name, value, out);
    }
}

/// A response head's `:status`, first in its block.
pub fn put_status(code: u16, out: &mut BytesMut) {
    match table::status_index(code) {
        Some(i) => out.put_u8(0x80 | i),
        None => {
            // `:status` (index 8) as a name, its three digits as the value.
            out.put_u8(8);
            literal(&status_digits(code), out);
        }
    }
}

/// One field, its name in lower case (as `http` keeps names).
pub fn put_field(name: &str, value: &[u8], out: &mut BytesMut) {
    match table::name_index(name) {
        Some(i) => prefixed(0, 4, u64::from(i), out),
        None => {
            out.put_u8(0);
            literal(name.as_bytes(), out);
        }
    }
    literal(value, out);
}

/// One field whose name may come in any case (an HTTP/1 peer's token):
/// written in lower case, as HTTP/2 requires (RFC 9113 §8.2.1).
pub fn put_field_any_case(name: &[u8], value: &[u8], out: &mut BytesMut) {
    let mut low = [0u8; 32];
    if let Some(low) = low.get_mut(..name.len()) {
        low.copy_from_slice(name);
        low.make_ascii_lowercase();
        if let Ok(low) = std::str::from_utf8(low) {
            return put_field(low, value, out);
        }
    }
    out.put_u8(0);
    literal(name, out);
    let at = out.len() - name.len();
    out[at..].make_ascii_lowercase();
    literal(value, out);
}

/// A string literal, not Huffman-coded (§5.2).
fn literal(text: &[u8], out: &mut BytesMut) {
    prefixed(0, 7, text.len() as u64, out);
    out.put_slice(text);
}

#[cfg(test)]
mod tests;
