//! The relay between real loopback sockets (splice and copy) and between in-memory
//! streams (the copy path every non-TCP stream takes).

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter, DuplexStream};
use tokio::net::TcpListener;

fn counters() -> ByteCounters {
    ByteCounters {
        up: IntCounter::new("u", "u").expect("counter"),
        down: IntCounter::new("d", "d").expect("counter"),
    }
}

/// Two connected loopback pairs `(client, client_far)`, `(target, target_far)`: the
/// relay runs between `client_far` and `target`.
async fn pairs() -> ((TcpStream, TcpStream), (TcpStream, TcpStream)) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let a = l.local_addr().expect("addr");
    let mut out = Vec::new();
    for _ in 0..2 {
        let (c, s) = tokio::join!(TcpStream::connect(a), l.accept());
        out.push((c.expect("connect"), s.expect("accept").0));
    }
    let second = out.pop().expect("pair");
    let first = out.pop().expect("pair");
    (first, second)
}

fn opts(c: &ByteCounters, idle: u64, guard: Option<fn(&[u8]) -> bool>) -> Options<'_> {
    Options {
        idle: Duration::from_secs(idle),
        counters: Some(c),
        refuse_first: guard,
    }
}

#[tokio::test]
async fn half_close_lets_the_other_direction_finish() {
    let ((mut client, mut client_far), (mut target, mut target_far)) = pairs().await;
    let task = tokio::spawn(async move {
        let c = counters();
        relay(&mut client_far, &mut target, opts(&c, 5, None)).await
    });
    client.write_all(b"question").await.expect("write");
    client.shutdown().await.expect("shutdown");
    let mut got = Vec::new();
    target_far
        .read_to_end(&mut got)
        .await
        .expect("target sees EOF");
    assert_eq!(got, b"question");
    // The target answers after the client's EOF; the answer still arrives.
    target_far.write_all(b"answer").await.expect("write");
    target_far.shutdown().await.expect("shutdown");
    let mut back = Vec::new();
    client.read_to_end(&mut back).await.expect("read");
    assert_eq!(back, b"answer");
    let totals = task.await.expect("join").expect("clean end");
    assert_eq!(totals, Totals { up: 8, down: 6 });
}

fn pattern(len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Reads everything from `r` in small steps with pauses, so the relay meets
/// back-pressure.
async fn read_slowly(r: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 7_919];
    loop {
        let n = r.read(&mut buf).await.expect("read");
        if n == 0 {
            return got;
        }
        got.extend_from_slice(&buf[..n]);
        if got.len() % 97 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[tokio::test]
async fn bulk_through_copy_then_splice_with_a_slow_reader_loses_nothing() {
    let ((client, mut client_far), (mut target, mut target_far)) = pairs().await;
    let c = counters();
    let up = c.up.clone();
    let task =
        tokio::spawn(async move { relay(&mut client_far, &mut target, opts(&c, 5, None)).await });
    // Far past SPLICE_AFTER, so both the copy and the splice path carry bytes.
    let data = pattern(8_000_000);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        let mut client = client;
        client.write_all(&sent).await.expect("write");
        client.shutdown().await.expect("shutdown");
        client
    });
    let got = read_slowly(&mut target_far).await;
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes differ");
    assert_eq!(up.get(), data.len() as u64);
    drop(target_far);
    drop(writer.await.expect("writer"));
    let _ = task.await.expect("join");
}

/// An in-memory stream that holds what is written until flushed, as a TLS stream
/// holds records: a relay that never flushes loses its last bytes.
type Buffered = Copied<BufWriter<DuplexStream>>;

fn buffered(far: usize) -> (Buffered, DuplexStream) {
    let (near, far_end) = tokio::io::duplex(far);
    (Copied(BufWriter::with_capacity(16 * 1024, near)), far_end)
}

#[tokio::test]
async fn streams_that_buffer_are_flushed_and_half_closed() {
    let (mut a, mut a_far) = buffered(4096);
    let (mut b, mut b_far) = buffered(4096);
    let task =
        tokio::spawn(
            async move { relay(&mut a, &mut b, Options::idle(Duration::from_secs(5))).await },
        );
    // A short message waits for its answer: it must not stay in a buffer.
    a_far.write_all(b"ping").await.expect("write");
    let mut four = [0u8; 4];
    b_far.read_exact(&mut four).await.expect("flushed through");
    assert_eq!(&four, b"ping");
    b_far.write_all(b"pong").await.expect("write");
    a_far.read_exact(&mut four).await.expect("flushed back");
    assert_eq!(&four, b"pong");
    // Bulk one way through small pipes, then EOF: all of it, then the EOF.
    let data = pattern(1_000_000);
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        a_far.write_all(&sent).await.expect("write");
        a_far.shutdown().await.expect("shutdown");
        a_far
    });
    let got = read_slowly(&mut b_far).await;
    assert!(got == data, "bytes differ: {} of {}", got.len(), data.len());
    // The other direction still flows after the half-close.
    b_far.write_all(b"late answer").await.expect("write");
    b_far.shutdown().await.expect("shutdown");
    let mut a_far = writer.await.expect("writer");
    let mut back = Vec::new();
    a_far.read_to_end(&mut back).await.expect("read");
    assert_eq!(back, b"late answer");
    let totals = task.await.expect("join").expect("clean end");
    assert_eq!(
        totals,
        Totals {
            up: 4 + 1_000_000,
            down: 4 + 11
        }
    );
}

#[tokio::test(start_paused = true)]
async fn silence_ends_with_idle_and_bytes_keep_it_alive() {
    let (mut a, mut a_far) = buffered(4096);
    let (mut b, mut b_far) = buffered(4096);
    let limit = Duration::from_secs(30);
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(async move { relay(&mut a, &mut b, Options::idle(limit)).await });
    // A byte every 20 s, one way then the other, for two minutes.
    let mut one = [0u8; 1];
    for i in 0..6 {
        tokio::time::sleep(Duration::from_secs(20)).await;
        if i % 2 == 0 {
            a_far.write_all(b"x").await.expect("write");
            b_far.read_exact(&mut one).await.expect("read");
        } else {
            b_far.write_all(b"y").await.expect("write");
            a_far.read_exact(&mut one).await.expect("read");
        }
    }
    assert!(!task.is_finished(), "bytes kept moving");
    let last = tokio::time::Instant::now();
    let r = task.await.expect("join");
    assert!(matches!(r, Err(RelayError::Idle)), "{r:?}");
    assert_eq!(tokio::time::Instant::now() - last, limit);
    assert_eq!(last - started, Duration::from_secs(120));
}

fn refuse_proxy(first: &[u8]) -> bool {
    first.starts_with(b"PROXY ")
}

#[tokio::test]
async fn the_guard_sees_side_a_first_bytes_only() {
    for (first, refused) in [
        (&b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2\r\nhello"[..], true),
        (&b"GET / HTTP/1.1\r\n\r\n"[..], false),
    ] {
        let ((mut client, mut client_far), (mut target, mut target_far)) = pairs().await;
        client.write_all(first).await.expect("write");
        client.shutdown().await.expect("shutdown");
        target_far.shutdown().await.expect("shutdown");
        let c = counters();
        let r = relay(
            &mut client_far,
            &mut target,
            opts(&c, 5, Some(refuse_proxy)),
        )
        .await;
        assert_eq!(matches!(r, Err(RelayError::Refused)), refused, "{r:?}");
        drop(target);
        let mut got = Vec::new();
        target_far.read_to_end(&mut got).await.expect("read");
        assert_eq!(got.is_empty(), refused, "refused bytes never reach side b");
    }
}
