//! Reading a client's ClientHello without answering it, for SNI passthrough: the
//! bytes are kept, so the connection can still be relayed untouched to a member that
//! terminates TLS itself, or handed to our own handshake as if nothing had been read.
//!
//! The parsing is rustls's ([`rustls::server::Acceptor`]), fed the bytes as they
//! arrive; a ClientHello split over several TCP segments or TLS records is read
//! whole (at most [`MAX_HELLO`]). Every byte read is kept, including any that came
//! after the ClientHello in the same read, and replayed or relayed as it was.

use std::io;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// A ClientHello larger than this is not passed through: rustls's own limit for a
/// handshake message is 64 KiB, plus record headers.
pub const MAX_HELLO: usize = 70 * 1024;

/// What was read: the bytes as they came, and the server name asked for.
#[derive(Debug)]
pub struct Hello {
    pub bytes: Vec<u8>,
    /// Lower-case; `None` without SNI or when the bytes are not a ClientHello
    /// (then our own handshake answers them, exactly as without passthrough).
    pub sni: Option<String>,
}

/// Reads until rustls has a whole ClientHello, the bytes stop being one, or the
/// client closes. Never fails: whatever was read is returned for the handshake to
/// answer (an error, a close) as it would have without this peek.
pub async fn read(stream: &mut TcpStream) -> Hello {
    let mut reader = HelloReader::default();
    let mut chunk = [0u8; 2048];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return reader.end(),
            Ok(n) => n,
        };
        if let Some(hello) = reader.push(&chunk[..n]) {
            return hello;
        }
    }
}

/// The ClientHello read so far, fed as bytes arrive: the I/O-free part of
/// [`read`], which the `tls_hello` fuzz target feeds at every split.
#[derive(Default)]
pub struct HelloReader {
    acceptor: rustls::server::Acceptor,
    bytes: Vec<u8>,
}

impl HelloReader {
    /// Takes the next bytes from the client: the [`Hello`] once rustls has a
    /// whole ClientHello or the bytes cannot be one (then without a name).
    pub fn push(&mut self, chunk: &[u8]) -> Option<Hello> {
        self.bytes.extend_from_slice(chunk);
        let mut rest = chunk;
        while !rest.is_empty() {
            if feed(&mut self.acceptor, &mut rest).is_err() {
                return Some(self.done(None));
            }
        }
        match self.acceptor.accept() {
            Ok(Some(accepted)) => {
                let sni = accepted
                    .client_hello()
                    .server_name()
                    .map(str::to_ascii_lowercase);
                Some(self.done(sni))
            }
            Ok(None) if self.bytes.len() < MAX_HELLO => None,
            Ok(None) | Err(_) => Some(self.done(None)),
        }
    }

    /// The client closed: what it sent, without a name.
    pub fn end(mut self) -> Hello {
        self.done(None)
    }

    fn done(&mut self, sni: Option<String>) -> Hello {
        Hello {
            bytes: std::mem::take(&mut self.bytes),
            sni,
        }
    }
}

fn feed(acceptor: &mut rustls::server::Acceptor, rest: &mut &[u8]) -> io::Result<usize> {
    match acceptor.read_tls(rest)? {
        0 => Err(io::Error::other("ClientHello buffer full")),
        n => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::io::AsyncWriteExt;

    /// A real ClientHello for `name` (an IP address: no SNI), from a rustls client.
    fn client_hello(name: &str) -> Vec<u8> {
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
        let mut conn = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
        let mut out = Vec::new();
        conn.write_tls(&mut out).expect("hello");
        out
    }

    async fn read_split(bytes: &[u8], cuts: &[usize]) -> Hello {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let bytes = bytes.to_vec();
        let cuts = cuts.to_vec();
        let writer = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.expect("connect");
            c.set_nodelay(true).expect("nodelay");
            let mut at = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                c.write_all(&bytes[at..cut]).await.expect("write");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                at = cut;
            }
            c
        });
        let (mut s, _) = listener.accept().await.expect("accept");
        let hello = read(&mut s).await;
        drop(writer.await);
        hello
    }

    #[tokio::test]
    async fn the_name_and_every_byte_whatever_the_split() {
        let hello = client_hello("Gear.Example.COM");
        for cuts in [vec![], vec![1], vec![3, 5], vec![10, hello.len() / 2]] {
            let got = read_split(&hello, &cuts).await;
            assert_eq!(
                got.sni.as_deref(),
                Some("gear.example.com"),
                "cuts {cuts:?}"
            );
            assert_eq!(got.bytes, hello, "cuts {cuts:?}");
        }
    }

    #[tokio::test]
    async fn garbage_and_no_name_give_no_name_and_keep_the_bytes() {
        let garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        let got = read_split(&garbage, &[]).await;
        assert_eq!((got.sni, got.bytes), (None, garbage));
        // No SNI: a client connecting to an IP address.
        let out = client_hello("127.0.0.1");
        let got = read_split(&out, &[7]).await;
        assert_eq!(got.sni, None);
        assert_eq!(got.bytes, out);
    }
}
