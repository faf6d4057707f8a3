//! The house's shape, checked: no production module over 800 lines (the lines
//! before its `#[cfg(test)]` part), in any crate of the workspace. A module that
//! grows past it is split by concern (as `admin/` is by resource and `config/` by
//! section), not allowed to grow.

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
            let lines = text
                .lines()
                .take_while(|l| !l.starts_with("#[cfg(test)]"))
                .count();
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
