//! Port numbers and ranges as the portproxy's files and operators write them:
//! plain decimal, nothing else (the configuration, the Simplenetes files, the
//! operator socket all read them here).

use std::ops::RangeInclusive;

use serde::Deserialize;

/// An inclusive port range written `A-B` (or one port `N`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRange(pub RangeInclusive<u16>);

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PortRange, D::Error> {
        let s = String::deserialize(d)?;
        PortRange::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl PortRange {
    pub fn parse(s: &str) -> Result<PortRange, String> {
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let a = strict_port(a.trim())?;
        let b = strict_port(b.trim())?;
        if a > b {
            return Err(format!("range {a}-{b} is reversed"));
        }
        Ok(PortRange(a..=b))
    }

    pub fn contains(&self, port: u16) -> bool {
        self.0.contains(&port)
    }
}

/// A TCP port 1..=65535 written in plain decimal: no sign, no leading zero, no
/// trailing junk (the JS proxy's `parseInt` took `30000abc` as 30000).
pub fn strict_port(s: &str) -> Result<u16, String> {
    let n = strict_u32(s)?;
    match u16::try_from(n) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("port {s} is out of range 1-65535")),
    }
}

/// A non-negative decimal integer that fits in u32, written plainly.
pub fn strict_u32(s: &str) -> Result<u32, String> {
    if s.is_empty() {
        return Err("empty number".into());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{s}` is not a decimal number"));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!("`{s}` has a leading zero"));
    }
    s.parse::<u32>().map_err(|_| format!("`{s}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_numbers() {
        assert_eq!(strict_port("1"), Ok(1));
        assert_eq!(strict_port("65535"), Ok(65535));
        for bad in ["", "0", "65536", "+1", "-1", "01", "1a", " 1", "1.0"] {
            assert!(strict_port(bad).is_err(), "{bad}");
        }
        assert_eq!(strict_u32("4294967295"), Ok(u32::MAX));
        assert!(strict_u32("4294967296").is_err());
        assert_eq!(PortRange::parse("10-20"), Ok(PortRange(10..=20)));
        assert!(PortRange::parse("20-10").is_err());
    }
}
