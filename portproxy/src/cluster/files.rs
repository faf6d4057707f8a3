//! The three Simplenetes files, in their exact formats, parsed
//! strictly: every bad item is an error naming `file:line: field`, and a file with
//! an error is refused whole (the caller keeps the old table).
//!
//! Compatibility with the JS proxy's files: same keys and item syntax, CRLF line ends,
//! a UTF-8 BOM, `#` comments and blank lines are accepted. Differences, on purpose:
//! numbers are plain decimal (`30000abc`, `+1`, `010` are errors, not 30000/1/10),
//! unknown `proxy.conf` keys are errors, `PORT` is honoured, `PODHOST ""` means
//! unset, tabs separate like spaces, duplicate identical items are skipped with a
//! warning, and `hosts.conf` takes IPv6 as `[addr]:port`.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use config_file::ConfigError;

use crate::numbers::{strict_port, strict_u32};
use crate::proxy_protocol::Version;

/// `proxy.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConf {
    /// `PORTSCONF` (relative paths resolved against `proxy.conf`'s directory).
    pub ports_conf: PathBuf,
    /// `HOSTSCONF`.
    pub hosts_conf: PathBuf,
    /// `HOST`: where cluster ports and the proxy port listen; default: the address of
    /// `hosts.conf`'s first line.
    pub host: Option<IpAddr>,
    /// `PORT`: the proxy port peers connect to.
    pub port: u16,
    /// `PODHOST`: where host ports are reached; default `HOST`.
    pub pod_host: Option<IpAddr>,
    /// `CLUSTERPORTS`, merged and sorted.
    pub cluster_ports: Vec<RangeInclusive<u16>>,
}

pub const DEFAULT_PORT: u16 = 32767;
const DEFAULT_CLUSTER_PORTS: &str = "1024-29999,32768-65535";

/// One `clusterPort:hostPort:maxConn:sendProxy` item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    pub cluster_port: u16,
    pub host_port: u16,
    pub max_conn: u32,
    /// `true` = v1 (what the JS proxy sends), `v1`, `v2`; `false` = none.
    pub send_proxy: Option<Version>,
}

/// A parsed file plus what was skipped with a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<T> {
    pub value: T,
    pub warnings: Vec<String>,
}

/// Lines of a text file with BOM and CR removed, trimmed, numbered from 1, without
/// blank and `#` lines.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r').trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

pub fn parse_proxy_conf(text: &str, file: &str, dir: &Path) -> Result<ProxyConf, ConfigError> {
    let mut ports_conf = dir.join("portmappings.conf");
    let mut hosts_conf = dir.join("hosts.conf");
    let mut host = None;
    let mut port = DEFAULT_PORT;
    let mut pod_host = None;
    let mut cluster = None;
    let mut port_line = 0;
    for (n, line) in lines(text) {
        let (key, value) = match line.split_once([' ', '\t']) {
            Some((k, v)) => (k, v.trim()),
            None => (line, ""),
        };
        let key_up = key.to_ascii_uppercase();
        let err = |m: String| ConfigError::at_line(file, n, key_up.as_str(), m);
        if !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ConfigError::at_line(
                file,
                n,
                "",
                format!("`{line}` is not `KEY value`"),
            ));
        }
        let value = unquote(value);
        if value.is_empty() && key_up != "PODHOST" && key_up != "HOST" {
            return Err(err("has no value".into()));
        }
        match key_up.as_str() {
            "PORTSCONF" => ports_conf = dir.join(value),
            "HOSTSCONF" => hosts_conf = dir.join(value),
            "HOST" => host = optional_ip(value).map_err(err)?,
            "PODHOST" => pod_host = optional_ip(value).map_err(err)?,
            "PORT" => {
                port = strict_port(value).map_err(err)?;
                port_line = n;
            }
            "CLUSTERPORTS" => cluster = Some((n, value.to_string())),
            _ => {
                return Err(ConfigError::at_line(
                    file,
                    n,
                    key_up.as_str(),
                    "unknown key (known: PORTSCONF, HOSTSCONF, HOST, PORT, PODHOST, CLUSTERPORTS)",
                ));
            }
        }
    }
    let (cl_line, cl_text) = cluster.unwrap_or((0, DEFAULT_CLUSTER_PORTS.to_string()));
    let at = |m: String| {
        if cl_line == 0 {
            ConfigError::whole_file(file, format!("CLUSTERPORTS: {m}"))
        } else {
            ConfigError::at_line(file, cl_line, "CLUSTERPORTS", m)
        }
    };
    let cluster_ports = parse_port_set(&cl_text).map_err(at)?;
    if cluster_ports.iter().any(|r| r.contains(&port)) {
        let m = format!("the proxy port {port} is inside CLUSTERPORTS");
        return Err(if cl_line == 0 && port_line > 0 {
            ConfigError::at_line(file, port_line, "PORT", m)
        } else {
            at(m)
        });
    }
    Ok(ProxyConf {
        ports_conf,
        hosts_conf,
        host,
        port,
        pod_host,
        cluster_ports,
    })
}

/// `""` and `''` mean empty (the JS README's `PODHOST ""` made a host named `""`).
fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = v.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    v
}

