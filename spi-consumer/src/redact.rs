//! Secrets taken out of a processed message body before it is kept on disk.
//!
//! Why: an `add_ssl` event carries the alias's private key (and perhaps its pass
//! phrase). Once the event is applied, the key lives in the routing state (mode
//! 0700 directory); the copy kept in the spool's `done/` or `failed/` for the
//! operator's eyes must not be a second, forgotten place where it can be read. The
//! kept file is for reading, not for replaying: it stays the message as sent, with
//! each PEM private-key block's contents and each pass phrase replaced by
//! `[redacted]`, so the action, app and alias are still there.
//!
//! Works on the text as sent, whatever the YAML style: a PEM block is found by its
//! armour lines (`-----BEGIN … PRIVATE KEY-----` … `-----END`), which every style
//! (block literal, quoted with `\n` escapes) keeps verbatim. A key block with no end
//! line redacts everything after its start.

/// What replaces a secret.
const REDACTED: &str = "[redacted]";

/// The body with its secrets replaced, or `None` when it holds none (keep it as is).
pub fn secrets(body: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(body);
    let keys = private_keys(&text);
    let phrases = pass_phrases(keys.as_deref().unwrap_or(&text));
    phrases.or(keys).map(String::into_bytes)
}

/// Each `-----BEGIN … PRIVATE KEY-----` block's contents replaced.
fn private_keys(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(begin) = rest.find("-----BEGIN ") {
        let after = &rest[begin + "-----BEGIN ".len()..];
        let Some(label_end) = after.find("-----") else {
            break;
        };
        let label = &after[..label_end];
        let body_start = begin + "-----BEGIN ".len() + label_end + "-----".len();
        if !label.contains("PRIVATE KEY") {
            out.push_str(&rest[..body_start]);
            rest = &rest[body_start..];
            continue;
        }
        changed = true;
        out.push_str(&rest[..body_start]);
        out.push_str(REDACTED);
        match rest[body_start..].find("-----END ") {
            Some(end) => rest = &rest[body_start + end..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// The value after each `pass_phrase` key (to the end of its line) replaced.
fn pass_phrases(text: &str) -> Option<String> {
    if !text.contains("pass_phrase") {
        return None;
    }
    let mut changed = false;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.find("pass_phrase").and_then(|at| {
            let key_end = at + "pass_phrase".len();
            line[key_end..].find(':').map(|c| key_end + c + 1)
        }) {
            Some(value) => {
                let (head, tail) = line.split_at(value);
                let newline = if tail.ends_with('\n') { "\n" } else { "" };
                if tail.trim().is_empty() {
                    out.push_str(line);
                } else {
                    changed = true;
                    out.push_str(head);
                    out.push(' ');
                    out.push_str(REDACTED);
                    out.push_str(newline);
                }
            }
            None => out.push_str(line),
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_blocks_and_pass_phrases_go_the_rest_stays() {
        let body = "--- !ruby/hash\n:action: :add_ssl\n:alias: www.shop.test\n\
                    :ssl: \"-----BEGIN CERTIFICATE-----\\nMIIcert\\n-----END CERTIFICATE-----\\n\"\n\
                    :private_key: ! '-----BEGIN RSA PRIVATE KEY-----\n\n  MIIsecret\n\n  -----END RSA PRIVATE KEY-----\n\n'\n\
                    :pass_phrase: correct-horse-battery\n";
        let out = String::from_utf8(secrets(body.as_bytes()).expect("redacted")).expect("utf8");
        assert!(
            !out.contains("MIIsecret") && !out.contains("correct-horse"),
            "{out}"
        );
        assert!(out.contains("MIIcert"), "the certificate is public: {out}");
        assert!(out.contains(":alias: www.shop.test"));
        assert!(
            out.contains("-----BEGIN RSA PRIVATE KEY-----[redacted]-----END RSA PRIVATE KEY-----")
        );
        assert!(out.contains(":pass_phrase: [redacted]\n"));
    }

    #[test]
    fn the_fixtures_keep_no_secret() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/spi-events");
        for name in [
            "08-add_ssl.yaml",
            "10-add_ssl-pass_phrase.yaml",
            "31-ruby2x-add_ssl.yaml",
        ] {
            let body = std::fs::read(dir.join(name)).expect("fixture");
            let out = String::from_utf8(secrets(&body).expect(name)).expect("utf8");
            assert!(!out.contains("correct-horse-battery"), "{name}");
            // Nothing but the redaction between each key's armour lines.
            for block in out.split("PRIVATE KEY-----").skip(1).step_by(2) {
                assert!(block.starts_with(REDACTED), "{name}: {block:.60}");
            }
        }
    }

    #[test]
    fn no_secret_no_copy_and_an_unended_key_goes_whole() {
        assert_eq!(secrets(b":action: :add_alias\n"), None);
        assert_eq!(secrets(b":pass_phrase:\n"), None);
        let out = secrets(b"a: -----BEGIN PRIVATE KEY-----MIIsecret").expect("redacted");
        assert_eq!(out, b"a: -----BEGIN PRIVATE KEY-----[redacted]");
    }
}
