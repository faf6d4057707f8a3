//! The house's shape, checked: no production module over 800 lines (its lines
//! outside `#[cfg(test)]` items), in any crate of the workspace. A module that
//! grows past it is split by concern (as `admin/` is by resource and `config/` by
//! section), not allowed to grow. No import cycle between a crate's modules. No
//! production function over 80 lines (60 on the request path).

use std::path::{Path, PathBuf};

const MAX_MODULE_LINES: usize = 800;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "target" || name.starts_with('.') || name == "tests" {
            continue;
        }
        if p.is_dir() {
            rust_files(&p, out);
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

/// The lines of `text` outside its test code: each `#[cfg(test)]` item left
/// out whole (a `mod tests;` line, or a block to its closing `}` at the
/// attribute's indentation), wherever it stands; everything after it read.
fn production(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((at, line)) = lines.next() {
        let body = line.trim_start();
        if !body.starts_with("#[cfg(test)]") {
            out.push((at, line));
            continue;
        }
        let closing = format!("{}}}", " ".repeat(line.len() - body.len()));
        // The item: further attributes, then one line ending `;`, or a block.
        for (_, item) in lines.by_ref() {
            let t = item.trim();
            if t.starts_with("#[") {
                continue;
            }
            if t.ends_with(';') && !t.ends_with("{;") {
                break;
            }
            if t.ends_with('{') {
                for (_, inner) in lines.by_ref() {
                    if inner == closing {
                        break;
                    }
                }
                break;
            }
        }
    }
    out
}

#[test]
fn the_production_finder_reads_past_a_test_module_declared_on_one_line() {
    let text = "mod a;\n#[cfg(test)]\nmod tests;\nfn b() {\n    c();\n}\n#[cfg(test)]\nmod more {\n    fn t() {}\n}\nfn d() {}\n    #[cfg(test)]\n    fn e() {\n        f();\n    }\n";
    assert_eq!(
        production(text),
        [
            (1, "mod a;"),
            (4, "fn b() {"),
            (5, "    c();"),
            (6, "}"),
            (11, "fn d() {}")
        ]
    );
}

#[test]
fn no_production_module_is_over_800_lines() {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(repo()).expect("repo").flatten() {
        let src = krate.path().join("src");
        if src.is_dir() && krate.file_name() != "tests" && krate.file_name() != "fuzz" {
            rust_files(&src, &mut files);
        }
    }
    assert!(
        files.len() > 100,
        "the workspace's modules: {}",
        files.len()
    );
    let mut over: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let text = std::fs::read_to_string(f).ok()?;
            let lines = production(&text).len();
            (lines > MAX_MODULE_LINES)
                .then(|| format!("{}: {lines}", f.strip_prefix(repo()).unwrap_or(f).display()))
        })
        .collect();
    over.sort();
    assert!(
        over.is_empty(),
        "production modules over {MAX_MODULE_LINES} lines (split them by concern):\n{}",
        over.join("\n")
    );
}

/// The top-level modules `crate::NAME` that `src`'s module `top` names outside
/// comments and its tests.
fn uses_of(src: &Path) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let top = rel
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .unwrap_or_default();
        if top == "main" || top == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (_, line) in production(&text)
            .into_iter()
            .filter(|(_, l)| !l.trim_start().starts_with("//"))
        {
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != top {
                    graph.entry(top.clone()).or_default().insert(name);
                }
            }
        }
    }
    graph
}

