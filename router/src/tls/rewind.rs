//! A client stream with bytes already read from it put back in front: the
//! ClientHello read to look for a passthrough name (see [`crate::tls::hello`]) is
//! read again by our own handshake, as if it had never been taken; and a client
//! connection the router's own HTTP/1 path hands to hyper gives hyper the bytes it
//! had read (see [`crate::request::connection::h1`]).
//!
//! Hand-written because hyper-util's equivalent is private; small enough to read
//! whole. Writes go straight to the stream.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub struct Rewind<T = TcpStream> {
    /// Bytes to hand out before reading the stream again; empty when none.
    prefix: Vec<u8>,
    at: usize,
    inner: T,
}

impl<T> Rewind<T> {
    pub fn new(inner: T, prefix: Vec<u8>) -> Rewind<T> {
        Rewind {
            prefix,
            at: 0,
            inner,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let rest = &this.prefix[this.at..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Whatever the prefix, the rest and the reader's buffer size, the reader
        /// sees the prefix then the stream, byte for byte.
        #[test]
        fn prefix_then_stream(prefix in proptest::collection::vec(any::<u8>(), 0..300),
                              rest in proptest::collection::vec(any::<u8>(), 0..300),
                              step in 1usize..64) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
            let got = rt.block_on(async {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                let addr = l.local_addr().expect("addr");
                let rest2 = rest.clone();
                let w = tokio::spawn(async move {
                    let mut c = TcpStream::connect(addr).await.expect("connect");
                    c.write_all(&rest2).await.expect("write");
                });
                let (s, _) = l.accept().await.expect("accept");
                w.await.expect("writer");
                let mut r = Rewind::new(s, prefix.clone());
                let mut got = Vec::new();
                let mut chunk = vec![0u8; step];
                loop {
                    let n = r.read(&mut chunk).await.expect("read");
                    if n == 0 { break; }
                    got.extend_from_slice(&chunk[..n]);
                }
                got
            });
            let mut want = prefix.clone();
            want.extend_from_slice(&rest);
            prop_assert_eq!(got, want);
        }
    }
}
