//! Reading what `h3-client loop` (tests/src/bin/h3-client.rs) printed.

/// The `{"summary": ...}` line of `text`; the failed requests' lines are printed
/// to stderr under `what`, with the summary, for the test's log.
pub fn loop_summary(text: &str, what: &str) -> serde_json::Value {
    let summary = text
        .lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()?
                .get("summary")
                .cloned()
        })
        .unwrap_or_else(|| panic!("no summary from h3-client: {text}"));
    for l in text.lines().filter(|l| l.contains("\"ok\":false")) {
        eprintln!("  {l}");
    }
    eprintln!("HTTP/3 across {what}: {summary}");
    summary
}
