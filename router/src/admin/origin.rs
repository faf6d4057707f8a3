//! Which requests the admin listener takes from a browser's point of view: the
//! names it answers to (`Host`, against DNS rebinding) and where a mutating call
//! may come from (`Origin`, `Referer`, `Sec-Fetch-Site`, against cross-site form
//! posts).
//!
//! Why: the admin listener is on loopback and, by default, without a token, so any
//! web page open in an operator's browser on the same host can reach it. A
//! cross-site form POST needs no CORS approval and carries `Origin` of the foreign
//! page; a rebound DNS name (`evil.example` resolving to 127.0.0.1) carries its own
//! name in `Host`. Scripts (`curl`, keepalived, Prometheus) send neither a foreign
//! `Origin` nor, except Prometheus scraping by host name, a foreign `Host`: the
//! monitoring paths are left out of the `Host` check for that reason.

use std::net::{IpAddr, SocketAddr};

use http::{Request, StatusCode, header};

/// Paths read by monitoring, by whatever name it was configured with; they hold no
/// route, member or audit data.
const MONITORING: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The names the admin listener answers to besides its own address and loopback.
#[derive(Debug, Default)]
pub struct Names {
    /// `admin.hosts` and this host's name, lower-cased.
    names: Vec<String>,
}

/// Why a request was refused before it was looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` is not a name of this listener (DNS rebinding).
    Host,
    /// A mutating call from another origin (a cross-site form or script).
    Origin,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Host => "host",
            Refusal::Origin => "origin",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Refusal::Host => StatusCode::MISDIRECTED_REQUEST,
            Refusal::Origin => StatusCode::FORBIDDEN,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Refusal::Host => {
                "421 this Host is not a name of the admin listener (add it to admin.hosts)\n"
            }
            Refusal::Origin => "403 a cross-origin call cannot change the router\n",
        }
    }
}

impl Names {
    /// `admin.hosts` plus this host's name (from the kernel).
    pub fn new(hosts: &[String]) -> Names {
        let mut names: Vec<String> = hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            let h = h.trim().to_ascii_lowercase();
            if !h.is_empty() {
                names.push(h);
            }
        }
        Names { names }
    }

    /// Refuses a request for another name, or a mutating one from another origin.
    pub fn check<B>(
        &self,
        req: &Request<B>,
        local: SocketAddr,
        mutating: bool,
    ) -> Result<(), Refusal> {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        let monitoring = !mutating && MONITORING.contains(&req.uri().path());
        if let Some(host) = host
            && !monitoring
            && !self.answers_to(host, local)
        {
            return Err(Refusal::Host);
        }
        if mutating && cross_origin(req, host) {
            return Err(Refusal::Origin);
        }
        Ok(())
    }

    /// Whether `host` (a `Host` value, port and all) names this listener: its own
    /// address, a loopback address or `localhost`, or one of the configured names.
    /// The port is not compared: a rebinding page's name is what gives it away,
    /// and an SSH tunnel reaches the listener under another port.
    fn answers_to(&self, host: &str, local: SocketAddr) -> bool {
        let name = strip_port(host).to_ascii_lowercase();
        if let Ok(ip) = name.trim_matches(['[', ']']).parse::<IpAddr>() {
            return ip == local.ip() || ip.is_loopback();
        }
        name == "localhost" || self.names.contains(&name)
    }
}

/// `host` without its `:port`, IPv6 brackets kept.
fn strip_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']')) =>
        {
            name
        }
        _ => host,
    }
}

/// Whether a mutating call comes from a page of another origin than the listener
/// it was sent to: the browser says so (`Sec-Fetch-Site`), or its `Origin` (else
/// its `Referer`) is not `http://<Host>`. A call with none of them (curl, a
/// script) is not a browser's cross-site call.
fn cross_origin<B>(req: &Request<B>, host: Option<&str>) -> bool {
    let headers = req.headers();
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return true;
    }
    let from = match (headers.get(header::ORIGIN), headers.get(header::REFERER)) {
        (Some(o), _) => o.to_str().ok().map(str::to_string),
        (None, Some(r)) => r.to_str().ok().map(origin_of),
        (None, None) => return false,
    };
    let (Some(from), Some(host)) = (from, host) else {
        return true;
    };
    !from.eq_ignore_ascii_case(&format!("http://{host}"))
}

/// `scheme://authority` of a URL (the origin a `Referer` names).
fn origin_of(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return String::new();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    format!("{scheme}://{authority}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, path: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("request")
    }

    fn local() -> SocketAddr {
        "127.0.0.1:9090".parse().expect("addr")
    }

    #[test]
    fn host_must_name_the_listener() {
        let names = Names {
            names: vec!["router-a.example.com".into()],
        };
        for ok in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "localhost:19090",
            "[::1]:9090",
            "ROUTER-A.example.com:9090",
        ] {
            assert_eq!(
                names.check(&req("GET", "/routes", &[("host", ok)]), local(), false),
                Ok(()),
                "{ok}"
            );
        }
        for bad in [
            "evil.example:9090",
            "evil.example",
            "10.0.0.9:9090",
            "127.0.0.1.evil.example",
        ] {
            assert_eq!(
                names.check(&req("GET", "/routes", &[("host", bad)]), local(), false),
                Err(Refusal::Host),
                "{bad}"
            );
        }
        // Monitoring by any name; but not a mutation.
        let scrape = req("GET", "/metrics", &[("host", "router-b.example.com:9090")]);
        assert_eq!(names.check(&scrape, local(), false), Ok(()));
    }

    #[test]
    fn mutations_from_another_origin_are_refused() {
        let names = Names::default();
        let host = ("host", "127.0.0.1:9090");
        let same = [host, ("origin", "http://127.0.0.1:9090")];
        assert_eq!(
            names.check(&req("POST", "/x", &same), local(), true),
            Ok(())
        );
        assert_eq!(
            names.check(&req("POST", "/x", &[host]), local(), true),
            Ok(())
        );
        let referer = [host, ("referer", "http://127.0.0.1:9090/?tab=1")];
        assert_eq!(
            names.check(&req("POST", "/x", &referer), local(), true),
            Ok(())
        );
        for bad in [
            vec![host, ("origin", "http://evil.example")],
            vec![host, ("origin", "null")],
            vec![host, ("origin", "http://127.0.0.1:8000")],
            vec![host, ("referer", "http://evil.example/page")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![host, ("sec-fetch-site", "same-site")],
        ] {
            assert_eq!(
                names.check(&req("POST", "/x", &bad), local(), true),
                Err(Refusal::Origin),
                "{bad:?}"
            );
        }
        // A read carries no such check (a page cannot read the answer anyway).
        let read = [host, ("origin", "http://evil.example")];
        assert_eq!(
            names.check(&req("GET", "/routes", &read), local(), false),
            Ok(())
        );
    }

    #[test]
    fn ports_are_stripped_only_where_they_are() {
        assert_eq!(strip_port("a.b:80"), "a.b");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("::1"), "::1");
        assert_eq!(strip_port("a.b"), "a.b");
        assert_eq!(origin_of("http://h:1/p?q"), "http://h:1");
    }
}
