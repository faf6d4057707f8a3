//! The maps cannot drift from the tree: every source file and item the READMEs
//! (the repository's, `bench/`'s, `keepalived/`'s) and `docs/*.md` name (`path.rs`, `path.rs::item`, `crate::module`) exists,
//! README's crate table lists exactly the workspace's crates, and
//! `docs/architecture.md`'s tree of `router/src/` names every module there is,
//! and none that is not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file of the repository (outside `target/`), relative, with `/`.
fn sources() -> Vec<String> {
    fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == "target" || name.starts_with('.') {
                continue;
            }
            if p.is_dir() {
                walk(&p, base, out);
            } else if name.ends_with(".rs") {
                let rel = p.strip_prefix(base).expect("under the repo");
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo(), &repo(), &mut out);
    out
}

fn docs() -> Vec<(String, String)> {
    let mut files = vec![
        repo().join("README.md"),
        repo().join("bench/README.md"),
        repo().join("keepalived/README.md"),
    ];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    in_docs.sort();
    files.extend(in_docs);
    files
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(repo()).expect("rel").display().to_string();
            (name, std::fs::read_to_string(&p).expect("read doc"))
        })
        .collect()
}

/// The `code spans` of a Markdown text.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Whether `item` is defined (or is a method) in `source`.
fn defines(source: &str, item: &str) -> bool {
    [
        "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ",
    ]
    .iter()
    .any(|kw| {
        source.match_indices(&format!("{kw}{item}")).any(|(i, m)| {
            source[i + m.len()..]
                .chars()
                .next()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
        })
    })
}

#[test]
fn every_file_and_item_the_docs_name_exists() {
    let sources = sources();
    let mut missing = Vec::new();
    for (doc, text) in docs() {
        for span in spans(&text) {
            let span = span.trim_end_matches(['(', ')', ',', '.']);
            let Some(at) = span.find(".rs") else { continue };
            let (path, rest) = span.split_at(at + 3);
            if path.contains(char::is_whitespace) || path.contains('*') {
                continue;
            }
            let found: Vec<&String> = sources
                .iter()
                .filter(|s| *s == path || s.ends_with(&format!("/{path}")))
                .collect();
            if found.is_empty() {
                missing.push(format!("{doc}: `{span}`: no such file"));
                continue;
            }
            if let Some(item) = rest.strip_prefix("::") {
                let first = item.split("::").next().unwrap_or(item);
                let first = first.trim_end_matches("()");
                if !found.iter().any(|f| {
                    std::fs::read_to_string(repo().join(f)).is_ok_and(|s| defines(&s, first))
                }) {
                    missing.push(format!("{doc}: `{span}`: no {first} in {found:?}"));
                }
            }
        }
        missing.extend(
            unknown_modules(&text, &["router/src", "spi-consumer/src"])
                .into_iter()
                .map(|m| format!("{doc}: `crate::{m}`: no such module")),
        );
    }
    // The code's own comments, too.
    for crate_src in ["router/src", "spi-consumer/src"] {
        for file in sources.iter().filter(|s| s.starts_with(crate_src)) {
            let text = std::fs::read_to_string(repo().join(file)).expect("source");
            let comments: String = text
                .lines()
                .filter(|l| l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            missing.extend(
                unknown_modules(&comments, &[crate_src])
                    .into_iter()
                    .map(|m| format!("{file}: `crate::{m}` in a comment: no such module")),
            );
        }
    }
    assert!(
        missing.is_empty(),
        "the docs name what the tree does not have:\n{}",
        missing.join("\n")
    );
}

/// The modules `crate::NAME` names in `text` that none of `crates` has.
fn unknown_modules(text: &str, crates: &[&str]) -> Vec<String> {
    text.match_indices("crate::")
        .map(|(i, _)| {
            text[i + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        // `crate::[a-z_]+` (a grep pattern in the docs) names no module.
        .filter(|m| !m.is_empty())
        .filter(|m| {
            !crates.iter().any(|c| {
                repo().join(c).join(format!("{m}.rs")).exists()
                    || repo().join(c).join(m).join("mod.rs").exists()
            })
        })
        .collect()
}

/// The workspace's members, from the root `Cargo.toml`.
fn members() -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).expect("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn the_readme_crate_table_lists_the_workspace() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README");
    let table: BTreeSet<String> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| crate |"))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .flat_map(|row| {
            let first = row.split('|').nth(1).unwrap_or_default();
            spans(first)
                .into_iter()
                .filter_map(|s| s.strip_suffix('/'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let members = members();
    let unlisted: Vec<_> = members.difference(&table).collect();
    let stale: Vec<_> = table
        .difference(&members)
        .filter(|t| !repo().join(t).is_dir())
        .collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "README's crate table: crates missing {unlisted:?}, rows for nothing {stale:?}"
    );
}

#[test]
fn the_architecture_tree_names_every_router_module() {
    let doc = std::fs::read_to_string(repo().join("docs/architecture.md")).expect("doc");
    let start = doc.find("router/src/ ").expect("the router/src/ tree");
    let tree = &doc[start..];
    let tree = &tree[..tree.find("```").expect("the tree's end")];
    let words: BTreeSet<&str> = tree
        .split(|c: char| c.is_whitespace() || "(),;:`".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    let mut missing = Vec::new();
    let src = repo().join("router/src");
    for e in std::fs::read_dir(&src).expect("router/src").flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let shown = if e.path().is_dir() {
            format!("{name}/")
        } else {
            name.clone()
        };
        if !words.contains(shown.as_str()) {
            missing.push(shown);
        }
    }
    // Every file and folder name under router/src, at any depth.
    fn names_under(dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                out.insert(format!("{name}/"));
                names_under(&e.path(), out);
            } else {
                out.insert(name);
            }
        }
    }
    let mut names = BTreeSet::new();
    names_under(&src, &mut names);
    let stale: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| (w.ends_with(".rs") || w.ends_with('/')) && !w.contains("::"))
        .filter(|w| w.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
        .filter(|w| *w != "router/src/")
        .filter(|w| {
            // `decode/flat.rs`: the last part is what must exist.
            let last = w.trim_end_matches('/').rsplit('/').next().unwrap_or(w);
            let shown = if w.ends_with('/') {
                format!("{last}/")
            } else {
                last.to_string()
            };
            !names.contains(&shown)
        })
        .collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/architecture.md's router/src/ tree: not shown {missing:?}; shown but gone {stale:?}"
    );
}
