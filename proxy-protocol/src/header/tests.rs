use super::*;
use proptest::prelude::*;

fn header_len(buf: &[u8]) -> Option<(Version, usize, Option<SocketAddr>)> {
    match inspect(buf) {
        Inspect::Header {
            version,
            len,
            source,
            ..
        } => Some((version, len, source)),
        _ => None,
    }
}

fn v2(cmd: u8, fam: u8, body: &[u8]) -> Vec<u8> {
    let mut b = V2_SIGNATURE.to_vec();
    b.push(cmd);
    b.push(fam);
    b.extend_from_slice(&(body.len() as u16).to_be_bytes());
    b.extend_from_slice(body);
    b
}

#[test]
fn valid_v1_forms() {
    let tcp4 = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET /";
    let want = tcp4.windows(2).position(|w| w == b"\r\n").expect("crlf") + 2;
    assert_eq!(
        header_len(tcp4),
        Some((
            Version::V1,
            want,
            Some("192.168.0.1:56324".parse().expect("a"))
        ))
    );
    let tcp6 = b"PROXY TCP6 ::1 ::2 1 2\r\n";
    assert_eq!(
        header_len(tcp6),
        Some((Version::V1, tcp6.len(), Some("[::1]:1".parse().expect("a"))))
    );
    assert_eq!(
        header_len(b"PROXY UNKNOWN\r\n"),
        Some((Version::V1, 15, None))
    );
    let long = b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n";
    assert_eq!(header_len(long).map(|h| h.1), Some(long.len()));
}

#[test]
fn valid_v2_forms() {
    let mut ipv4 = vec![10, 0, 0, 1, 10, 0, 0, 2];
    ipv4.extend_from_slice(&1234u16.to_be_bytes());
    ipv4.extend_from_slice(&80u16.to_be_bytes());
    let h = v2(0x21, 0x11, &ipv4);
    assert_eq!(
        header_len(&h),
        Some((Version::V2, 28, Some("10.0.0.1:1234".parse().expect("a"))))
    );
    // With a NOOP TLV, and followed by payload.
    let mut with_tlv = ipv4.clone();
    with_tlv.extend_from_slice(&[0x04, 0x00, 0x01, 0x2a]);
    let mut h = v2(0x21, 0x11, &with_tlv);
    h.extend_from_slice(b"payload");
    assert_eq!(header_len(&h).map(|x| x.1), Some(32));
    // LOCAL, UNSPEC and AF_UNIX name no client.
    assert_eq!(
        header_len(&v2(0x20, 0x00, &[])),
        Some((Version::V2, 16, None))
    );
    assert_eq!(
        header_len(&v2(0x21, 0x00, &[])),
        Some((Version::V2, 16, None))
    );
    assert_eq!(
        header_len(&v2(0x21, 0x31, &[0u8; 216])).map(|x| x.2),
        Some(None)
    );
    let mut ipv6 = vec![0u8; 36];
    ipv6[15] = 1;
    ipv6[31] = 2;
    assert!(header_len(&v2(0x21, 0x21, &ipv6)).is_some());
}

#[test]
fn garbage_is_invalid_not_incomplete() {
    let long_v1 = [b"PROXY TCP4 ".as_slice(), &[b'1'; 120]].concat();
    for bad in [
        &long_v1[..],
        b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2\n",
        b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2\rX",
        b"PROXY TCP4  1.1.1.1 2.2.2.2 1 2\r\n",
        b"PROXY TCP4 010.0.0.1 2.2.2.2 1 2\r\n",
        b"PROXY TCP4 1.1.1.1 2.2.2.2 1 0443\r\n",
        b"PROXY TCP4 1.1.1.1 2.2.2.2 1 65536\r\n",
        b"PROXY TCP6 1.1.1.1 2.2.2.2 1 2\r\n",
        b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2 3\r\n",
        b"PROXY TCP4 \xff\xfe 2.2.2.2 1 2\r\n",
        b"PROXY tcp4 1.1.1.1 2.2.2.2 1 2\r\n",
    ] {
        assert!(
            matches!(inspect(bad), Inspect::Invalid(_)),
            "{:?}: {:?}",
            String::from_utf8_lossy(bad),
            inspect(bad)
        );
    }
    let ipv4 = [10u8, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2];
    for bad in [
        v2(0x11, 0x11, &ipv4),       // version 1
        v2(0x22, 0x11, &ipv4),       // command 2
        v2(0x21, 0x41, &ipv4),       // family 4
        v2(0x21, 0x11, &ipv4[..8]),  // shorter than the address block
        v2(0x21, 0x11, &[0u8; 300]), // over our cap
    ] {
        assert!(
            matches!(inspect(&bad), Inspect::Invalid(_)),
            "{bad:?}: {:?}",
            inspect(&bad)
        );
    }
    // One wrong signature byte: not a header at all (payload).
    let mut sig = v2(0x21, 0x11, &ipv4);
    sig[3] = b'X';
    assert_eq!(inspect(&sig), Inspect::NotHeader);
}

