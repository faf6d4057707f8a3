use super::*;

fn head_of(kind: u8, flags: u8, stream: u32, len: usize) -> Head {
    Head {
        len: len as u32,
        kind,
        flags,
        stream,
    }
}

#[test]
fn a_head_reads_back_as_written_and_drops_the_reserved_bit() {
    let mut out = BytesMut::new();
    put_head(0x12_3456, HEADERS, END_HEADERS | END_STREAM, 7, &mut out);
    assert_eq!(
        head(&out),
        Some(head_of(HEADERS, END_HEADERS | END_STREAM, 7, 0x12_3456))
    );
    assert_eq!(head(&out[..8]), None, "not all nine bytes");
    let reserved = [0, 0, 0, DATA, 0, 0x80, 0, 0, 1];
    assert_eq!(head(&reserved).map(|h| h.stream), Some(1));
}

#[test]
fn padding_and_priority_are_left_out_and_checked() {
    let padded = head_of(DATA, PADDED, 1, 6);
    assert_eq!(
        content_range(&padded, &[2, b'a', b'b', b'c', 0, 0]),
        Ok(1..4)
    );
    let too_much = content_range(&padded, &[6, b'a', 0, 0, 0, 0]).expect_err("pad");
    assert_eq!(
        (too_much.code, too_much.connection),
        (Code::PROTOCOL_ERROR, true)
    );
    assert!(content_range(&padded, &[]).is_err(), "no pad length");
    let both = head_of(HEADERS, PADDED | PRIORITY_FLAG, 1, 9);
    assert_eq!(
        content_range(&both, &[1, 0, 0, 0, 3, 9, 0x82, 0x84, 0]),
        Ok(6..8)
    );
    let short = head_of(HEADERS, PRIORITY_FLAG, 1, 3);
    assert_eq!(
        content_range(&short, &[0, 0, 0]).map_err(|e| e.code),
        Err(Code::FRAME_SIZE_ERROR)
    );
}

#[test]
fn settings_are_read_and_their_values_checked() {
    let mut out = BytesMut::new();
    put_settings(
        &[
            (0x3, 100),
            (0x4, 65_535),
            (0x5, 16_384),
            (0x99, 1),
            (0x8, 1),
        ],
        &mut out,
    );
    let h = head(&out).expect("head");
    assert_eq!(
        settings(&h, &out[HEAD_LEN..]),
        Ok(vec![
            Setting::MaxConcurrentStreams(100),
            Setting::InitialWindowSize(65_535),
            Setting::MaxFrameSize(16_384),
            Setting::EnableConnectProtocol(true),
        ])
    );
    let bad = |id: u16, v: u32| {
        let mut p = id.to_be_bytes().to_vec();
        p.extend_from_slice(&v.to_be_bytes());
        settings(&head_of(SETTINGS, 0, 0, 6), &p).map_err(|e| e.code)
    };
    assert_eq!(bad(0x2, 2), Err(Code::PROTOCOL_ERROR));
    assert_eq!(bad(0x4, 1 << 31), Err(Code::FLOW_CONTROL_ERROR));
    assert_eq!(bad(0x5, 100), Err(Code::PROTOCOL_ERROR));
    assert_eq!(bad(0x5, 1 << 24), Err(Code::PROTOCOL_ERROR));
    let odd = settings(&head_of(SETTINGS, 0, 0, 5), &[0; 5]).map_err(|e| e.code);
    assert_eq!(odd, Err(Code::FRAME_SIZE_ERROR));
    let on_stream = settings(&head_of(SETTINGS, 0, 1, 0), &[]).map_err(|e| e.code);
    assert_eq!(on_stream, Err(Code::PROTOCOL_ERROR));
    let ack = settings(&head_of(SETTINGS, ACK, 0, 6), &[0; 6]).map_err(|e| e.code);
    assert_eq!(ack, Err(Code::FRAME_SIZE_ERROR));
}

#[test]
fn control_frames_are_read_and_their_sizes_checked() {
    let mut out = BytesMut::new();
    put_window_update(3, 1000, &mut out);
    put_rst_stream(3, Code::CANCEL, &mut out);
    put_ping_ack(b"12345678", &mut out);
    put_goaway(9, Code::ENHANCE_YOUR_CALM, &mut out);
    let mut at = 0;
    let mut next = || {
        let h = head(&out[at..]).expect("head");
        let payload = out[at + HEAD_LEN..at + HEAD_LEN + h.len as usize].to_vec();
        at += HEAD_LEN + h.len as usize;
        (h, payload)
    };
    let (h, p) = next();
    assert_eq!(window_update(&h, &p), Ok(1000));
    let (h, p) = next();
    assert_eq!(rst_stream(&h, &p), Ok(Code::CANCEL));
    let (h, p) = next();
    assert_eq!((h.flags, ping(&h, &p)), (ACK, Ok(*b"12345678")));
    let (h, p) = next();
    assert_eq!(goaway(&h, &p), Ok((9, Code::ENHANCE_YOUR_CALM)));
    let zero = window_update(&head_of(WINDOW_UPDATE, 0, 3, 4), &[0; 4]).expect_err("0");
    assert_eq!((zero.code, zero.connection), (Code::PROTOCOL_ERROR, false));
    let zero = window_update(&head_of(WINDOW_UPDATE, 0, 0, 4), &[0; 4]).expect_err("0");
    assert!(zero.connection, "on the connection's window");
    assert!(ping(&head_of(PING, 0, 0, 7), &[0; 7]).is_err());
    assert!(rst_stream(&head_of(RST_STREAM, 0, 0, 4), &[0; 4]).is_err());
    assert_eq!(priority(&head_of(PRIORITY, 0, 1, 5), &[0; 5]), Ok(()));
    assert!(
        !priority(&head_of(PRIORITY, 0, 1, 4), &[0; 4])
            .expect_err("4")
            .connection
    );
}

#[test]
fn a_long_header_block_goes_on_in_continuations() {
    let block: Vec<u8> = (0..40).collect();
    let mut out = BytesMut::new();
    put_headers(5, &block, true, 16, &mut out);
    let mut at = 0;
    let mut got = Vec::new();
    let mut heads = Vec::new();
    while at < out.len() {
        let h = head(&out[at..]).expect("head");
        got.extend_from_slice(&out[at + HEAD_LEN..at + HEAD_LEN + h.len as usize]);
        at += HEAD_LEN + h.len as usize;
        heads.push((h.kind, h.flags, h.len));
    }
    assert_eq!(got, block);
    assert_eq!(
        heads,
        [
            (HEADERS, END_STREAM, 16),
            (CONTINUATION, 0, 16),
            (CONTINUATION, END_HEADERS, 8)
        ]
    );
    let mut out = BytesMut::new();
    put_headers(5, &[], false, 16, &mut out);
    assert_eq!(head(&out), Some(head_of(HEADERS, END_HEADERS, 5, 0)));
    assert_eq!(PREFACE.len(), 24);
}
