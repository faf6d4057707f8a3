//! `cluster_wire`: the line protocol between portproxies of a cluster
//! (`portproxy::cluster::wire`), both ends: the request line a server reads on
//! its proxy port, and the answer line a client reads back.
//!
//! Properties: each reader's verdict is the same for the bytes whole and split in
//! two anywhere (the reader is fed as the proxies feed it: never more than
//! it asks for), and never reads past what it was given; a request line it accepts
//! names the port a v1 PROXY header reader (`ppp`) finds as its destination; what
//! `encode` and `request` write reads back as itself.

use portproxy::cluster::wire::{
    self, Answer, AnswerRead, MAX_ANSWER, RequestRead, read_answer, read_request,
};

/// A verdict, fed `stream` as a proxy reads it: in `pieces`, each read capped at
/// what the reader asks for.
fn fed<T: PartialEq + std::fmt::Debug>(
    pieces: &[&[u8]],
    read: impl Fn(&[u8]) -> T,
    more: impl Fn(&T) -> Option<usize>,
) -> (T, usize) {
    let mut buf: Vec<u8> = Vec::new();
    let mut verdict = read(&buf);
    for piece in pieces {
        let mut piece = *piece;
        while !piece.is_empty() {
            let Some(room) = more(&verdict) else {
                return (verdict, buf.len());
            };
            let n = room.min(piece.len());
            buf.extend_from_slice(&piece[..n]);
            piece = &piece[n..];
            verdict = read(&buf);
        }
    }
    (verdict, buf.len())
}

fn request_more(r: &RequestRead) -> Option<usize> {
    match r {
        RequestRead::More(n) => Some(*n),
        _ => None,
    }
}

fn answer_more(r: &AnswerRead) -> Option<usize> {
    match r {
        AnswerRead::More(n) => Some(*n),
        _ => None,
    }
}

pub fn cluster_wire(data: &[u8]) {
    let Some((at, stream)) = crate::split(data) else {
        return;
    };
    let (a, b) = stream.split_at(at);
    let whole = fed(&[stream], read_request, request_more);
    assert_eq!(
        fed(&[a, b], read_request, request_more).0,
        whole.0,
        "request split at {at}"
    );
    if let (RequestRead::Port { len, cluster_port }, read) = whole {
        assert!(len <= read, "the request line ends past what was read");
        let line = std::str::from_utf8(&stream[..len]).expect("a v1 header is ASCII");
        let port = match ppp::v1::Header::try_from(line).map(|h| h.addresses) {
            Ok(ppp::v1::Addresses::Tcp4(a)) => a.destination_port,
            Ok(ppp::v1::Addresses::Tcp6(a)) => a.destination_port,
            other => panic!("ppp reads {line:?} as {other:?}"),
        };
        assert_eq!(port, cluster_port);
        assert!(len <= 107, "a v1 line is at most 107 bytes");
    }
    let whole = fed(&[stream], read_answer, answer_more);
    assert_eq!(
        fed(&[a, b], read_answer, answer_more).0,
        whole.0,
        "answer split at {at}"
    );
    match whole {
        (AnswerRead::Line(_, len), read) => assert!(len <= read && len <= MAX_ANSWER),
        (AnswerRead::TooLong, read) => assert_eq!(read, MAX_ANSWER),
        (AnswerRead::More(_), read) => assert_eq!(read, stream.len()),
    }
    // What we write reads back as itself.
    let port = u16::from_be_bytes([data[0], *data.last().unwrap_or(&0)]);
    let line = wire::request(port);
    assert!(
        matches!(read_request(line.as_bytes()), RequestRead::Port { cluster_port, .. } if cluster_port == port),
        "{line:?}"
    );
    for answer in [Answer::Busy, Answer::Accepted(None)] {
        let bytes = wire::encode(answer);
        assert_eq!(
            read_answer(bytes),
            AnswerRead::Line(Some(answer), bytes.len())
        );
    }
}
