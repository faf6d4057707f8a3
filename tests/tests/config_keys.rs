//! Every key the configuration parser takes has its row in
//! `docs/configuration.md`: the keys are read off the parser itself (each
//! section refuses an unknown field naming the fields it has), so a key added
//! to the code without its documented default and reason fails here.

use std::path::Path;

/// The fields the parser takes at `path` (a dotted prefix, "" for the top),
/// or none when `path` is not a section with named fields (a scalar, a list,
/// a map by name).
fn fields_at(path: &str) -> Option<Vec<String>> {
    // `path: {zz_unknown: 1}` as nested YAML.
    let mut yaml = String::new();
    let parts: Vec<&str> = path.split('.').filter(|p| !p.is_empty()).collect();
    for (depth, p) in parts.iter().enumerate() {
        yaml.push_str(&format!("{}{p}:\n", "  ".repeat(depth)));
    }
    yaml.push_str(&format!("{}zz_unknown: 1\n", "  ".repeat(parts.len())));
    let err = router::config::Config::parse(&yaml, "keys.yaml")
        .err()?
        .to_string();
    // "...: unknown field `zz_unknown`, expected one of a, b, c" (or "expected a").
    let (_, expected) = err.split_once("unknown field `zz_unknown`, expected ")?;
    let list = expected.strip_prefix("one of ").unwrap_or(expected);
    Some(
        list.split(", ")
            .map(|f| f.trim().trim_matches('`').to_string())
            .collect(),
    )
}

/// Every key path, sections and their fields, depth first.
fn keys(path: &str, out: &mut Vec<String>) {
    for f in fields_at(path).unwrap_or_default() {
        let key = if path.is_empty() {
            f
        } else {
            format!("{path}.{f}")
        };
        out.push(key.clone());
        keys(&key, out);
    }
}

#[test]
fn the_parser_names_its_fields() {
    let top = fields_at("").expect("the top level refuses an unknown field");
    assert!(top.contains(&"tls".to_string()), "{top:?}");
    let tls = fields_at("tls").expect("tls is a section");
    assert!(tls.contains(&"ocsp".to_string()), "{tls:?}");
    assert_eq!(fields_at("cloud_domain"), None);
}

#[test]
fn every_key_the_parser_takes_has_a_row_in_configuration_md() {
    let read = |f: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../docs")
                .join(f),
        )
        .unwrap_or_else(|e| panic!("docs/{f}: {e}"))
    };
    let docs = read("configuration.md");
    // `app_defaults` takes the per-app settings, whose table is in
    // operations.md ("Per-app settings"), one row a setting.
    let operations = read("operations.md");
    let mut all = Vec::new();
    keys("", &mut all);
    assert!(all.len() > 100, "keys found: {}", all.len());
    // Documented: named in backticks (`tls.ocsp.stapling`), or a field of a
    // key whose row names it (`{mode: required, ca_file: ...}` in
    // `tls.client_certificates`' row), or a section whose fields all are.
    let rows: Vec<&str> = docs.lines().filter(|l| l.starts_with("| `")).collect();
    // The keys a row is about: its first cell (`a` / `b`, `c`).
    let first_cell = |row: &str| row.split('|').nth(1).unwrap_or("").to_string();
    let named = |key: &str| docs.contains(&format!("`{key}`"));
    // A row of the key's parent (or of a sibling, `a.b` / `c` rows) naming it.
    let in_parent_row = |key: &str| {
        let Some((parent, leaf)) = key.rsplit_once('.') else {
            return false;
        };
        rows.iter().any(|r| {
            let about = first_cell(r);
            (about.contains(&format!("`{parent}`")) || about.contains(&format!("`{parent}.")))
                && r.contains(leaf)
        })
    };
    let per_app = |key: &str| {
        let Some(rest) = key.strip_prefix("app_defaults.") else {
            return false;
        };
        let (setting, leaf) = rest.split_once('.').unwrap_or((rest, rest));
        operations
            .lines()
            .filter(|r| r.starts_with("| `"))
            .any(|r| first_cell(r).contains(&format!("`{setting}`")) && r.contains(leaf))
    };
    let missing: Vec<&String> = all
        .iter()
        .filter(|k| !named(k) && !in_parent_row(k) && !per_app(k))
        .filter(|k| !all.iter().any(|c| c.starts_with(&format!("{k}."))))
        .collect();
    assert!(
        missing.is_empty(),
        "keys the parser takes without a row in docs/configuration.md:\n{}",
        missing
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
