use bytes::{BufMut, Bytes, BytesMut};

use super::*;
use crate::frame::{self, PREFACE};

/// A GET's header block: :method GET, :scheme https, :path /, :authority a.
const GET: [u8; 6] = [0x82, 0x87, 0x84, 0x01, 0x01, b'a'];

fn headers(stream: u32, block: &[u8], flags: u8) -> BytesMut {
    let mut out = BytesMut::new();
    frame::put_head(block.len(), frame::HEADERS, flags, stream, &mut out);
    out.put_slice(block);
    out
}

fn data(stream: u32, body: &[u8], flags: u8) -> BytesMut {
    let mut out = BytesMut::new();
    frame::put_head(body.len(), frame::DATA, flags, stream, &mut out);
    out.put_slice(body);
    out
}

/// A connection past the preface and the client's empty SETTINGS, its
/// output so far taken.
fn started(limits: Limits) -> Conn {
    let mut conn = Conn::new(limits);
    let mut buf = BytesMut::from(&PREFACE[..]);
    frame::put_settings(&[], &mut buf);
    conn.read(&mut buf, &mut Vec::new()).expect("started");
    conn.output().clear();
    conn
}

/// Every frame in `out`: head and payload.
fn frames(out: &mut BytesMut) -> Vec<(frame::Head, Bytes)> {
    let mut all = Vec::new();
    let bytes = out.split().freeze();
    let mut at = 0;
    while let Some(h) = frame::head(&bytes[at..]) {
        let end = at + frame::HEAD_LEN + h.len as usize;
        all.push((h, bytes.slice(at + frame::HEAD_LEN..end)));
        at = end;
    }
    all
}

fn kinds(out: &mut BytesMut) -> Vec<(u8, u32)> {
    frames(out)
        .iter()
        .map(|(h, _)| (h.kind, h.stream))
        .collect()
}

fn feed(conn: &mut Conn, bytes: &[u8]) -> (Result<(), Error>, Vec<Event>) {
    let mut buf = BytesMut::from(bytes);
    let mut events = Vec::new();
    let r = conn.read(&mut buf, &mut events);
    (r, events)
}

#[test]
fn a_request_is_read_and_answered_and_its_stream_forgotten() {
    let mut conn = Conn::new(Limits::default());
    let opening = kinds(conn.output());
    assert_eq!(opening, [(frame::SETTINGS, 0), (frame::WINDOW_UPDATE, 0)]);
    let mut bytes = BytesMut::from(&PREFACE[..10]);
    let (r, events) = feed(&mut conn, &bytes);
    assert!(r.is_ok() && events.is_empty(), "a preface in part waits");
    bytes = BytesMut::from(&PREFACE[..]);
    frame::put_settings(&[(0x4, 100)], &mut bytes);
    bytes.unsplit(headers(1, &GET, frame::END_HEADERS | frame::END_STREAM));
    let mut conn = Conn::new(Limits::default());
    conn.output().clear();
    let (r, events) = feed(&mut conn, &bytes);
    assert!(r.is_ok());
    let [
        Event::Request {
            stream: 1,
            head: Ok(req),
            end: true,
        },
    ] = &events[..]
    else {
        panic!("{events:?}");
    };
    assert_eq!(req.uri().to_string(), "https://a/");
    assert_eq!(kinds(conn.output()), [(frame::SETTINGS, 0)], "the ack");
    let fields = [("content-type", &b"text/plain"[..])];
    conn.respond(1, Some(200), fields.into_iter(), false);
    let mut body = Bytes::from_static(b"hello");
    assert!(conn.send_data(1, &mut body, true));
    let out = frames(conn.output());
    assert_eq!(out.len(), 2);
    assert_eq!(
        (out[0].0.kind, out[0].0.flags),
        (frame::HEADERS, frame::END_HEADERS)
    );
    assert_eq!(
        (out[1].0.kind, out[1].0.flags),
        (frame::DATA, frame::END_STREAM)
    );
    assert_eq!(&out[1].1[..], b"hello");
    assert_eq!(conn.open_streams(), 0);
}