/// A cycle in `graph`, if there is one (as the modules that form it).
fn a_cycle(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Option<Vec<String>> {
    fn walk(
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        let here = path.last().cloned().unwrap_or_default();
        for next in graph.get(&here).into_iter().flatten() {
            if let Some(at) = path.iter().position(|p| p == next) {
                let mut cycle = path[at..].to_vec();
                cycle.push(next.clone());
                return Some(cycle);
            }
            if done.contains(next) {
                continue;
            }
            path.push(next.clone());
            if let Some(c) = walk(graph, path, done) {
                return Some(c);
            }
            path.pop();
        }
        done.insert(here);
        None
    }
    let mut done = std::collections::BTreeSet::new();
    for start in graph.keys() {
        if let Some(c) = walk(graph, &mut vec![start.clone()], &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn no_import_cycle_between_a_crates_modules() {
    for krate in ["router", "spi-consumer", "portproxy"] {
        let graph = uses_of(&repo().join(krate).join("src"));
        assert!(graph.len() > 3, "{krate}: modules found: {graph:?}");
    }
    // Every crate of the workspace, the small ones too (a cycle in `spans`
    // once came in unseen when only these three were read).
    let mut read = 0;
    for krate in std::fs::read_dir(repo()).expect("repo").flatten() {
        let src = krate.path().join("src");
        if !src.is_dir() || krate.file_name() == "target" {
            continue;
        }
        read += 1;
        if let Some(cycle) = a_cycle(&uses_of(&src)) {
            panic!(
                "{}: import cycle {}",
                krate.file_name().to_string_lossy(),
                cycle.join(" -> ")
            );
        }
    }
    assert!(read >= 20, "crates read: {read}");
    // The check sees one when there is one.
    let mut looped = std::collections::BTreeMap::new();
    for (a, b) in [
        ("admin", "issuer"),
        ("issuer", "config"),
        ("config", "admin"),
    ] {
        looped
            .entry(a.to_string())
            .or_insert_with(std::collections::BTreeSet::new)
            .insert(b.to_string());
    }
    assert!(a_cycle(&looped).is_some());
}

/// The request path: every function a request passes through between its
/// connection's accept and its access-log line, in the folders that hold
/// only that path (`router/src/request/`, `router/src/upstream/`), plus the
/// HTTP/1 codec. Each phase is one function that fits on a screen (see
/// `docs/connection-lifecycle.md`, "A request's phases").
const REQUEST_PATH: [&str; 3] = ["router/src/request", "router/src/upstream", "h1-codec/src"];
const MAX_REQUEST_PATH_FN_LINES: usize = 60;

/// Each function in `text` (rustfmt's layout: a `fn` line, its body closed by
/// a `}` at the same indentation) with its first line number and length, the
/// `#[cfg(test)]` part left out.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let (numbers, lines): (Vec<usize>, Vec<&str>) = production(text).into_iter().unzip();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let body = line.trim_start();
        let indent = line.len() - body.len();
        // `pub(in crate::x)` is one qualifier, though it has a space.
        let joined = body.replace("pub(in ", "pub(in_");
        let words: Vec<&str> = joined.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let qualifiers = ["pub", "async", "const", "unsafe", "extern"];
        // A declaration without a body (a trait's), on one line or several:
        // its signature ends with `;` before any line opens a block.
        let declaration = lines[i..]
            .iter()
            .map(|l| l.trim_end())
            .find(|l| l.ends_with('{') || l.ends_with(';'))
            .is_none_or(|l| l.ends_with(';'));
        if !words[..at]
            .iter()
            .all(|w| qualifiers.contains(w) || w.starts_with("pub("))
            || declaration
        {
            continue;
        }
        let name = words
            .get(at + 1)
            .map_or("", |w| w.split(['(', '<']).next().unwrap_or(w));
        let closing = " ".repeat(indent) + "}";
        if let Some(end) = lines[i..].iter().position(|l| *l == closing) {
            out.push((name.to_owned(), numbers[i], end + 1));
        }
    }
    out
}

/// How many functions `files` hold, and those over `limit` lines (sorted).
fn functions_over(files: &[PathBuf], limit: usize) -> (usize, Vec<String>) {
    let mut seen = 0;
    let mut over = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).expect("source");
        for (name, line, len) in functions(&text) {
            seen += 1;
            if len > limit {
                let at = f.strip_prefix(repo()).unwrap_or(f).display();
                over.push(format!("{at}:{line} {name}: {len} lines"));
            }
        }
    }
    over.sort();
    (seen, over)
}

#[test]
fn no_function_on_the_request_path_is_over_60_lines() {
    let mut files = Vec::new();
    for dir in REQUEST_PATH {
        rust_files(&repo().join(dir), &mut files);
    }
    let (seen, over) = functions_over(&files, MAX_REQUEST_PATH_FN_LINES);
    assert!(seen > 300, "functions found on the request path: {seen}");
    assert!(
        over.is_empty(),
        "request-path functions over {MAX_REQUEST_PATH_FN_LINES} lines (one phase, one screen):\n{}",
        over.join("\n")
    );
}

/// Anywhere else in the workspace's production code: two screens.
const MAX_FN_LINES: usize = 80;

#[test]
fn no_production_function_is_over_80_lines() {
    let mut files = Vec::new();
    rust_files(&repo(), &mut files);
    let (seen, over) = functions_over(&files, MAX_FN_LINES);
    assert!(seen > 2000, "functions found in the workspace: {seen}");
    assert!(
        over.is_empty(),
        "functions over {MAX_FN_LINES} lines (split by step, each on a screen or two):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_function_finder_measures_what_rustfmt_lays_out() {
    let text = "fn a() {\n    x();\n}\n\nimpl T {\n    pub(crate) async fn b(\n        y: u8,\n    ) {\n        z();\n    }\n    fn c();\n    fn d(\n        e: u8,\n    ) -> impl Future<Output = ()> + Send;\n    pub(in crate::x) fn f() {\n        g();\n    }\n}\n";
    assert_eq!(
        functions(text),
        vec![
            ("a".to_owned(), 1, 3),
            ("b".to_owned(), 6, 5),
            ("f".to_owned(), 15, 3)
        ]
    );
}

/// A file's module path inside its crate: `request/context.rs` is
/// `request::context`, `request/mod.rs` is `request`, `lib.rs` the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") {
        parts.push(stem.to_string());
    }
    parts
}

