//! Configuration-error plumbing shared by the router and the portproxy.
//!
//! Both programs refuse a bad file with one line an operator can act on:
//! `file:line: field: problem` (`router.yaml:7: listen.http: invalid socket address`).
//! This crate owns that error type and the YAML helpers that find the line and the
//! dotted field of a problem; each program keeps its own config types and rules.
//!
//! Not here: what any key means, defaults, validation rules.

use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;

/// A configuration error: where it is and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: String,
    /// 1-based; `None` when the error is about the file as a whole.
    pub line: Option<u64>,
    /// Dotted path of the field (`listen.http`), or empty.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

// === impl ConfigError ===

impl ConfigError {
    /// An error about the file as a whole (unreadable, empty where it must not be).
    pub fn whole_file(file: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.into(),
            line: None,
            field: String::new(),
            message: message.into(),
        }
    }

    /// An error on one line of a line-based file.
    pub fn at_line(
        file: impl Into<String>,
        line: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: file.into(),
            line: Some(line as u64),
            field: field.into(),
            message: message.into(),
        }
    }

    /// A validation error about the YAML field at dotted `path` in `text`: the line is
    /// where that key is written, if it is (a defaulted field has none).
    pub fn at_yaml_field(
        text: &str,
        file: impl Into<String>,
        path: &str,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            file: file.into(),
            line: line_of(text, path).map(|l| l as u64),
            field: path.into(),
            message: message.into(),
        }
    }
}

/// The first line of a secret file (a pass phrase, a passcode, a token: what the
/// `*_file` settings name), without its line ending; empty for an empty file.
pub fn first_line(path: &Path) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(path)?
        .lines()
        .next()
        .unwrap_or("")
        .to_string())
}

/// Reads a file as UTF-8 text; the error names the file.
pub fn read_text(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|e| ConfigError::whole_file(path.display().to_string(), e.to_string()))
}

/// Deserializes YAML `text` (unknown keys are the type's business: use
/// `deny_unknown_fields`); a syntax or type error names its line and dotted field.
pub fn from_yaml<T: DeserializeOwned>(text: &str, file: &str) -> Result<T, ConfigError> {
    serde_saphyr::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        let field = line
            .and_then(|l| field_at_line(text, l as usize))
            .unwrap_or_default();
        ConfigError {
            file: file.into(),
            line,
            field,
            message: first_line_message(&e.to_string()),
        }
    })
}

/// serde-saphyr's message is `error: line L column C: MESSAGE` followed by a source
/// excerpt; keep the message.
fn first_line_message(full: &str) -> String {
    let first = full.lines().next().unwrap_or(full);
    let rest = first.strip_prefix("error: ").unwrap_or(first);
    match rest.split_once(": ") {
        Some((loc, msg)) if loc.starts_with("line ") => msg.to_string(),
        _ => rest.to_string(),
    }
}

/// The dotted key path of the block-style mapping key on `line` (1-based), found by
/// walking up to less-indented keys.
fn field_at_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let (indent, key) = key_of(lines.get(line.checked_sub(1)?)?)?;
    let mut path = vec![key];
    let mut want = indent;
    for l in lines[..line - 1].iter().rev() {
        if want == 0 {
            break;
        }
        if let Some((i, k)) = key_of(l)
            && i < want
        {
            path.push(k);
            want = i;
        }
    }
    path.reverse();
    Some(path.join("."))
}

/// The line (1-based) where the dotted `path` is written, if it is.
fn line_of(text: &str, path: &str) -> Option<usize> {
    let want: Vec<&str> = path.split('.').collect();
    (1..=text.lines().count())
        .find(|&n| field_at_line(text, n).is_some_and(|p| p.split('.').eq(want.iter().copied())))
}

/// `(indent, key)` of a `key: ...` line, skipping comments and list items.
fn key_of(line: &str) -> Option<(usize, &str)> {
    let trimmed = line.trim_start();
    if trimmed.starts_with('#') || trimmed.starts_with('-') {
        return None;
    }
    let (key, _) = trimmed.split_once(':')?;
    let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
    if key.is_empty() || key.contains(' ') {
        return None;
    }
    Some((line.len() - trimmed.len(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct T {
        a: Inner,
    }
    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        port: u16,
    }

    #[test]
    fn a_type_error_names_line_and_dotted_field() {
        let text = "# c\na:\n  port: 70000\n";
        let e = from_yaml::<T>(text, "x.yaml").expect_err("out of range");
        assert_eq!(e.line, Some(3));
        assert_eq!(e.field, "a.port");
        assert!(e.to_string().starts_with("x.yaml:3: a.port: "), "{e}");
    }

    #[test]
    fn a_validation_error_finds_the_line_of_its_field() {
        let text = "a:\n  port: 0\n";
        let e = ConfigError::at_yaml_field(text, "x.yaml", "a.port", "must not be 0");
        assert_eq!(e.to_string(), "x.yaml:2: a.port: must not be 0");
    }

    #[test]
    fn whole_file_and_line_errors_render_without_missing_parts() {
        assert_eq!(ConfigError::whole_file("f", "gone").to_string(), "f: gone");
        assert_eq!(
            ConfigError::at_line("f", 4, "", "bad").to_string(),
            "f:4: bad"
        );
    }
}
