//! A plain-text HTTP/2 server (prior knowledge) on this codec and nothing
//! else, for real clients to check the codec against and for the count of
//! what a request costs on it: `GET /big` answers a megabyte, a request with
//! a body answers its length (`got N`), any other `hello PATH`.
//!
//!     cargo run --release -p h2-codec --example toy 127.0.0.1:0   # prints its port
//!
//! The router's own h2 server will be this loop with the request path in
//! place of `answer`; `tests/clients.rs` runs it against curl, h2load and
//! nghttp.

#[allow(dead_code)]
mod common;

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use h2_codec::conn::{Conn, Event, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    common::serve_each(serve).await
}

/// What one connection's streams are doing.
#[derive(Default)]
struct Streams {
    /// A request's path and the body bytes read so far.
    reading: HashMap<u32, (String, usize)>,
    /// Body left to send once the client's windows open.
    sending: HashMap<u32, Bytes>,
}

/// Serves one connection until it ends.
pub async fn serve(mut stream: TcpStream) {
    let mut conn = Conn::new(Limits::default());
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut streams = Streams::default();
    let mut events = Vec::new();
    loop {
        let out = conn.output().split();
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            return;
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let read = conn.read(&mut buf, &mut events);
        for event in events.drain(..) {
            streams.on(&mut conn, event);
        }
        streams.send(&mut conn);
        if read.is_err() {
            let _ = stream.write_all(&conn.output().split()).await;
            return;
        }
    }
}

impl Streams {
    fn on(&mut self, conn: &mut Conn, event: Event) {
        match event {
            Event::Request { stream, head, end } => {
                let path = head.map_or("?".into(), |h| h.uri().path().to_string());
                self.reading.insert(stream, (path, 0));
                if end {
                    self.answer(conn, stream);
                }
            }
            Event::Data { stream, data, end } => {
                conn.consumed(stream, data.len() as u32);
                if let Some((_, n)) = self.reading.get_mut(&stream) {
                    *n += data.len();
                }
                if end {
                    self.answer(conn, stream);
                }
            }
            Event::End { stream } => self.answer(conn, stream),
            Event::Reset { stream, .. } => {
                self.reading.remove(&stream);
                self.sending.remove(&stream);
            }
            Event::Window | Event::GoAway { .. } | Event::Pong => {}
        }
    }

    fn answer(&mut self, conn: &mut Conn, stream: u32) {
        let Some((path, got)) = self.reading.remove(&stream) else {
            return;
        };
        let body = match (path.as_str(), got) {
            ("/big", _) => Bytes::from(vec![b'x'; 1 << 20]),
            (_, 0) => Bytes::from(format!("hello {path}")),
            (_, n) => Bytes::from(format!("got {n}")),
        };
        let length = body.len().to_string();
        let fields = [
            ("content-type", &b"text/plain"[..]),
            ("content-length", length.as_bytes()),
        ];
        conn.respond(stream, Some(200), fields.into_iter(), false);
        self.sending.insert(stream, body);
    }

    /// Every body that waits, as far as the windows let.
    fn send(&mut self, conn: &mut Conn) {
        self.sending
            .retain(|stream, body| !conn.send_data(*stream, body, true));
    }
}