#[test]
fn prefixes_are_incomplete_and_the_rest_is_payload() {
    let full = v2(0x21, 0x11, &[10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2]);
    for cut in [1, 12, 13, 15, 20] {
        assert_eq!(
            inspect(&full[..cut]),
            Inspect::Incomplete,
            "v2 cut at {cut}"
        );
    }
    for cut in [
        b"P".as_slice(),
        b"PROXY",
        b"PROXY TCP4 1.1.1.1",
        b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2\r",
    ] {
        assert_eq!(inspect(cut), Inspect::Incomplete, "{cut:?}");
    }
    for payload in [
        b"GET / HTTP/1.1\r\n".as_slice(),
        b"SSH-2.0-x\r\n",
        b"\r\n\r\nX",
        b"PROXZ",
    ] {
        assert_eq!(inspect(payload), Inspect::NotHeader, "{payload:?}");
    }
}

#[test]
fn encoded_headers_parse_back() {
    let s: SocketAddr = "10.1.2.3:4567".parse().expect("a");
    let d: SocketAddr = "10.9.8.7:61000".parse().expect("a");
    let v1 = encode(Version::V1, s, d);
    assert_eq!(v1, b"PROXY TCP4 10.1.2.3 10.9.8.7 4567 61000\r\n");
    for v in [Version::V1, Version::V2] {
        let h = encode(v, s, d);
        assert_eq!(header_len(&h), Some((v, h.len(), Some(s))));
        let s6: SocketAddr = "[2001:db8::1]:1".parse().expect("a");
        let d6: SocketAddr = "[2001:db8::2]:2".parse().expect("a");
        let h6 = encode(v, s6, d6);
        assert_eq!(header_len(&h6).map(|x| x.2), Some(Some(s6)));
        // Mixed families: a header that names no client, still valid.
        let mixed = encode(v, s, d6);
        assert_eq!(header_len(&mixed).map(|x| x.2), Some(None));
        // An IPv4-mapped client is written as IPv4.
        let mapped: SocketAddr = "[::ffff:10.1.2.3]:4567".parse().expect("a");
        assert_eq!(
            header_len(&encode(v, mapped, d)).map(|x| x.2),
            Some(Some(s))
        );
    }
}

proptest! {
    /// Untrusted bytes: never a panic, a header never claims more bytes than given
    /// or more than the caps, and an incomplete answer only comes under the caps.
    #[test]
    fn inspect_is_total_and_bounded(bytes in proptest::collection::vec(any::<u8>(), 0..400), prefix in 0usize..3) {
        let mut buf = match prefix {
            0 => b"PROXY ".to_vec(),
            1 => V2_SIGNATURE.to_vec(),
            _ => Vec::new(),
        };
        buf.extend_from_slice(&bytes);
        match inspect(&buf) {
            Inspect::Header { len, version, .. } => {
                prop_assert!(len <= buf.len());
                let cap = if version == Version::V1 { V1_MAX } else { V2_MAX };
                prop_assert!(len <= cap);
            }
            Inspect::Incomplete => prop_assert!(buf.len() < V2_MAX.max(V1_MAX)),
            Inspect::NotHeader | Inspect::Invalid(_) => {}
        }
    }

    /// Splitting a valid header anywhere gives Incomplete, then the same header.
    #[test]
    fn any_split_of_a_header_is_incomplete_first(a in any::<[u8; 4]>(), p in 1u16.., cut in 0usize..60, v2 in any::<bool>()) {
        let s = SocketAddr::from((a, p));
        let d = SocketAddr::from(([10, 0, 0, 1], 80));
        let h = encode(if v2 { Version::V2 } else { Version::V1 }, s, d);
        let cut = cut.min(h.len() - 1);
        prop_assert_eq!(inspect(&h[..cut]), Inspect::Incomplete);
        prop_assert_eq!(header_len(&h).map(|x| x.2), Some(Some(s)));
    }
}
