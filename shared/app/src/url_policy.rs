//! Which ad-hoc repository URLs a deployment will contact (query-style addresses). The `allow`
//! list decides, and on top of it gitstate refuses what would let a caller reach inside the
//! deployment's network (SSRF): `file://` and local paths, loopback, link-local (169.254.0.0/16,
//! the instance metadata service), private and unique-local ranges — unless an `allow` pattern
//! names that very host literally (no wildcard in the host).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::registry::glob_match;

/// The parts of a repository URL the policy looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlParts {
    /// `https`, `http`, `git`, `ssh`, …
    pub scheme: String,
    /// Host name or IP literal (brackets removed for IPv6).
    pub host: String,
    /// Path after the authority, starting with `/` (may be empty).
    pub path: String,
}

/// Splits `scheme://[user[:password]@]host[:port]/path`.
pub fn parse(url: &str) -> Option<UrlParts> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        bracketed.split_once(']')?.0
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return None;
    }
    Some(UrlParts {
        scheme: scheme.to_ascii_lowercase(),
        host: host.to_ascii_lowercase(),
        path: path.to_owned(),
    })
}

/// The rule an internal address breaks, for the error sentence.
fn internal_address_rule(host: &str) -> Option<&'static str> {
    if host == "localhost" || host.ends_with(".localhost") {
        return Some("loopback addresses are refused");
    }
    let host = host.trim_end_matches('.');
    // Resolvers (and so the git transports) also accept IPv4 in the legacy inet_aton forms:
    // `127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`. Read them the same way.
    let ip: IpAddr = match host.parse() {
        Ok(ip) => ip,
        Err(_) => IpAddr::V4(legacy_ipv4(host)?),
    };
    let ip = match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => v4_rule(v4),
        IpAddr::V6(v6) => v6_rule(v6),
    }
}

/// An IPv4 address written the way `inet_aton` reads it: 1 to 4 dot-separated parts, each
/// decimal, octal (leading `0`) or hex (`0x`); the last part fills the remaining bytes.
fn legacy_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        let value = if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            u64::from_str_radix(hex, 16).ok()?
        } else if part.len() > 1 && part.starts_with('0') {
            u64::from_str_radix(&part[1..], 8).ok()?
        } else if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse::<u64>().ok()?
        } else {
            return None;
        };
        values.push(value);
    }
    let (last, leading) = values.split_last()?;
    if leading.iter().any(|v| *v > 255) {
        return None;
    }
    let last_bits = 8 * (4 - leading.len() as u32);
    if *last >= 1u64 << last_bits {
        return None;
    }
    let mut address: u64 = 0;
    for (i, v) in leading.iter().enumerate() {
        address |= v << (24 - 8 * i as u32);
    }
    address |= last;
    Some(Ipv4Addr::from(address as u32))
}

fn v4_rule(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_loopback() {
        Some("loopback addresses are refused")
    } else if ip.is_link_local() {
        Some("link-local addresses (169.254.0.0/16, instance metadata) are refused")
    } else if ip.is_private() {
        Some("private network addresses are refused")
    } else if ip.is_unspecified() || ip.is_broadcast() || ip.octets()[0] == 0 {
        Some("unroutable addresses are refused")
    } else if ip.octets()[0] == 100 && (64..128).contains(&ip.octets()[1]) {
        Some("carrier-grade NAT addresses (100.64.0.0/10) are refused")
    } else {
        None
    }
}

fn v6_rule(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_loopback() {
        Some("loopback addresses are refused")
    } else if ip.is_unspecified() {
        Some("unroutable addresses are refused")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local addresses are refused")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private network addresses (fc00::/7) are refused")
    } else {
        None
    }
}

/// True when `pattern`'s host is exactly `host` (no wildcard): the operator named it on purpose.
fn names_host_literally(pattern: &str, host: &str) -> bool {
    parse(pattern).is_some_and(|p| !p.host.contains('*') && p.host == host)
}