#[test]
fn not_a_preface_ends_the_connection_with_goaway() {
    let mut conn = Conn::new(Limits::default());
    conn.output().clear();
    let (r, _) = feed(&mut conn, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(r.map_err(|e| e.code), Err(Code::PROTOCOL_ERROR));
    assert_eq!(kinds(conn.output()), [(frame::GOAWAY, 0)]);
}

#[test]
fn a_body_past_its_window_is_refused_and_a_read_one_opens_it_again() {
    let limits = Limits {
        stream_window: 100,
        connection_window: 65_535,
        ..Limits::default()
    };
    let mut conn = started(limits);
    let mut bytes = headers(1, &GET, frame::END_HEADERS);
    bytes.unsplit(data(1, &[7; 60], 0));
    let (r, events) = feed(&mut conn, &bytes);
    assert!(r.is_ok());
    assert!(matches!(
        events[1],
        Event::Data {
            stream: 1,
            end: false,
            ..
        }
    ));
    conn.consumed(1, 60);
    let updates = frames(conn.output());
    assert_eq!(
        updates.len(),
        1,
        "the stream's half window read: one update"
    );
    assert_eq!(
        (updates[0].0.stream, &updates[0].1[..]),
        (1, &60u32.to_be_bytes()[..])
    );
    let (r, events) = feed(&mut conn, &data(1, &[7; 101], 0));
    assert!(r.is_ok());
    assert!(matches!(
        events[..],
        [Event::Reset {
            stream: 1,
            code: Code::FLOW_CONTROL_ERROR
        }]
    ));
    assert_eq!(kinds(conn.output()), [(frame::RST_STREAM, 1)]);
}

#[test]
fn a_body_waits_for_the_clients_window() {
    let mut conn = started(Limits::default());
    let mut bytes = BytesMut::new();
    frame::put_settings(&[(0x4, 10)], &mut bytes);
    bytes.unsplit(headers(1, &GET, frame::END_HEADERS | frame::END_STREAM));
    feed(&mut conn, &bytes).0.expect("read");
    conn.output().clear();
    conn.respond(1, Some(200), std::iter::empty(), false);
    let mut body = Bytes::from(vec![1; 25]);
    assert!(!conn.send_data(1, &mut body, true), "10 of 25 bytes");
    assert_eq!(body.len(), 15);
    let mut update = BytesMut::new();
    frame::put_window_update(1, 100, &mut update);
    let (r, events) = feed(&mut conn, &update);
    assert!(r.is_ok() && matches!(events[..], [Event::Window]));
    assert!(conn.send_data(1, &mut body, true));
    let sent: usize = frames(conn.output())
        .iter()
        .filter(|(h, _)| h.kind == frame::DATA)
        .map(|(_, p)| p.len())
        .sum();
    assert_eq!(sent, 25);
    assert_eq!(conn.open_streams(), 0);
}

#[test]
fn streams_past_the_bound_are_refused_and_resets_past_theirs_end_it() {
    let limits = Limits {
        max_concurrent_streams: 1,
        max_resets: 2,
        ..Limits::default()
    };
    let mut conn = started(limits);
    let mut bytes = headers(1, &GET, frame::END_HEADERS);
    bytes.unsplit(headers(3, &GET, frame::END_HEADERS));
    let (r, events) = feed(&mut conn, &bytes);
    assert!(r.is_ok());
    assert_eq!(events.len(), 1, "stream 3 refused");
    assert_eq!(kinds(conn.output()), [(frame::RST_STREAM, 3)]);
    let mut result = Ok(());
    for stream in [5, 7, 9] {
        let mut bytes = headers(stream, &GET, frame::END_HEADERS);
        frame::put_rst_stream(stream, Code::CANCEL, &mut bytes);
        conn.reset(1, Code::CANCEL);
        result = feed(&mut conn, &bytes).0;
    }
    assert_eq!(result.map_err(|e| e.code), Err(Code::ENHANCE_YOUR_CALM));
}

#[test]
fn header_blocks_keep_their_rules() {
    // Another frame inside a block.
    let mut conn = started(Limits::default());
    let mut bytes = headers(1, &GET[..2], 0);
    bytes.unsplit(data(1, b"x", 0));
    assert_eq!(
        feed(&mut conn, &bytes).0.map_err(|e| e.code),
        Err(Code::PROTOCOL_ERROR)
    );
    // A block past its bound, in CONTINUATIONs.
    let limits = Limits {
        max_header_block: 100,
        ..Limits::default()
    };
    let mut conn = started(limits);
    let mut bytes = headers(1, &GET[..2], 0);
    for _ in 0..3 {
        frame::put_head(40, frame::CONTINUATION, 0, 1, &mut bytes);
        bytes.put_slice(&[0x82; 40]);
    }
    assert_eq!(
        feed(&mut conn, &bytes).0.map_err(|e| e.code),
        Err(Code::ENHANCE_YOUR_CALM)
    );
    // An even stream, and DATA on an idle one.
    let mut conn = started(Limits::default());
    let even = headers(2, &GET, frame::END_HEADERS);
    assert!(feed(&mut conn, &even).0.is_err());
    let mut conn = started(Limits::default());
    assert!(feed(&mut conn, &data(9, b"x", 0)).0.is_err());
}

#[test]
fn trailers_end_a_body_and_a_closed_streams_block_keeps_the_table() {
    let mut conn = started(Limits::default());
    let mut bytes = headers(1, &GET, frame::END_HEADERS);
    bytes.unsplit(data(1, b"body", 0));
    // Trailers with a field indexed into the table: x: y.
    bytes.unsplit(headers(
        1,
        &[0x40, 1, b'x', 1, b'y'],
        frame::END_HEADERS | frame::END_STREAM,
    ));
    let (r, events) = feed(&mut conn, &bytes);
    assert!(r.is_ok());
    assert!(matches!(
        events[..],
        [
            Event::Request { .. },
            Event::Data { .. },
            Event::End { stream: 1 }
        ]
    ));
    conn.reset(1, Code::CANCEL);
    // A block on the closed stream adds z: w; the next request names both.
    let mut bytes = headers(
        1,
        &[0x40, 1, b'z', 1, b'w'],
        frame::END_HEADERS | frame::END_STREAM,
    );
    let mut block = GET.to_vec();
    block.extend_from_slice(&[0xbe, 0xbf]);
    bytes.unsplit(headers(3, &block, frame::END_HEADERS | frame::END_STREAM));
    let (r, events) = feed(&mut conn, &bytes);
    assert!(r.is_ok());
    let [
        Event::Request {
            stream: 3,
            head: Ok(req),
            ..
        },
    ] = &events[..]
    else {
        panic!("{events:?}");
    };
    assert_eq!(req.headers()["z"], "w");
    assert_eq!(req.headers()["x"], "y");
}

#[test]
fn pings_are_answered_and_a_flood_of_them_ends_the_connection() {
    let limits = Limits {
        max_control: 3,
        ..Limits::default()
    };
    let mut conn = started(limits);
    let mut ping = BytesMut::new();
    frame::put_head(8, frame::PING, 0, 0, &mut ping);
    ping.put_slice(b"12345678");
    assert!(feed(&mut conn, &ping).0.is_ok());
    let out = frames(conn.output());
    assert_eq!(
        (out[0].0.flags, &out[0].1[..]),
        (frame::ACK, &b"12345678"[..])
    );
    conn.second();
    let flood: Vec<u8> = ping.iter().copied().cycle().take(ping.len() * 4).collect();
    assert_eq!(
        feed(&mut conn, &flood).0.map_err(|e| e.code),
        Err(Code::ENHANCE_YOUR_CALM)
    );
}

#[test]
fn a_keepalive_ping_is_one_at_a_time_and_its_ack_is_an_event() {
    let mut conn = started(Limits::default());
    assert!(conn.ping(*b"keepaliv"));
    assert!(conn.ping(*b"second!!"), "still the first outstanding");
    let sent = frames(conn.output());
    assert_eq!(sent.len(), 1, "one PING until its ACK");
    assert_eq!(
        (sent[0].0.kind, &sent[0].1[..]),
        (frame::PING, &b"keepaliv"[..])
    );
    // An ACK of other bytes is not ours.
    let mut ack = BytesMut::new();
    frame::put_head(8, frame::PING, frame::ACK, 0, &mut ack);
    ack.put_slice(b"otherone");
    let (r, events) = feed(&mut conn, &ack);
    assert!(r.is_ok() && events.is_empty() && conn.pinging());
    let mut ack = BytesMut::new();
    frame::put_head(8, frame::PING, frame::ACK, 0, &mut ack);
    ack.put_slice(b"keepaliv");
    let (r, events) = feed(&mut conn, &ack);
    assert!(r.is_ok() && matches!(events[..], [Event::Pong]));
    assert!(!conn.pinging());
}
