//! Reading what a trusted source sends first: a PROXY header, or payload.
//!
//! Used only for trusted sources and only when the answer matters. The wait is
//! bounded: a source that sends nothing (a server-speaks-first protocol such as MySQL
//! or SMTP, whose server talks first) is taken to have sent no header once the
//! deadline passes, and the relay starts. Every byte read is kept, in order.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::Version;
use super::header::{self, Inspect};

/// A header found at the start of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub version: Version,
    /// Its bytes, to be passed on verbatim when the target wants the same version.
    pub bytes: Vec<u8>,
    pub source: Option<SocketAddr>,
    pub destination: Option<SocketAddr>,
}

/// What was read before the relay starts.
#[derive(Debug, Default)]
pub struct Leading {
    pub header: Option<Found>,
    /// Payload already read (after the header, if any).
    pub payload: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExpectError {
    #[error("invalid PROXY header: {0}")]
    Invalid(&'static str),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Reads until the stream's start is known to be a header or payload, or `wait`
/// passes (then: no header), or EOF.
pub async fn read_leading<R: AsyncRead + Unpin>(
    r: &mut R,
    wait: Duration,
) -> Result<Leading, ExpectError> {
    let mut buf = Vec::with_capacity(512);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match header::inspect(&buf) {
            Inspect::Incomplete => {}
            Inspect::NotHeader => {
                return Ok(Leading {
                    header: None,
                    payload: buf,
                });
            }
            Inspect::Invalid(why) => return Err(ExpectError::Invalid(why)),
            Inspect::Header {
                version,
                len,
                source,
                destination,
            } => {
                let payload = buf.split_off(len);
                return Ok(Leading {
                    header: Some(Found {
                        version,
                        bytes: buf,
                        source,
                        destination,
                    }),
                    payload,
                });
            }
        }
        buf.reserve(1024);
        let read = tokio::time::timeout_at(deadline, r.read_buf(&mut buf)).await;
        match read {
            // Out of time, or EOF: what we have is payload (possibly nothing).
            Err(_) | Ok(Ok(0)) => {
                return Ok(Leading {
                    header: None,
                    payload: buf,
                });
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
        }
    }
}

/// Why a connection that must start with a header did not.
#[derive(Debug, thiserror::Error)]
pub enum RequiredError {
    #[error("no PROXY header")]
    Missing,
    #[error("invalid PROXY header: {0}")]
    Invalid(&'static str),
    #[error("no complete PROXY header within the deadline")]
    Timeout,
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// How long to wait before looking again at a header that arrived in part
/// (rare: a load balancer writes its header in one segment).
const PARTIAL_WAIT: Duration = Duration::from_millis(2);

/// Reads the header a trusted source must send first, and nothing after it:
/// the bytes are looked at with `peek` and only the header's are consumed, so
/// the stream goes on at the payload's first byte (a TLS ClientHello, an HTTP
/// request) with nothing to put back. `Ok(None)`: a header that names no
/// client (`LOCAL`, `UNKNOWN`: a load balancer's own health check).
pub async fn read_required(
    stream: &mut tokio::net::TcpStream,
    deadline: tokio::time::Instant,
) -> Result<Option<SocketAddr>, RequiredError> {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; header::V2_MAX];
    loop {
        let seen = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .map_err(|_| RequiredError::Timeout)??;
        if seen == 0 {
            return Err(RequiredError::Missing);
        }
        match header::inspect(&buf[..seen]) {
            Inspect::Header { len, source, .. } => {
                stream.read_exact(&mut buf[..len]).await?;
                return Ok(source);
            }
            Inspect::NotHeader => return Err(RequiredError::Missing),
            Inspect::Invalid(why) => return Err(RequiredError::Invalid(why)),
            Inspect::Incomplete if seen == buf.len() => {
                return Err(RequiredError::Invalid("longer than any header"));
            }
            Inspect::Incomplete => {
                if tokio::time::Instant::now() + PARTIAL_WAIT > deadline {
                    return Err(RequiredError::Timeout);
                }
                tokio::time::sleep(PARTIAL_WAIT).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_header_sent_one_byte_at_a_time_is_found_and_payload_kept() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for byte in b"PROXY TCP4 10.0.0.1 10.0.0.2 1234 80\r\nGET" {
                a.write_all(&[*byte]).await.expect("write");
            }
            a
        });
        let got = read_leading(&mut b, Duration::from_secs(5))
            .await
            .expect("ok");
        let h = got.header.expect("header");
        assert_eq!(h.source, Some("10.0.0.1:1234".parse().expect("addr")));
        assert_eq!(h.bytes, b"PROXY TCP4 10.0.0.1 10.0.0.2 1234 80\r\n");
        // The payload may have been split: read what is left.
        let mut rest = got.payload;
        drop(writer.await.expect("join"));
        b.read_to_end(&mut rest).await.expect("read");
        assert_eq!(rest, b"GET");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_means_no_header() {
        let (_a, mut b) = tokio::io::duplex(64);
        let got = read_leading(&mut b, Duration::from_secs(1))
            .await
            .expect("ok");
        assert!(got.header.is_none() && got.payload.is_empty());
    }

    #[tokio::test]
    async fn garbage_after_the_prefix_is_invalid() {
        let (mut a, mut b) = tokio::io::duplex(256);
        a.write_all(b"PROXY TCP4 999.0.0.1 10.0.0.2 1 2\r\n")
            .await
            .expect("write");
        let got = read_leading(&mut b, Duration::from_secs(1)).await;
        assert!(matches!(got, Err(ExpectError::Invalid(_))), "{got:?}");
    }
}
