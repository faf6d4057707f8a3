use proptest::prelude::*;

use super::*;

fn decode_all(codec: &mut Codec, bytes: &[u8]) -> Result<Vec<Item>, FrameError> {
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(item) = codec.decode(&mut buf)? {
        out.push(item);
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    Ok(out)
}

/// Feeds `bytes` in pieces cut at `cuts`, as a socket might deliver them.
fn decode_split(bytes: &[u8], cuts: &[usize]) -> Result<Vec<Item>, FrameError> {
    let mut codec = Codec::default();
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut last = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.push(bytes.len());
    cuts.sort();
    for cut in cuts {
        buf.extend_from_slice(&bytes[last..cut]);
        last = cut;
        while let Some(item) = codec.decode(&mut buf)? {
            out.push(item);
        }
    }
    if let Some(item) = codec.decode_eof(&mut buf)? {
        out.push(item);
    }
    Ok(out)
}

fn encode(item: Item) -> BytesMut {
    let mut out = BytesMut::new();
    Codec::default().encode(item, &mut out).expect("encode");
    out
}

fn frame(item: &Item) -> &Frame {
    match item {
        Item::Frame(f) => f,
        Item::HeartBeat => panic!("heart-beat"),
    }
}

#[test]
fn message_with_content_length_and_nul_in_body() {
    let wire = b"MESSAGE\ndestination:/queue/a\nmessage-id:1\ncontent-length:5\n\na\0b\0c\0\n";
    let items = decode_all(&mut Codec::default(), wire).expect("decode");
    assert_eq!(items.len(), 2);
    let f = frame(&items[0]);
    assert_eq!(f.command, Command::Message);
    assert_eq!(f.get("destination"), Some("/queue/a"));
    assert_eq!(&f.body[..], b"a\0b\0c");
    assert_eq!(items[1], Item::HeartBeat, "EOL after a frame");
}

#[test]
fn body_by_nul_and_crlf_lines() {
    let wire = b"RECEIPT\r\nreceipt-id:77\r\n\r\n\0\r\n\n";
    let items = decode_all(&mut Codec::default(), wire).expect("decode");
    assert_eq!(frame(&items[0]).get("receipt-id"), Some("77"));
    assert_eq!(&items[1..], [Item::HeartBeat, Item::HeartBeat]);
}

#[test]
fn several_frames_in_one_read_and_one_byte_at_a_time() {
    let mut wire = BytesMut::new();
    for i in 0..3 {
        wire.extend_from_slice(&encode(Item::Frame(
            Frame::new(Command::Message)
                .header("message-id", i.to_string())
                .body(format!("body {i}")),
        )));
        wire.extend_from_slice(b"\n");
    }
    let whole = decode_split(&wire, &[]).expect("whole");
    let cuts: Vec<usize> = (0..wire.len()).collect();
    let bytewise = decode_split(&wire, &cuts).expect("bytewise");
    assert_eq!(whole, bytewise);
    assert_eq!(
        whole.iter().filter(|i| matches!(i, Item::Frame(_))).count(),
        3
    );
}

#[test]
fn header_escaping_round_trips_except_in_connect() {
    let f = Frame::new(Command::Send).header("x:y", "a\\b\nc\rd:e");
    let wire = encode(Item::Frame(f));
    assert!(
        wire.starts_with(b"SEND\nx\\cy:a\\\\b\\nc\\rd\\ce\n"),
        "{wire:?}"
    );
    let back = decode_all(&mut Codec::default(), &wire).expect("decode");
    assert_eq!(frame(&back[0]).get("x:y"), Some("a\\b\nc\rd:e"));
    // CONNECTED values are literal: a backslash stays a backslash.
    let back = decode_all(&mut Codec::default(), b"CONNECTED\nserver:a\\b\n\n\0").expect("decode");
    assert_eq!(frame(&back[0]).get("server"), Some("a\\b"));
}

#[test]
fn first_repeated_header_wins() {
    let back = decode_all(&mut Codec::default(), b"MESSAGE\nfoo:1\nfoo:2\n\n\0").expect("decode");
    assert_eq!(frame(&back[0]).get("foo"), Some("1"));
}

#[test]
fn malformed_input_is_an_error() {
    let cases: &[(&[u8], FrameError)] = &[
        (b"BOGUS\n\n\0", FrameError::UnknownCommand("BOGUS".into())),
        (
            b"MESSAGE\nnocolon\n\n\0",
            FrameError::BadHeader("nocolon".into()),
        ),
        (
            b"MESSAGE\na:b\\x\n\n\0",
            FrameError::BadEscape("b\\x".into()),
        ),
        (
            b"MESSAGE\ncontent-length:x\n\n\0",
            FrameError::BadContentLength("x".into()),
        ),
        (b"MESSAGE\ncontent-length:1\n\nab\0", FrameError::MissingNul),
        (b"MESSAGE\na:\xff\n\n\0", FrameError::NotUtf8),
    ];
    for (wire, want) in cases {
        assert_eq!(
            decode_all(&mut Codec::default(), wire).as_ref().err(),
            Some(want),
            "{:?}",
            String::from_utf8_lossy(wire)
        );
    }
}

#[test]
fn limits_are_enforced_before_buffering_everything() {
    let limits = Limits {
        max_head: 64,
        max_headers: 2,
        max_body: 16,
    };
    let mut c = Codec::new(limits);
    let mut buf = BytesMut::from(&[b'A'; 100][..]);
    assert_eq!(c.decode(&mut buf), Err(FrameError::HeadTooLarge(64)));
    let mut c = Codec::new(limits);
    let mut buf = BytesMut::from(&b"MESSAGE\na:1\nb:2\nc:3\n\n\0"[..]);
    assert_eq!(c.decode(&mut buf), Err(FrameError::TooManyHeaders(2)));
    let mut c = Codec::new(limits);
    let mut buf = BytesMut::from(&b"MESSAGE\ncontent-length:999999\n\n"[..]);
    assert_eq!(c.decode(&mut buf), Err(FrameError::BodyTooLarge(16)));
    let mut c = Codec::new(limits);
    let mut buf = BytesMut::from(&b"MESSAGE\n\n0123456789abcdefXYZ"[..]);
    assert_eq!(c.decode(&mut buf), Err(FrameError::BodyTooLarge(16)));
}

#[test]
fn eof_mid_frame_is_an_error_and_clean_eof_is_none() {
    let mut c = Codec::default();
    let mut buf = BytesMut::from(&b"MESSAGE\nfoo:1\n"[..]);
    assert_eq!(c.decode_eof(&mut buf), Err(FrameError::Truncated));
    let mut buf = BytesMut::new();
    assert_eq!(Codec::default().decode_eof(&mut buf), Ok(None));
}

#[test]
fn encoder_writes_content_length_from_the_body() {
    let wire = encode(Item::Frame(
        Frame::new(Command::Send)
            .header("destination", "/queue/q")
            .header("content-length", "999")
            .body(&b"hello"[..]),
    ));
    assert_eq!(
        &wire[..],
        b"SEND\ndestination:/queue/q\ncontent-length:5\n\nhello\0"
    );
    assert_eq!(&encode(Item::HeartBeat)[..], b"\n");
}

fn arb_text() -> impl Strategy<Value = String> {
    // Any characters, including the ones that need escaping.
    proptest::string::string_regex("[a-z:\\\\\\n\\r é-]{0,12}").expect("regex")
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    (
        prop_oneof![
            Just(Command::Send),
            Just(Command::Message),
            Just(Command::Ack),
            Just(Command::Error)
        ],
        proptest::collection::vec(
            (
                arb_text().prop_filter("name", |n| !n.is_empty() && n != "content-length"),
                arb_text(),
            ),
            0..6,
        ),
        proptest::collection::vec(any::<u8>(), 0..300),
    )
        .prop_map(|(command, headers, body)| Frame {
            command,
            headers,
            body: Bytes::from(body),
        })
}

proptest! {
    #[test]
    fn frames_round_trip_across_any_read_boundaries(
        frames in proptest::collection::vec(arb_frame(), 1..4),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut wire = BytesMut::new();
        for f in &frames {
            wire.extend_from_slice(&encode(Item::Frame(f.clone())));
        }
        let got = decode_split(&wire, &cuts).expect("decodes");
        let got: Vec<Frame> = got
            .into_iter()
            .filter_map(|i| match i { Item::Frame(mut f) => {
                f.headers.retain(|(n, _)| n != "content-length");
                Some(f)
            } Item::HeartBeat => None })
            .collect();
        // Repeated names: the decoder keeps all, in order, like the encoder wrote them.
        prop_assert_eq!(got, frames);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut c = Codec::new(Limits { max_head: 256, max_headers: 8, max_body: 256 });
        let mut buf = BytesMut::from(&bytes[..]);
        for _ in 0..64 {
            match c.decode(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    }
}
