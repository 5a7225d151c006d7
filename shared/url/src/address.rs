//! The internal-address rules (SSRF): which IP addresses and hosts lie inside a deployment's
//! network. The ad-hoc URL policy ([`crate::policy`]) applies them to a URL's literal host, and
//! [`crate::guard::NetworkGuard`] to every address a name resolves to, at connect time.

use std::net::IpAddr;

use crate::model::{canonical_ip, Host};

/// The rule an address inside a deployment's network breaks (SSRF), or `None` for a public
/// address: loopback, link-local (169.254.0.0/16: instance metadata), private (RFC 1918,
/// fc00::/7), carrier-grade NAT (100.64.0.0/10), unspecified, broadcast, multicast, reserved.
pub fn internal_address_rule(ip: IpAddr) -> Option<&'static str> {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("loopback addresses are refused")
            } else if v4.is_link_local() {
                Some("link-local addresses (169.254.0.0/16, instance metadata) are refused")
            } else if v4.is_private() {
                Some("private network addresses are refused")
            } else if a == 100 && (64..128).contains(&b) {
                Some("carrier-grade NAT addresses (100.64.0.0/10) are refused")
            } else if v4.is_unspecified() || v4.is_broadcast() || a == 0 || a >= 224 {
                Some("unroutable, multicast and reserved addresses are refused")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback addresses are refused")
            } else if v6.is_unspecified() || v6.is_multicast() {
                Some("unroutable, multicast and reserved addresses are refused")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local addresses are refused")
            } else if first & 0xfe00 == 0xfc00 {
                Some("private network addresses (fc00::/7) are refused")
            } else {
                None
            }
        }
    }
}

/// The rule a host breaks by its name or literal address, before any resolution: `localhost`
/// and `*.localhost` are loopback by definition; numeric hosts by [`internal_address_rule`].
pub fn internal_host_rule(host: &Host) -> Option<&'static str> {
    match host {
        Host::Domain(name) if name == "localhost" || name.ends_with(".localhost") => {
            Some("loopback addresses are refused")
        }
        Host::Domain(_) => None,
        other => other.ip().and_then(internal_address_rule),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RepoUrl;

    fn parse(raw: &str) -> RepoUrl {
        RepoUrl::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    #[test]
    fn hosts_are_read_the_way_resolvers_read_them() {
        for (raw, ip) in [
            ("http://127.1/x", "127.0.0.1"),
            ("http://2130706433/x", "127.0.0.1"),
            ("http://0x7f000001/x", "127.0.0.1"),
            ("http://0177.0.0.1/x", "127.0.0.1"),
            ("http://%31%32%37.0.0.1/x", "127.0.0.1"),
            ("git://%31%32%37.0.0.1:9418/x", "127.0.0.1"),
            ("http://127.0.0.1./x", "127.0.0.1"),
            ("http://[::ffff:127.0.0.1]/x", "127.0.0.1"),
            ("http://[::ffff:7f00:1]/x", "127.0.0.1"),
            ("http://[64:ff9b::a9fe:a9fe]/x", "169.254.169.254"),
            ("http://[2002:a9fe:a9fe::]/x", "169.254.169.254"),
        ] {
            let host = parse(raw).host().unwrap().clone();
            assert_eq!(host.ip(), Some(ip.parse().unwrap()), "{raw}");
            assert!(internal_host_rule(&host).is_some(), "{raw}");
        }
        assert_eq!(
            parse("https://EXAMPLE.com./x").host(),
            Some(&Host::Domain("example.com".into()))
        );
        assert_eq!(
            parse("https://bücher.example/x").host(),
            Some(&Host::Domain("xn--bcher-kva.example".into()))
        );
        assert!(internal_host_rule(&Host::Domain("LOCALHOST".to_ascii_lowercase())).is_some());
        assert!(internal_host_rule(&Host::Domain("a.localhost".into())).is_some());
        assert!(internal_host_rule(&Host::Domain("example.com".into())).is_none());
    }

    #[test]
    fn internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "ff02::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(internal_address_rule(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in ["8.8.8.8", "140.82.112.3", "2606:4700::1111"] {
            assert!(internal_address_rule(ip.parse().unwrap()).is_none(), "{ip}");
        }
    }
}
