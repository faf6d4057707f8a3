use super::*;
use h1_codec::fields::Fields;

fn trace_of(head: &str, trusted: bool) -> Trace {
    let fields = Fields::of_head(head.as_bytes()).expect("a head");
    Trace::of(FieldsRef::Raw(&fields), trusted, Sample::OFF)
}

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_valid_traceparent_is_continued_with_the_routers_span() {
    let t = trace_of(
        &format!("GET / HTTP/1.1\r\nHost: a\r\ntraceparent: {PARENT}\r\ntracestate: k=v\r\n\r\n"),
        true,
    );
    let sent = std::str::from_utf8(t.traceparent()).expect("ascii");
    assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert!(
        sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{sent}"
    );
    assert!(sent.ends_with("-01"), "the flags kept: {sent}");
    assert_ne!(&sent[36..52], "00f067aa0ba902b7", "the router's own span");
    assert!(parse_traceparent(sent.as_bytes()).is_some(), "valid itself");
    assert!(t.keep_state);
}

#[test]
fn an_invalid_or_missing_traceparent_starts_a_trace_unsampled() {
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ] {
        let field = if bad.is_empty() {
            String::new()
        } else {
            format!("traceparent: {bad}\r\n")
        };
        let t = trace_of(
            &format!("GET / HTTP/1.1\r\nHost: a\r\n{field}tracestate: k=v\r\n\r\n"),
            true,
        );
        assert_ne!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736", "{bad}");
        assert!(t.traceparent().ends_with(b"-00"), "not sampled: {bad}");
        assert!(!t.keep_state, "tracestate dropped: {bad}");
        assert!(parse_traceparent(t.traceparent()).is_some(), "{bad}");
    }
    // A later version may be longer, with a dash after the known part.
    let later = format!("cc-{}-what", &PARENT[3..]);
    assert!(parse_traceparent(later.as_bytes()).is_some());
    // Two traceparent fields: invalid.
    let t = trace_of(
        &format!("GET / HTTP/1.1\r\ntraceparent: {PARENT}\r\ntraceparent: {PARENT}\r\n\r\n"),
        true,
    );
    assert_ne!(t.trace_id(), &PARENT[3..35]);
}

#[test]
fn the_clients_request_id_is_kept_only_if_trusted_and_plain() {
    let head = |id: &str| format!("GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: {id}\r\n\r\n");
    assert_eq!(
        trace_of(&head("abc-123"), true).request_id.as_str(),
        "abc-123"
    );
    assert_ne!(
        trace_of(&head("abc-123"), false).request_id.as_str(),
        "abc-123"
    );
    let long = "a".repeat(MAX_ID + 1);
    for bad in ["a b", "a\"b", "a,b", long.as_str()] {
        let t = trace_of(&head(bad), true);
        let id = t.request_id.as_str();
        assert_ne!(id, bad);
        assert_eq!(id, t.trace_id(), "made: the new trace's ID");
    }
}

#[test]
fn made_ids_differ() {
    let seen: std::collections::HashSet<String> = (0..1000)
        .map(|_| {
            let t = trace_of("GET / HTTP/1.1\r\nHost: a\r\n\r\n", true);
            format!(
                "{}{}",
                t.request_id.as_str(),
                t.traceparent().escape_ascii()
            )
        })
        .collect();
    assert_eq!(seen.len(), 1000);
}

/// Sampling (`traces.sample_ratio`): parent-based for a continued trace, by
/// ratio for a new one; the flag the member sees says which.
#[test]
fn new_traces_are_sampled_by_ratio_and_continued_ones_by_their_parent() {
    let head = |tp: &str| format!("GET / HTTP/1.1\r\nHost: a\r\n{tp}\r\n");
    let of = |head: &str, sample| {
        let fields = Fields::of_head(head.as_bytes()).expect("a head");
        Trace::of(FieldsRef::Raw(&fields), false, sample)
    };
    let new = head("");
    assert!(!of(&new, Sample::OFF).sampled());
    let all = of(&new, Sample::ratio(1.0));
    assert!(all.sampled() && all.traceparent().ends_with(b"-01"));
    assert_eq!(all.parent, None);
    let sampled = (0..10_000)
        .filter(|_| of(&new, Sample::ratio(0.25)).sampled())
        .count();
    assert!((2_200..2_800).contains(&sampled), "a quarter: {sampled}");
    // The parent decides, whatever the ratio.
    let yes = of(&head(&format!("traceparent: {PARENT}\r\n")), Sample::OFF);
    assert!(yes.sampled());
    assert_eq!(yes.parent, Some(*b"00f067aa0ba902b7"));
    let not = PARENT.replace("-01", "-00");
    let no = of(
        &head(&format!("traceparent: {not}\r\n")),
        Sample::ratio(1.0),
    );
    assert!(!no.sampled());
    // Flags other than 01 with the sampled bit set: 0b is sampled (bit 0).
    let odd = PARENT.replace("-01", "-0b");
    assert!(of(&head(&format!("traceparent: {odd}\r\n")), Sample::OFF).sampled());
}

#[test]
fn the_low_bits_are_the_trace_ids_last_sixteen_hex_digits() {
    let t = trace_of(
        &format!("GET / HTTP/1.1\r\nHost: a\r\ntraceparent: {PARENT}\r\n\r\n"),
        false,
    );
    assert_eq!(t.low_bits(), 0xa3ce_929d_0e0e_4736);
    let made = trace_of("GET / HTTP/1.1\r\nHost: a\r\n\r\n", false);
    let want = u64::from_str_radix(&made.trace_id()[16..], 16).expect("hex");
    assert_eq!(made.low_bits(), want);
}