fn optional_ip(v: &str) -> Result<Option<IpAddr>, String> {
    if v.is_empty() {
        return Ok(None);
    }
    v.parse()
        .map(Some)
        .map_err(|_| format!("`{v}` is not an IP address"))
}

/// `N` and `A-B` items, comma-separated; overlaps merge; empty items, reversed
/// ranges and port 0 are errors.
pub fn parse_port_set(s: &str) -> Result<Vec<RangeInclusive<u16>>, String> {
    let mut ranges: Vec<RangeInclusive<u16>> = Vec::new();
    for item in s.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err("empty item".into());
        }
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let a = strict_port(a.trim())?;
        let b = strict_port(b.trim())?;
        if a > b {
            return Err(format!("range {a}-{b} is reversed"));
        }
        ranges.push(a..=b);
    }
    ranges.sort_by_key(|r| *r.start());
    let mut merged: Vec<RangeInclusive<u16>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        if let Some(last) = merged.last_mut()
            && u32::from(*r.start()) <= u32::from(*last.end()) + 1
        {
            if r.end() > last.end() {
                *last = *last.start()..=*r.end();
            }
            continue;
        }
        merged.push(r);
    }
    Ok(merged)
}

/// `hosts.conf`: one `ip:port` (or `[ipv6]:port`) per line, in order.
pub fn parse_hosts_conf(text: &str, file: &str) -> Result<Parsed<Vec<SocketAddr>>, ConfigError> {
    let mut hosts: Vec<SocketAddr> = Vec::new();
    let mut warnings = Vec::new();
    for (n, line) in lines(text) {
        let err = |m: String| ConfigError::at_line(file, n, "host", m);
        let Some((h, p)) = line.rsplit_once(':') else {
            return Err(err(format!("`{line}` is not HOST:PORT")));
        };
        let port = strict_port(p).map_err(err)?;
        let h = h
            .strip_prefix('[')
            .and_then(|x| x.strip_suffix(']'))
            .unwrap_or(h);
        let ip: IpAddr = h.parse().map_err(|_| {
            err(format!(
                "`{h}` is not an IP address (names are not resolved; write the address)"
            ))
        })?;
        let addr = SocketAddr::new(ip, port);
        if hosts.contains(&addr) {
            warnings.push(format!("{file}:{n}: host {addr} is listed twice; skipped"));
            continue;
        }
        hosts.push(addr);
    }
    Ok(Parsed {
        value: hosts,
        warnings,
    })
}

/// `portmappings.conf`: whitespace-separated items, any number per line.
pub fn parse_port_mappings(
    text: &str,
    file: &str,
    proxy_port: u16,
) -> Result<Parsed<Vec<Item>>, ConfigError> {
    let mut items: Vec<Item> = Vec::new();
    let mut seen: std::collections::HashMap<(u16, u16), usize> = std::collections::HashMap::new();
    let mut warnings = Vec::new();
    for (n, line) in lines(text) {
        for word in line.split([' ', '\t']).filter(|w| !w.is_empty()) {
            let err = |field: &str, m: String| {
                ConfigError::at_line(file, n, field, format!("`{word}`: {m}"))
            };
            let fields: Vec<&str> = word.split(':').collect();
            let [c, h, m, s] = fields[..] else {
                return Err(err(
                    "",
                    format!(
                        "has {} fields, expected clusterPort:hostPort:maxConn:sendProxy",
                        fields.len()
                    ),
                ));
            };
            let cluster_port = strict_port(c).map_err(|e| err("clusterPort", e))?;
            if cluster_port < 1024 || (30000..=32767).contains(&cluster_port) {
                return Err(err(
                    "clusterPort",
                    format!("{cluster_port} is outside 1024-65535 or in the reserved 30000-32767"),
                ));
            }
            let host_port = strict_port(h).map_err(|e| err("hostPort", e))?;
            if host_port == proxy_port {
                return Err(err("hostPort", format!("{host_port} is the proxy port")));
            }
            let max_conn = strict_u32(m).map_err(|e| err("maxConn", e))?;
            if max_conn == 0 {
                return Err(err("maxConn", "must be at least 1".into()));
            }
            let send_proxy = match s {
                "true" | "v1" => Some(Version::V1),
                "v2" => Some(Version::V2),
                "false" => None,
                _ => return Err(err("sendProxy", "must be true, false, v1 or v2".into())),
            };
            let item = Item {
                cluster_port,
                host_port,
                max_conn,
                send_proxy,
            };
            match seen.get(&(cluster_port, host_port)) {
                Some(&i) if items[i] == item => {
                    warnings.push(format!("{file}:{n}: `{word}` is listed twice; skipped"));
                }
                Some(_) => {
                    return Err(err(
                        "",
                        format!("{cluster_port}:{host_port} is listed with other settings before"),
                    ));
                }
                None => {
                    seen.insert((cluster_port, host_port), items.len());
                    items.push(item);
                }
            }
        }
    }
    Ok(Parsed {
        value: items,
        warnings,
    })
}

/// Every port of a merged set, for the listener diff.
pub fn ports_of(ranges: &[RangeInclusive<u16>]) -> BTreeSet<u16> {
    ranges.iter().flat_map(|r| r.clone()).collect()
}

#[cfg(test)]
mod tests;
