//! The line protocol between Simplenetes proxies, byte for byte what the deployed
//! JavaScript proxy speaks:
//!
//! ```text
//! client → server:  PROXY TCP4 1.2.3.4 1.2.3.4 123 <clusterPort>\r\n
//! server → client:  SENDPROXY=true\r\n | SENDPROXY=false\r\n   then raw bytes both ways
//!                   BUSY\r\n then close                          (every target at maxConn)
//!                   close without a byte                         (no such port here)
//! ```
//!
//! We also answer `SENDPROXY=v2` for targets that want a v2 header; a JS peer would
//! take it as "no header", so use `v2` targets only where every proxy is ours. Unlike
//! the JS client, any other answer is a failure (next host), not a success.

use crate::proxy_protocol::Version;
use crate::proxy_protocol::header::{self, Inspect, V1_MAX};

/// The request line a client proxy sends (the JS proxy's dummy addresses: only the
/// last field is read).
pub fn request(cluster_port: u16) -> String {
    format!("PROXY TCP4 1.2.3.4 1.2.3.4 123 {cluster_port}\r\n")
}

/// The longest answer line we wait for.
pub const MAX_ANSWER: usize = 64;

/// A server's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Accepted(Option<Version>),
    Busy,
}

pub fn encode(a: Answer) -> &'static [u8] {
    match a {
        Answer::Accepted(None) => b"SENDPROXY=false\r\n",
        Answer::Accepted(Some(Version::V1)) => b"SENDPROXY=true\r\n",
        Answer::Accepted(Some(Version::V2)) => b"SENDPROXY=v2\r\n",
        Answer::Busy => b"BUSY\r\n",
    }
}

/// Parses an answer line (without its CRLF); `None` for anything unknown.
pub fn decode(line: &[u8]) -> Option<Answer> {
    match line {
        b"SENDPROXY=false" => Some(Answer::Accepted(None)),
        b"SENDPROXY=true" => Some(Answer::Accepted(Some(Version::V1))),
        b"SENDPROXY=v2" => Some(Answer::Accepted(Some(Version::V2))),
        b"BUSY" => Some(Answer::Busy),
        _ => None,
    }
}

/// What the bytes a server has read so far on its proxy port say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestRead {
    /// A whole request line (`len` bytes) asking for `cluster_port`; what follows
    /// is the client's data.
    Port { len: usize, cluster_port: u16 },
    /// Not whole yet; read at most this many more bytes.
    More(usize),
    /// Not a request line: close.
    Invalid,
}

/// Reads a client proxy's request line: a PROXY v1 header whose destination
/// port is the cluster port asked for (the JS proxy's dummy addresses).
pub fn read_request(buf: &[u8]) -> RequestRead {
    match header::inspect(buf) {
        Inspect::Header {
            len,
            destination: Some(d),
            ..
        } if len <= V1_MAX && buf.starts_with(b"PROXY ") => RequestRead::Port {
            len,
            cluster_port: d.port(),
        },
        Inspect::Incomplete if buf.len() < V1_MAX => RequestRead::More(V1_MAX - buf.len()),
        _ => RequestRead::Invalid,
    }
}

/// What the bytes a client has read so far from a server say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerRead {
    /// A whole line: the answer (`None`: unknown), and the bytes that followed it
    /// (the target's first data).
    Line(Option<Answer>, usize),
    /// Not whole yet; read at most this many more bytes.
    More(usize),
    /// [`MAX_ANSWER`] bytes without a line end.
    TooLong,
}

/// Reads a server's answer line.
pub fn read_answer(buf: &[u8]) -> AnswerRead {
    if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
        return AnswerRead::Line(decode(&buf[..end]), end + 2);
    }
    if buf.len() >= MAX_ANSWER {
        return AnswerRead::TooLong;
    }
    AnswerRead::More(MAX_ANSWER - buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_unknown_lines_are_failures() {
        for a in [
            Answer::Accepted(None),
            Answer::Accepted(Some(Version::V1)),
            Answer::Accepted(Some(Version::V2)),
            Answer::Busy,
        ] {
            let line = encode(a);
            assert_eq!(decode(&line[..line.len() - 2]), Some(a));
        }
        for junk in [&b"OK"[..], b"", b"SENDPROXY=TRUE", b"BUSY ", b"go ahead"] {
            assert_eq!(decode(junk), None);
        }
        assert_eq!(request(61000), "PROXY TCP4 1.2.3.4 1.2.3.4 123 61000\r\n");
    }
}