/// Checks an ad-hoc repository URL; `Err` holds the sentence for the 403.
pub fn check(url: &str, allow: &[String]) -> Result<(), String> {
    let shown = crate::config::redact_url(url);
    if allow.is_empty() {
        return Err(
            "query-style repositories are disabled: the configuration has no 'allow' list".into(),
        );
    }
    let Some(parts) = parse(url) else {
        return Err(format!(
            "the repository {shown} is refused: only http(s), git and ssh URLs may be used ad hoc"
        ));
    };
    if !matches!(parts.scheme.as_str(), "https" | "http" | "git" | "ssh") {
        return Err(format!(
            "the repository {shown} is refused: only http(s), git and ssh URLs may be used ad hoc"
        ));
    }
    if parts
        .path
        .split('/')
        .any(|segment| segment == ".." || segment == ".")
        || parts.path.contains("%2e")
        || parts.path.contains("%2E")
    {
        return Err(format!(
            "the repository {shown} is refused: dot segments are not allowed in its path"
        ));
    }
    let matching: Vec<&String> = allow.iter().filter(|p| glob_match(p, url)).collect();
    if matching.is_empty() {
        return Err(format!(
            "the repository {shown} does not match the 'allow' list"
        ));
    }
    if let Some(rule) = internal_address_rule(&parts.host) {
        if !matching
            .iter()
            .any(|p| names_host_literally(p, &parts.host))
        {
            return Err(format!(
                "the repository {shown} is refused: {rule} unless an 'allow' pattern names the host"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(patterns: &[&str]) -> Vec<String> {
        patterns.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn parses_urls() {
        let p = parse("https://u:p@Example.com:8443/a/b.git").unwrap();
        assert_eq!(
            (p.scheme.as_str(), p.host.as_str(), p.path.as_str()),
            ("https", "example.com", "/a/b.git")
        );
        assert_eq!(parse("git://[::1]:9418/x.git").unwrap().host, "::1");
        assert!(parse("/srv/repo.git").is_none());
        assert!(parse("https:///x").is_none());
    }

    #[test]
    fn everything_allowed_still_refuses_internal_targets() {
        let all = allow(&["*"]);
        for (url, needle) in [
            ("file:///etc/passwd", "only http(s)"),
            ("http://127.0.0.1/x.git", "loopback"),
            ("http://localhost:8080/x.git", "loopback"),
            ("http://[::1]/x.git", "loopback"),
            ("http://[::ffff:127.0.0.1]/x.git", "loopback"),
            ("http://169.254.169.254/latest/meta-data/", "link-local"),
            ("http://10.1.2.3/x.git", "private"),
            ("https://192.168.0.10/x.git", "private"),
            ("https://172.20.0.1/x.git", "private"),
            ("http://[fd00::1]/x.git", "private"),
            ("http://0.0.0.0/x.git", "unroutable"),
            ("https://github.com/acme/../evil/x.git", "dot segments"),
        ] {
            let err = check(url, &all).unwrap_err();
            assert!(err.contains(needle), "{url}: {err}");
        }
        assert!(check("https://github.com/acme/x.git", &all).is_ok());
    }

    #[test]
    fn legacy_ipv4_forms_are_read_like_resolvers_read_them() {
        for (host, ip) in [
            ("127.1", "127.0.0.1"),
            ("2130706433", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("10.1.2", "10.1.0.2"),
            ("169.254.43518", "169.254.169.254"),
        ] {
            assert_eq!(legacy_ipv4(host), Some(ip.parse().unwrap()), "{host}");
            assert!(internal_address_rule(host).is_some(), "{host}");
        }
        for host in ["github.com", "1.2.3.4.5", "256.1", "0x", "1..2", "8.8.8.8x"] {
            assert_eq!(legacy_ipv4(host), None, "{host}");
        }
        assert!(internal_address_rule("8.8.8.8").is_none());
        assert!(
            internal_address_rule("134744072").is_none(),
            "8.8.8.8 in decimal"
        );
    }

    #[test]
    fn a_literal_host_in_allow_admits_it() {
        let literal = allow(&["git://127.0.0.1:*/states/*"]);
        assert!(check("git://127.0.0.1:9418/states/a.git", &literal).is_ok());
        let wildcard_host = allow(&["git://*/states/*"]);
        assert!(check("git://127.0.0.1:9418/states/a.git", &wildcard_host).is_err());
        let other = allow(&["https://github.com/acme/*"]);
        let err = check("https://github.com/evil/x.git", &other).unwrap_err();
        assert!(err.contains("'allow' list"), "{err}");
        assert!(check("https://github.com/acme/x.git", &[])
            .unwrap_err()
            .contains("disabled"));
    }

    #[test]
    fn credentials_never_appear_in_refusals() {
        let err = check("http://user:hunter2@10.0.0.1/x.git", &allow(&["*"])).unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
