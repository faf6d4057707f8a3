//! An endpoint's Mappings, for direct routing (`endpoint_types: [web_framework]`):
//! a request path under a mapping's frontend goes to the member with that prefix
//! replaced by the mapping's backend path, longest frontend first; the `''`
//! frontend takes everything else. A path under no frontend goes as it came.
//!
//! "Under" is by path segment: `/health` covers `/health` and `/health/x`, not
//! `/healthy`. The query string is kept. Only `web_framework`-style endpoints get
//! this: a `load_balancer`'s mappings (the haproxy cartridge's `/health`) are the
//! node's own file mappings, which no router can reach (routing-spi §8), and are
//! never applied.

use spi_consumer::decode::Mapping;

/// The non-trivial mappings of one endpoint, longest frontend first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mappings(Vec<(String, String)>);

impl Mappings {
    /// `None` when nothing would ever change a path (no mappings, or only
    /// frontends mapped to themselves), so requests skip the rewrite entirely.
    pub fn of(mappings: &[Mapping]) -> Option<Mappings> {
        let norm = |s: &str| s.trim_end_matches('/').to_string();
        let mut v: Vec<(String, String)> = mappings
            .iter()
            .map(|m| (norm(&m.frontend), norm(&m.backend)))
            .collect();
        if v.iter().all(|(f, b)| f == b) {
            return None;
        }
        v.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0)));
        v.dedup_by(|a, b| a.0 == b.0);
        Some(Mappings(v))
    }

    /// The path and query the member gets for `path_and_query`, if it changes.
    pub fn rewrite(&self, path_and_query: &str) -> Option<String> {
        let (path, query) = match path_and_query.find('?') {
            Some(i) => path_and_query.split_at(i),
            None => (path_and_query, ""),
        };
        let (frontend, backend) = self.0.iter().find(|(f, _)| {
            f.is_empty()
                || path
                    .strip_prefix(f.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })?;
        if frontend == backend {
            return None;
        }
        let rest = &path[frontend.len()..];
        let mut out = String::with_capacity(backend.len() + rest.len() + query.len() + 1);
        out.push_str(backend);
        // Backend `''` and frontend `''`: the path stays as it is.
        if !(backend.is_empty() || rest.is_empty() || rest.starts_with('/')) {
            out.push('/');
        }
        out.push_str(rest);
        if out.is_empty() || !out.starts_with('/') {
            out.insert(0, '/');
        }
        out.push_str(query);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(pairs: &[(&str, &str)]) -> Option<Mappings> {
        Mappings::of(
            &pairs
                .iter()
                .map(|(f, b)| Mapping {
                    frontend: f.to_string(),
                    backend: b.to_string(),
                })
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn longest_frontend_first_by_segment_with_the_query_kept() {
        let maps = m(&[
            ("", ""),
            ("/health", "/configuration/health"),
            ("/api", "/v2/api/"),
        ])
        .expect("non-trivial");
        let r = |p: &str| maps.rewrite(p);
        assert_eq!(r("/health").as_deref(), Some("/configuration/health"));
        assert_eq!(
            r("/health/db?x=1").as_deref(),
            Some("/configuration/health/db?x=1")
        );
        assert_eq!(
            r("/healthy"),
            None,
            "not under /health: the '' mapping, unchanged"
        );
        assert_eq!(r("/api?q").as_deref(), Some("/v2/api?q"));
        assert_eq!(r("/"), None);
        let root = m(&[("", "/app")]).expect("non-trivial");
        assert_eq!(root.rewrite("/").as_deref(), Some("/app/"));
        assert_eq!(root.rewrite("/x?y").as_deref(), Some("/app/x?y"));
        let strip = m(&[("/blog", "")]).expect("non-trivial");
        assert_eq!(strip.rewrite("/blog").as_deref(), Some("/"));
        assert_eq!(strip.rewrite("/blog/post").as_deref(), Some("/post"));
        assert_eq!(strip.rewrite("/other"), None);
    }

    #[test]
    fn identity_mappings_are_no_mappings() {
        assert_eq!(m(&[]), None);
        assert_eq!(m(&[("", "")]), None);
        assert_eq!(m(&[("", ""), ("/a", "/a/")]), None);
    }

    proptest! {
        /// Whatever the mappings and the path: the result is origin-form, keeps the
        /// query, and a path under no frontend is left alone.
        #[test]
        fn results_stay_origin_form(
            fronts in proptest::collection::vec("(/[a-c]{1,3}){0,2}", 0..4),
            backs in proptest::collection::vec("(/[x-z]{1,3}){0,2}", 0..4),
            path in "(/[a-c]{0,3}){1,3}",
            query in "(\\?[a-z=]{0,4})?",
        ) {
            let pairs: Vec<(&str, &str)> = fronts.iter().zip(backs.iter()).map(|(f, b)| (f.as_str(), b.as_str())).collect();
            if let Some(maps) = m(&pairs) {
                let input = format!("{path}{query}");
                if let Some(out) = maps.rewrite(&input) {
                    prop_assert!(out.starts_with('/'), "{} -> {}", input, out);
                    prop_assert!(out.ends_with(query.as_str()));
                    prop_assert!(path.contains("//") || !out.contains("//"), "{} -> {}", input, out);
                }
            }
        }
    }
}
