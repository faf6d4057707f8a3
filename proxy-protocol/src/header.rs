//! Recognising, bounding and writing PROXY headers.

use std::net::SocketAddr;

use ppp::{v1, v2};

use super::Version;

/// The v2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest legal v1 header, CRLF included.
pub const V1_MAX: usize = 107;
/// The longest v2 header we accept: 16 fixed bytes plus 240 bytes of addresses and
/// TLVs (the largest address block is 216 bytes, AF_UNIX). Larger ones are refused
/// rather than buffered: the length field alone could ask for 64 KiB.
pub const V2_MAX: usize = 16 + 240;

/// What the start of a byte stream is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspect {
    /// Not a PROXY header: payload.
    NotHeader,
    /// A prefix of a header: more bytes are needed to tell.
    Incomplete,
    /// A valid header of `len` bytes; `source` is the client it names, if it names one
    /// (`UNKNOWN`, `LOCAL`, `UNSPEC` and AF_UNIX name none).
    Header {
        version: Version,
        len: usize,
        source: Option<SocketAddr>,
        destination: Option<SocketAddr>,
    },
    /// Starts like a header but is not a valid one.
    Invalid(&'static str),
}

/// Looks at the start of `buf`.
pub fn inspect(buf: &[u8]) -> Inspect {
    const V1_PREFIX: &[u8] = b"PROXY ";
    if buf.is_empty() {
        return Inspect::Incomplete;
    }
    let n = buf.len().min(V1_PREFIX.len());
    if buf[..n] == V1_PREFIX[..n] {
        return if buf.len() < V1_PREFIX.len() {
            Inspect::Incomplete
        } else {
            inspect_v1(buf)
        };
    }
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] == V2_SIGNATURE[..n] {
        return if buf.len() < 16 {
            Inspect::Incomplete
        } else {
            inspect_v2(buf)
        };
    }
    Inspect::NotHeader
}

fn inspect_v1(buf: &[u8]) -> Inspect {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(cr) = window.iter().position(|&b| b == b'\r' || b == b'\n') else {
        return if buf.len() >= V1_MAX {
            Inspect::Invalid("v1 header longer than 107 bytes")
        } else {
            Inspect::Incomplete
        };
    };
    if window[cr] == b'\n' {
        return Inspect::Invalid("v1 header ends with a bare LF");
    }
    if cr + 1 >= window.len() {
        return if buf.len() >= V1_MAX {
            Inspect::Invalid("v1 header longer than 107 bytes")
        } else {
            Inspect::Incomplete
        };
    }
    if window[cr + 1] != b'\n' {
        return Inspect::Invalid("v1 header ends with a bare CR");
    }
    let len = cr + 2;
    let text = &window[..len];
    // ppp takes ports with leading zeros; the spec does not.
    if text
        .split(|&b| b == b' ')
        .skip(4)
        .any(|f| f.len() > 1 && f[0] == b'0' && f.iter().all(u8::is_ascii_digit))
    {
        return Inspect::Invalid("v1 port with a leading zero");
    }
    match v1::Header::try_from(text) {
        Ok(h) => {
            let (source, destination) = match h.addresses {
                v1::Addresses::Tcp4(a) => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                v1::Addresses::Tcp6(a) => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                v1::Addresses::Unknown => (None, None),
            };
            Inspect::Header {
                version: Version::V1,
                len,
                source,
                destination,
            }
        }
        Err(_) => Inspect::Invalid("malformed v1 header"),
    }
}

fn inspect_v2(buf: &[u8]) -> Inspect {
    let len = 16 + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > V2_MAX {
        return Inspect::Invalid("v2 header longer than the limit");
    }
    if buf.len() < len {
        return Inspect::Incomplete;
    }
    match v2::Header::try_from(&buf[..len]) {
        Ok(h) => {
            let (source, destination) = match (h.command, h.addresses) {
                (v2::Command::Proxy, v2::Addresses::IPv4(a)) => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                (v2::Command::Proxy, v2::Addresses::IPv6(a)) => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                _ => (None, None),
            };
            Inspect::Header {
                version: Version::V2,
                len,
                source,
                destination,
            }
        }
        Err(_) => Inspect::Invalid("malformed v2 header"),
    }
}

/// A header saying `source` connected to `destination`. Mixed families (an IPv4
/// client on an IPv6 socket) are written as `UNKNOWN` (v1) or `LOCAL` (v2), which a
/// receiver must accept; mapped IPv4 addresses are unmapped first.
pub fn encode(version: Version, source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let source = unmap(source);
    let destination = unmap(destination);
    match version {
        Version::V1 => v1::Addresses::from((source, destination))
            .to_string()
            .into_bytes(),
        Version::V2 => {
            let same_family = source.is_ipv4() == destination.is_ipv4();
            let built = if same_family {
                v2::Builder::with_addresses(
                    v2::Version::Two | v2::Command::Proxy,
                    v2::Protocol::Stream,
                    (source, destination),
                )
                .build()
            } else {
                v2::Builder::new(v2::Version::Two | v2::Command::Local, 0).build()
            };
            // Building into a Vec cannot fail; a LOCAL header is the safe fallback.
            built.unwrap_or_else(|_| {
                let mut local = V2_SIGNATURE.to_vec();
                local.extend_from_slice(&[0x20, 0x00, 0x00, 0x00]);
                local
            })
        }
    }
}

fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => a,
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests;
