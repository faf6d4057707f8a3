//! The common shape of a routing event, read without the general YAML parser.
//!
//! Why: serde-saphyr takes about 15 µs of CPU for a 330-byte `add_public_endpoint`
//! (`bench-events --consume`), more than half of what the router spent on an event at
//! 100 000 apps; this reader takes well under one.
//!
//! What it reads: the block mapping Psych writes for these hashes, one `:key: value`
//! a line, and the two block sequences (`- value` lines; `- frontend: x` with an
//! indented `  backend: y` under `:mappings:`). A value is a plain scalar of a safe
//! alphabet (letters, digits, `_ . : / -`), or the same in single or double quotes,
//! or `''`. Anything else is not read here: a comment, a literal block, an escape,
//! a space inside a value, a flow collection, an anchor or tag, a key seen twice or
//! unknown, a null, a CR: then [`read`] says `None` and the general parser reads the
//! message, so no message is read differently, only faster. The `routing_event`
//! fuzz target holds this: wherever this reader reads a message, serde-saphyr reads
//! the same [`RawEvent`].

use super::{RawEvent, RawMapping, Scalar};

/// The message's fields, or `None`: the general parser is to read it.
pub(super) fn read(text: &str) -> Option<RawEvent> {
    let body = text.strip_suffix('\n')?;
    let body = body.strip_prefix("---\n").unwrap_or(body);
    let mut raw = RawEvent::default();
    let mut lines = body.split('\n').peekable();
    while let Some(line) = lines.next() {
        let (key, value) = line.strip_prefix(':')?.split_once(':')?;
        let value = match value {
            "" => None,
            v => Some(v.strip_prefix(' ')?),
        };
        match (key, value) {
            ("scalable", Some(v)) => set(&mut raw.scalable, boolean(v)?)?,
            ("ha", Some(v)) => set(&mut raw.ha, boolean(v)?)?,
            ("protocols", None) => set(&mut raw.protocols, items(&mut lines)?)?,
            ("types", None) => set(&mut raw.types, items(&mut lines)?)?,
            ("mappings", None) => set(&mut raw.mappings, mappings(&mut lines)?)?,
            (key, Some(v)) => set(field(&mut raw, key)?, Scalar(scalar(v)?))?,
            _ => return None,
        }
    }
    Some(raw)
}

/// Sets a field seen for the first time.
fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.is_none().then(|| *slot = Some(value))
}

/// The field of a scalar-valued key.
fn field<'a>(raw: &'a mut RawEvent, key: &str) -> Option<&'a mut Option<Scalar>> {
    Some(match key {
        "action" => &mut raw.action,
        "app_name" => &mut raw.app_name,
        "namespace" => &mut raw.namespace,
        "gear_id" => &mut raw.gear_id,
        "public_port_name" => &mut raw.public_port_name,
        "public_address" => &mut raw.public_address,
        "public_port" => &mut raw.public_port,
        "alias" => &mut raw.alias,
        "ssl" => &mut raw.ssl,
        "private_key" => &mut raw.private_key,
        "pass_phrase" => &mut raw.pass_phrase,
        "deprecated" => &mut raw.deprecated,
        _ => return None,
    })
}

fn boolean(v: &str) -> Option<bool> {
    match v {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// The text of a value in the safe alphabet (see the module doc).
fn scalar(v: &str) -> Option<String> {
    let safe = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'-'))
    };
    let quoted = v
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .or_else(|| v.strip_prefix('"').and_then(|v| v.strip_suffix('"')));
    if let Some(inner) = quoted {
        return safe(inner).then(|| inner.to_string());
    }
    // A plain scalar: not empty, not a null, not read as a key (a trailing colon),
    // not starting with an indicator.
    let first = v.bytes().next()?;
    let plain = safe(v)
        && !v.ends_with(':')
        && !matches!(first, b'-' | b'.')
        && !v.eq_ignore_ascii_case("null");
    plain.then(|| v.to_string())
}

/// The `- value` lines of a block sequence (at least one).
fn items<'a>(
    lines: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>,
) -> Option<Vec<Scalar>> {
    let mut out = Vec::new();
    while let Some(item) = lines.next_if(|l| l.starts_with("- ")) {
        out.push(Scalar(scalar(&item[2..])?));
    }
    (!out.is_empty()).then_some(out)
}

/// The items of `:mappings:` (at least one): `- frontend: x` / `  backend: y`, in
/// either order, each key at most once.
fn mappings<'a>(
    lines: &mut std::iter::Peekable<impl Iterator<Item = &'a str>>,
) -> Option<Vec<RawMapping>> {
    let mut out = Vec::new();
    while let Some(first) = lines.next_if(|l| l.starts_with("- ")) {
        let mut m = RawMapping {
            frontend: None,
            backend: None,
        };
        mapping_field(&mut m, &first[2..])?;
        while let Some(more) = lines.next_if(|l| l.starts_with("  ")) {
            mapping_field(&mut m, &more[2..])?;
        }
        out.push(m);
    }
    (!out.is_empty()).then_some(out)
}

fn mapping_field(m: &mut RawMapping, line: &str) -> Option<()> {
    let (key, value) = line.split_once(": ")?;
    let slot = match key {
        "frontend" => &mut m.frontend,
        "backend" => &mut m.backend,
        _ => return None,
    };
    set(slot, Scalar(scalar(value)?))
}
