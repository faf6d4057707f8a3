//! A name's path routes (`POST /aliases/{name}/paths`): requests under a path
//! prefix go to another app, the prefix optionally rewritten (OpenShift's
//! `spec.path` and `haproxy.router.openshift.io/rewrite-target`).
//!
//! The longest prefix wins, on segment boundaries: `/api` takes `/api` and
//! `/api/x`, never `/apix`; `/` takes everything. A request under none goes
//! where the name goes without paths (its own app, or its split). A host
//! without paths pays one empty-map check (the table has none) or one hash
//! probe (other names have some). A host with paths pays one more probe, by
//! the request's first segment, and compares only the prefixes under it (a
//! scan of all 20 prefixes of a table cost 240 instructions a request).
//!
//! A rewrite replaces the matched prefix: `/api` rewritten to `/` sends
//! `/api/users?x=1` as `/users?x=1` and `/api` as `/`; to `/v2`, as
//! `/v2/users?x=1` and `/v2`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use spi_consumer::AppKey;

/// Prefixes a name may have at most (each request scans them, longest first).
pub const MAX_PATHS: usize = 100;
/// A prefix's or a rewrite's length at most.
pub const MAX_PATH_LEN: usize = 1024;

/// One prefix's route, as the admin API takes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRoute {
    /// The app, `name-namespace`.
    pub app: String,
    /// What the prefix becomes on the way to the app (none: kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<String>,
}

/// A name's prefixes and their routes, as the admin API takes them.
pub type PathRules = BTreeMap<String, PathRoute>;

/// Why path rules cannot apply.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    #[error("no paths: DELETE the name's paths instead")]
    Empty,
    #[error("at most {MAX_PATHS} paths")]
    TooMany,
    #[error(
        "{0:?}: a path prefix starts with / and holds only letters, digits and -._~!$&'()*+,;=:@/ (no ?, #, %-escapes or spaces; at most 1024 bytes)"
    )]
    BadPrefix(String),
    #[error("{0:?}: the rewrite is a path like a prefix (/, /v2)")]
    BadRewrite(String),
    #[error("{0:?} is not an app (name-namespace)")]
    BadApp(String),
}

/// A prefix as a route may name it: `/` then the bytes RFC 3986 allows in a
/// path unescaped (`pchar` and `/`; no `%`-escapes): a rewrite is written into
/// the member's request target as it is (a `` ` `` or a `{` there was found by
/// fuzzing: an h2 member's URI refused it).
fn valid_path(p: &str) -> bool {
    p.starts_with('/')
        && p.len() <= MAX_PATH_LEN
        && p.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'/' | b'-'
                        | b'.'
                        | b'_'
                        | b'~'
                        | b'!'
                        | b'$'
                        | b'&'
                        | b'\''
                        | b'('
                        | b')'
                        | b'*'
                        | b'+'
                        | b','
                        | b';'
                        | b'='
                        | b':'
                        | b'@'
                )
        })
}

/// One compiled prefix.
#[derive(Debug)]
struct Entry {
    /// Without a trailing `/` (but `/` itself).
    prefix: Box<str>,
    app: AppKey,
    rewrite: Option<Arc<str>>,
}

/// A name's compiled path routes, by first segment, longest prefix first.
#[derive(Debug)]
pub struct PathTable {
    /// Grouped by first segment, each group longest first.
    entries: Vec<Entry>,
    /// A first segment (`api` of `/api/v2`) → its group in `entries`.
    by_segment: HashMap<Box<str>, Range<usize>, foldhash::fast::RandomState>,
    /// The `/` rule, which takes what no other does.
    root: Option<usize>,
    /// As given, for `/routes` and the pair.
    pub rules: PathRules,
}

/// A matched prefix's rewrite: its length, and what replaces it.
pub type Rewrite = (usize, Arc<str>);

/// Where a path rule sends a request: the app, and its prefix's rewrite when
/// the rule rewrites.
pub struct PathMatch<'a> {
    pub app: &'a AppKey,
    pub rewrite: Option<Rewrite>,
}