/// The paths a line names after `crate::`, `super::` or `self::`, resolved
/// against `here` (a file's module path), each as its segments; a `{a::b, c}`
/// group gives one path per member.
fn named_paths(line: &str, here: &[String]) -> Vec<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < line.len() {
        let rest = &line[i..];
        let before_ok = i == 0
            || !(bytes[i - 1].is_ascii_alphanumeric()
                || bytes[i - 1] == b'_'
                || bytes[i - 1] == b':');
        let base: Option<(Vec<String>, usize)> = if !before_ok {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), 7))
        } else if rest.starts_with("self::") {
            Some((here.to_vec(), 6))
        } else if rest.starts_with("super::") {
            let mut b = here.to_vec();
            let mut len = 0;
            while rest[len..].starts_with("super::") {
                b.pop();
                len += 7;
            }
            Some((b, len))
        } else {
            None
        };
        let Some((mut base, len)) = base else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut j = i + len;
        loop {
            let seg = ident(&line[j..]);
            if seg.is_empty() {
                break;
            }
            j += seg.len();
            base.push(seg);
            if line[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        if line[j..].starts_with('{') {
            let end = line[j..].find('}').map_or(line.len(), |e| j + e);
            for member in line[j + 1..end].split(',') {
                let mut p = base.clone();
                p.extend(
                    member
                        .trim()
                        .split("::")
                        .map(ident)
                        .filter(|s| !s.is_empty()),
                );
                out.push(p);
            }
            j = end;
        } else {
            out.push(base);
        }
        i = j.max(i + 1);
    }
    out
}

/// Every file-level module of `src` and the modules it names that are neither
/// itself nor one of its ancestors (a room's `mod.rs` holds what its files
/// share, so a file naming its own room is no circle).
fn file_uses(src: &Path) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: std::collections::BTreeSet<Vec<String>> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(src).expect("under src")))
        .collect();
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for f in &files {
        let rel = f.strip_prefix(src).expect("under src");
        let here = module_of(rel);
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let joined: String = production(&text)
            .into_iter()
            .filter(|(_, l)| !l.trim_start().starts_with("//"))
            .map(|(_, l)| l.trim())
            .collect::<Vec<_>>()
            .join(" ");
        for path in named_paths(&joined, &here) {
            let Some(target) = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            if here.starts_with(&target) {
                continue;
            }
            graph
                .entry(here.join("::"))
                .or_default()
                .insert(target.join("::"));
        }
    }
    graph
}

/// Each group of modules in `graph` that reach one another (a circle), as one
/// line.
fn circles(
    graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) -> Vec<String> {
    let reach = |from: &String| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: std::collections::BTreeMap<&String, _> =
        graph.keys().map(|k| (k, reach(k))).collect();
    let mut out = std::collections::BTreeSet::new();
    for (k, r) in &reached {
        if !r.contains(*k) {
            continue;
        }
        let group: Vec<&str> = reached
            .iter()
            .filter(|(o, ro)| r.contains(**o) && ro.contains(*k))
            .map(|(o, _)| o.as_str())
            .collect();
        out.insert(group.join(" <-> "));
    }
    out.into_iter().collect()
}

#[test]
fn no_import_cycle_between_the_files_of_a_room() {
    for krate in ["router", "spi-consumer", "portproxy"] {
        let graph = file_uses(&repo().join(krate).join("src"));
        assert!(graph.len() > 10, "{krate}: files found: {graph:?}");
        let circles = circles(&graph);
        assert!(
            circles.is_empty(),
            "{krate}: files that import each other (split what they share into a file both use):\n{}",
            circles.join("\n")
        );
    }
}

#[test]
fn the_file_graph_resolves_super_self_and_groups() {
    let here = vec!["request".to_string(), "route".to_string()];
    let got = named_paths(
        "use super::context::Forwarded; use super::{body::ProxyBody, error}; x(crate::table::X)",
        &here,
    );
    let want: Vec<Vec<String>> = [
        "request::context::Forwarded",
        "request::body::ProxyBody",
        "request::error",
        "table::X",
    ]
    .iter()
    .map(|s| s.split("::").map(String::from).collect())
    .collect();
    assert_eq!(got, want);
    let mod_rs = vec!["request".to_string()];
    assert_eq!(
        named_paths("use self::body::ProxyBody;", &mod_rs),
        vec![vec![
            "request".to_string(),
            "body".into(),
            "ProxyBody".into()
        ]]
    );
}
