//! Error pages in the operator's words (OpenShift's `httpErrorCodePages`,
//! haproxy's `errorfile`, nginx's `error_page`): HTML the router answers
//! with in place of its own one-line text, router-wide (`error_pages:`, a
//! directory of `NNN.html` files, read at start and on reload) and per app
//! for the answers about its members (`error_pages` in its settings: 502,
//! 503, 504), the app's page first.
//!
//! A page may name the request's ID as `%{request_id}` (each place it
//! appears), so a user can quote it. Each page is at most [`MAX_PAGE`]
//! bytes: pages are held in memory and in the settings file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;

/// Largest maintenance page an operator may supply: it is held in memory and in
/// the settings file for every app that has one.
pub const MAX_PAGE: usize = 64 * 1024;

/// The statuses the router answers requests with itself, each of which may
/// have a page in `error_pages:`.
pub const ROUTER_STATUSES: [u16; 11] = [400, 403, 404, 405, 408, 413, 421, 429, 502, 503, 504];

/// The statuses an app's own pages may be for: those about its members.
pub const APP_STATUSES: [u16; 3] = [502, 503, 504];

/// Where a page names the request's ID.
const REQUEST_ID: &str = "%{request_id}";

/// One page, cut at its `%{request_id}`s.
#[derive(Debug, Clone)]
struct Page {
    parts: Vec<Bytes>,
}

impl Page {
    fn new(text: &[u8]) -> Page {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(at) = find(rest, REQUEST_ID.as_bytes()) {
            parts.push(Bytes::copy_from_slice(&rest[..at]));
            rest = &rest[at + REQUEST_ID.len()..];
        }
        parts.push(Bytes::copy_from_slice(rest));
        Page { parts }
    }

    fn render(&self, request_id: &str) -> Bytes {
        match self.parts.as_slice() {
            [whole] => whole.clone(),
            parts => {
                let mut out = Vec::with_capacity(parts.iter().map(Bytes::len).sum::<usize>() + 64);
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(request_id.as_bytes());
                    }
                    out.extend_from_slice(part);
                }
                Bytes::from(out)
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Pages by status.
#[derive(Debug, Clone, Default)]
pub struct ErrorPages {
    by_status: BTreeMap<u16, Page>,
}

/// Why the pages directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PagesError {
    #[error("{0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("{0}: larger than {max} KiB", max = MAX_PAGE / 1024)]
    TooLarge(PathBuf),
}

impl ErrorPages {
    /// The `NNN.html` files of `dir` for [`ROUTER_STATUSES`] (absent: the
    /// router's text for that status).
    pub fn load(dir: &Path) -> Result<ErrorPages, PagesError> {
        let mut by_status = BTreeMap::new();
        for status in ROUTER_STATUSES {
            let path = dir.join(format!("{status}.html"));
            let text = match std::fs::read(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(PagesError::Read(path, e)),
            };
            if text.len() > MAX_PAGE {
                return Err(PagesError::TooLarge(path));
            }
            by_status.insert(status, Page::new(&text));
        }
        Ok(ErrorPages { by_status })
    }

    /// An app's pages (checked: [`APP_STATUSES`], each at most [`MAX_PAGE`]).
    pub fn of_app(pages: &BTreeMap<u16, String>) -> ErrorPages {
        ErrorPages {
            by_status: pages
                .iter()
                .map(|(s, p)| (*s, Page::new(p.as_bytes())))
                .collect(),
        }
    }

    /// The page for `status`, with `request_id` in it, if there is one.
    pub fn page(&self, status: u16, request_id: &str) -> Option<Bytes> {
        Some(self.by_status.get(&status)?.render(request_id))
    }

    pub fn is_empty(&self) -> bool {
        self.by_status.is_empty()
    }

    /// How many statuses have a page.
    pub fn len(&self) -> usize {
        self.by_status.len()
    }
}

/// Refuses an app's pages that cannot apply: `(field, problem)`.
pub fn check(pages: &BTreeMap<u16, String>) -> Result<(), (String, String)> {
    for (status, page) in pages {
        if !APP_STATUSES.contains(status) {
            return Err((
                format!("error_pages.{status}"),
                "an app's own pages are for 502, 503 and 504 (its members' answers)".into(),
            ));
        }
        if page.len() > MAX_PAGE {
            return Err((
                format!("error_pages.{status}"),
                format!("at most {} KiB", MAX_PAGE / 1024),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_names_the_request_id_wherever_it_says() {
        let p = Page::new(b"<p>id %{request_id}</p><!-- %{request_id} -->");
        assert_eq!(&p.render("abc")[..], b"<p>id abc</p><!-- abc -->");
        let plain = Page::new(b"<p>sorry</p>");
        assert_eq!(&plain.render("abc")[..], b"<p>sorry</p>");
    }

    #[test]
    fn pages_load_from_a_directory_and_refuse_what_is_too_large() {
        let dir = std::env::temp_dir().join(format!("pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("404.html"), "<h1>not here</h1>").expect("write");
        std::fs::write(dir.join("999.html"), "ignored").expect("write");
        let pages = ErrorPages::load(&dir).expect("load");
        assert_eq!(pages.len(), 1);
        assert!(pages.page(404, "x").is_some() && pages.page(503, "x").is_none());
        std::fs::write(dir.join("503.html"), vec![b'x'; MAX_PAGE + 1]).expect("write");
        assert!(matches!(
            ErrorPages::load(&dir),
            Err(PagesError::TooLarge(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(check(&[(404, "x".to_string())].into()).is_err());
        assert!(check(&[(502, "x".to_string())].into()).is_ok());
    }
}