impl PathTable {
    /// Checks and compiles `rules`.
    pub fn new(rules: PathRules) -> Result<PathTable, PathError> {
        if rules.is_empty() {
            return Err(PathError::Empty);
        }
        if rules.len() > MAX_PATHS {
            return Err(PathError::TooMany);
        }
        let mut entries = Vec::with_capacity(rules.len());
        for (prefix, route) in &rules {
            if !valid_path(prefix) {
                return Err(PathError::BadPrefix(prefix.clone()));
            }
            if let Some(r) = route.rewrite.as_ref().filter(|r| !valid_path(r)) {
                return Err(PathError::BadRewrite(r.clone()));
            }
            let app =
                AppKey::parse(&route.app).ok_or_else(|| PathError::BadApp(route.app.clone()))?;
            let trimmed = prefix.trim_end_matches('/');
            entries.push(Entry {
                prefix: if trimmed.is_empty() { "/" } else { trimmed }.into(),
                app,
                rewrite: route.rewrite.as_deref().map(Arc::from),
            });
        }
        entries.sort_by(|a, b| {
            let key = |e: &Entry| (first_segment(&e.prefix).to_string(), e.prefix.len());
            let ((sa, la), (sb, lb)) = (key(a), key(b));
            sa.cmp(&sb).then(lb.cmp(&la))
        });
        let mut by_segment = HashMap::<Box<str>, Range<usize>, _>::default();
        let mut root = None;
        for (i, e) in entries.iter().enumerate() {
            if &*e.prefix == "/" {
                root.get_or_insert(i);
                continue;
            }
            by_segment
                .entry(first_segment(&e.prefix).into())
                .or_insert(i..i)
                .end = i + 1;
        }
        Ok(PathTable {
            entries,
            by_segment,
            root,
            rules,
        })
    }

    /// The apps the rules name.
    pub fn apps(&self) -> impl Iterator<Item = &AppKey> {
        self.entries.iter().map(|e| &e.app)
    }

    /// The rule for `path` (without its query): the longest prefix it is
    /// under, on a segment boundary.
    pub fn find(&self, path: &str) -> Option<PathMatch<'_>> {
        let group = self
            .by_segment
            .get(first_segment(path))
            .and_then(|r| self.entries.get(r.clone()))
            .unwrap_or_default();
        group
            .iter()
            .find(|e| under(path, &e.prefix))
            .or_else(|| self.entries.get(self.root?))
            .map(|e| PathMatch {
                app: &e.app,
                rewrite: e.rewrite.clone().map(|to| (e.prefix.len(), to)),
            })
    }
}

/// A path's first segment: `api` of `/api/v2/x`, empty for `/`.
fn first_segment(path: &str) -> &str {
    let rest = path.strip_prefix('/').unwrap_or(path);
    // A byte search: `split_once('/')`'s char searcher cost 53 instructions here.
    match rest.bytes().position(|b| b == b'/') {
        Some(end) => rest.get(..end).unwrap_or(rest),
        None => rest,
    }
}

/// Whether `path` is `prefix` or under it (the next byte a `/`).
fn under(path: &str, prefix: &str) -> bool {
    if prefix == "/" {
        return true;
    }
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `path_and_query` with its first `len` bytes (a matched prefix) replaced by
/// `to`.
pub fn rewritten(path_and_query: &str, (len, to): (usize, &str)) -> String {
    let rest = path_and_query.get(len..).unwrap_or("");
    let base = to.trim_end_matches('/');
    let out = format!("{base}{rest}");
    if out.is_empty() || out.starts_with('?') {
        format!("/{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rules: &[(&str, &str, Option<&str>)]) -> PathTable {
        PathTable::new(
            rules
                .iter()
                .map(|(p, app, rw)| {
                    (
                        p.to_string(),
                        PathRoute {
                            app: app.to_string(),
                            rewrite: rw.map(str::to_string),
                        },
                    )
                })
                .collect(),
        )
        .expect("valid")
    }

    #[test]
    fn the_longest_prefix_wins_on_segment_boundaries() {
        let t = table(&[
            ("/api", "api-ns", Some("/")),
            ("/api/v2/", "v2-ns", None),
            ("/static", "cdn-ns", Some("/assets")),
        ]);
        let app = |p: &str| t.find(p).map(|m| m.app.to_string());
        assert_eq!(app("/api").as_deref(), Some("api-ns"));
        assert_eq!(app("/api/users").as_deref(), Some("api-ns"));
        assert_eq!(app("/api/v2").as_deref(), Some("v2-ns"));
        assert_eq!(app("/api/v2/x").as_deref(), Some("v2-ns"));
        assert_eq!(app("/apix"), None, "never across a segment");
        assert_eq!(app("/"), None);
        assert_eq!(app("/static/a.css").as_deref(), Some("cdn-ns"));
        let root = table(&[("/", "all-ns", None)]);
        assert_eq!(
            root.find("/anything").map(|m| m.app.to_string()).as_deref(),
            Some("all-ns")
        );
    }

    /// The lookup by first segment finds what a scan of every prefix, longest
    /// first, finds.
    #[test]
    fn the_lookup_by_segment_agrees_with_a_scan_of_every_prefix() {
        let prefixes = [
            "/", "/a", "/a/b", "/a/b/c", "/ab", "/b", "/b/a", "/x/y", "/a/bc", "/c/",
        ];
        let apps: Vec<String> = (0..prefixes.len()).map(|i| format!("app{i}-ns")).collect();
        let rules: Vec<(&str, &str, Option<&str>)> = prefixes
            .iter()
            .zip(&apps)
            .map(|(p, a)| (*p, a.as_str(), None))
            .collect();
        for n in 1..=rules.len() {
            let t = table(&rules[..n]);
            let mut scan: Vec<(&str, &str)> = rules[..n]
                .iter()
                .map(|(p, a, _)| (p.trim_end_matches('/'), *a))
                .map(|(p, a)| (if p.is_empty() { "/" } else { p }, a))
                .collect();
            scan.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
            for path in [
                "/", "/a", "/a/", "/a/b", "/a/bx", "/a/b/c/d", "/ab/c", "/abc", "/b/a/z", "/x",
                "/x/y", "/x/yz", "/c", "/c/d", "", "*", "/a/bc",
            ] {
                let want = scan.iter().find(|(p, _)| under(path, p)).map(|(_, a)| *a);
                let got = t.find(path).map(|m| m.app.to_string());
                assert_eq!(got.as_deref(), want, "{path} with {n} rules");
            }
        }
    }

    #[test]
    fn a_rewrite_replaces_the_prefix_and_keeps_the_rest_and_query() {
        assert_eq!(rewritten("/api/users?x=1", (4, "/")), "/users?x=1");
        assert_eq!(rewritten("/api", (4, "/")), "/");
        assert_eq!(rewritten("/api?x=1", (4, "/")), "/?x=1");
        assert_eq!(rewritten("/api/users", (4, "/v2")), "/v2/users");
        assert_eq!(rewritten("/api", (4, "/v2/")), "/v2");
    }

    #[test]
    fn bad_rules_are_refused() {
        let one = |p: &str, app: &str, rw: Option<&str>| {
            PathTable::new(
                [(
                    p.to_string(),
                    PathRoute {
                        app: app.into(),
                        rewrite: rw.map(Into::into),
                    },
                )]
                .into(),
            )
            .err()
        };
        assert!(matches!(
            one("api", "a-b", None),
            Some(PathError::BadPrefix(_))
        ));
        assert!(matches!(
            one("/a?b", "a-b", None),
            Some(PathError::BadPrefix(_))
        ));
        assert!(matches!(
            one("/a b", "a-b", None),
            Some(PathError::BadPrefix(_))
        ));
        assert!(matches!(
            one("/a", "nohyphen", None),
            Some(PathError::BadApp(_))
        ));
        assert!(matches!(
            one("/a", "a-b", Some("x")),
            Some(PathError::BadRewrite(_))
        ));
        // Found by fuzzing: bytes a URI's path does not take unescaped.
        assert!(matches!(
            one("/a", "a-b", Some("/v`x")),
            Some(PathError::BadRewrite(_))
        ));
        assert!(matches!(
            one("/a{b}", "a-b", None),
            Some(PathError::BadPrefix(_))
        ));
        assert!(one("/a/b.c_d~e;f=g:h@i", "a-b", Some("/x-y!$&'()*+,")).is_none());
        assert_eq!(
            PathTable::new(PathRules::new()).err(),
            Some(PathError::Empty)
        );
        let many: PathRules = (0..=MAX_PATHS)
            .map(|i| {
                (
                    format!("/p{i}"),
                    PathRoute {
                        app: "a-b".into(),
                        rewrite: None,
                    },
                )
            })
            .collect();
        assert_eq!(PathTable::new(many).err(), Some(PathError::TooMany));
    }
}
