//! Which ad-hoc repository URLs a deployment will contact (query-style addresses), on the one
//! URL model of [`crate::model`]: the URL and every `allow` pattern are parsed by the same
//! parser and compared part by part (scheme, host, port, path segments), never as text.
//!
//! On top of the `allow` list gitstate refuses what would let a caller reach inside the
//! deployment's network (SSRF): `file://` and local paths, `localhost`, and hosts whose address
//! is loopback, link-local (instance metadata), private, carrier-grade NAT or reserved, unless
//! an `allow` pattern names that very host (no wildcard). The same address rule is applied again
//! to every address a host name resolves to when the transport connects (see
//! [`Admission::network`]), so DNS cannot turn an allowed name into an internal address.
//!
//! Patterns: `scheme://host[:port]/seg/…`. The host is exact, `*` (any host) or `*.example.com`
//! (any name below example.com); the port is exact, `*`, or absent (the scheme's default); each
//! path segment is a glob where `*` matches within that one segment, and a last segment `**`
//! matches any number of segments ([`SegmentPattern`], also the matcher of scoped tokens' paths). The single pattern `*` admits every http(s), git and ssh URL.

use crate::address::internal_host_rule;
use crate::glob::SegmentPattern;
use crate::guard::NetworkGuard;
use crate::model::{Host, RepoUrl, Scheme};

/// One parsed `allow` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowPattern {
    /// The pattern as configured (for messages).
    text: String,
    kind: PatternKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PatternKind {
    /// `*`: every URL of an ad-hoc scheme.
    Everything,
    Url {
        scheme: Scheme,
        host: HostPattern,
        port: PortPattern,
        segments: SegmentPattern,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Any,
    /// `*.example.com`: names ending in `.example.com`.
    Below(String),
    Exact(Host),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PortPattern {
    Default,
    Any,
    Exact(u16),
}

impl AllowPattern {
    /// Parses a pattern; `Err` is the sentence for the configuration error.
    pub fn parse(text: &str) -> Result<AllowPattern, String> {
        let bad = |why: &str| format!("allow pattern '{text}': {why}");
        if text == "*" {
            return Ok(AllowPattern {
                text: text.to_owned(),
                kind: PatternKind::Everything,
            });
        }
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| bad("write scheme://host/path, e.g. https://github.com/acme/*"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "https" => Scheme::Https,
            "http" => Scheme::Http,
            "git" => Scheme::Git,
            "ssh" => Scheme::Ssh,
            _ => {
                return Err(bad(
                    "only https, http, git and ssh repositories can be allowed",
                ))
            }
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.contains('@') {
            return Err(bad("a pattern holds no user name or password"));
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => (host, Some(port)),
            _ => (authority, None),
        };
        let port = match port {
            None => PortPattern::Default,
            Some("*") => PortPattern::Any,
            Some(p) => PortPattern::Exact(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("the port is not a number"))?,
            ),
        };
        let host = if host == "*" {
            HostPattern::Any
        } else if let Some(domain) = host.strip_prefix("*.") {
            match Host::parse(domain).map_err(|e| bad(&e.0))? {
                Host::Domain(name) => HostPattern::Below(name),
                _ => return Err(bad("'*.' only goes before a host name")),
            }
        } else if host.contains('*') {
            return Err(bad("a host is exact, '*', or '*.' followed by a name"));
        } else {
            HostPattern::Exact(Host::parse(host).map_err(|e| bad(&e.0))?)
        };
        if path.trim_end_matches('/').is_empty() {
            return Err(bad("name the repositories, e.g. /acme/* or /acme/**"));
        }
        let segments = SegmentPattern::parse(path).map_err(|e| bad(&e))?;
        Ok(AllowPattern {
            text: text.to_owned(),
            kind: PatternKind::Url {
                scheme,
                host,
                port,
                segments,
            },
        })
    }

    /// The pattern as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn matches(&self, url: &RepoUrl) -> bool {
        let PatternKind::Url {
            scheme,
            host,
            port,
            segments,
        } = &self.kind
        else {
            return true;
        };
        if *scheme != url.scheme() {
            return false;
        }
        let Some(url_host) = url.host() else {
            return false;
        };
        let host_ok = match host {
            HostPattern::Any => true,
            HostPattern::Exact(h) => h == url_host,
            HostPattern::Below(domain) => matches!(url_host,
                Host::Domain(name) if name.len() > domain.len()
                    && name.ends_with(domain.as_str())
                    && name.as_bytes()[name.len() - domain.len() - 1] == b'.'),
        };
        let port_ok = match port {
            PortPattern::Any => true,
            PortPattern::Default => url.effective_port() == scheme.default_port(),
            PortPattern::Exact(p) => url.effective_port() == Some(*p),
        };
        host_ok && port_ok && segments.matches(url.segments())
    }

    /// Whether the pattern names `host` exactly (the operator admitted that very host).
    fn names_host(&self, host: &Host) -> bool {
        matches!(&self.kind, PatternKind::Url { host: HostPattern::Exact(h), .. } if h == host)
    }
}

/// The deployment's policy for ad-hoc repositories.
#[derive(Debug, Clone, Default)]
pub struct UrlPolicy {
    /// Contacted with the caller's credential (pass-through) or none.
    allow: Vec<AllowPattern>,
    /// Also contacted with the deployment's own git credential.
    allow_with_credential: Vec<AllowPattern>,
}

/// What the policy decided for an admitted URL.
#[derive(Debug, Clone)]
pub struct Admission {
    /// The parsed URL: exactly what the transport must be given.
    pub url: RepoUrl,
    /// Whether the deployment's own git credential may be sent to it.
    pub server_credential: bool,
    /// The address rule the transport applies to every resolved address when it connects.
    pub network: NetworkGuard,
}

impl UrlPolicy {
    /// Parses the configured patterns; `Err` names the bad one.
    pub fn new(allow: &[String], allow_with_credential: &[String]) -> Result<UrlPolicy, String> {
        let parse = |list: &[String]| {
            list.iter()
                .map(|p| AllowPattern::parse(p))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(UrlPolicy {
            allow: parse(allow)?,
            allow_with_credential: parse(allow_with_credential)?,
        })
    }

    /// Checks an ad-hoc repository URL; `Err` holds the sentence for the 403.
    pub fn admit(&self, raw: &str) -> Result<Admission, String> {
        if self.allow.is_empty() && self.allow_with_credential.is_empty() {
            return Err(
                "query-style repositories are disabled: the configuration has no 'allow' list"
                    .into(),
            );
        }
        let url = RepoUrl::parse(raw).map_err(|e| format!("the repository is refused: {e}"))?;
        let shown = url.display();
        if url.has_password() || url.userinfo().is_some_and(|_| url.scheme() != Scheme::Ssh) {
            return Err(format!(
                "the repository {shown} is refused: an ad-hoc URL carries no user name or password; send them as the backend's username and password"
            ));
        }
        if !matches!(
            url.scheme(),
            Scheme::Https | Scheme::Http | Scheme::Git | Scheme::Ssh
        ) {
            return Err(format!(
                "the repository {shown} is refused: only http(s), git and ssh URLs may be used ad hoc"
            ));
        }
        let with_credential: Vec<&AllowPattern> = self
            .allow_with_credential
            .iter()
            .filter(|p| p.matches(&url))
            .collect();
        let matching: Vec<&AllowPattern> = self
            .allow
            .iter()
            .filter(|p| p.matches(&url))
            .chain(with_credential.iter().copied())
            .collect();
        if matching.is_empty() {
            return Err(format!(
                "the repository {shown} does not match the 'allow' list"
            ));
        }
        let host = url.host().ok_or_else(|| {
            format!("the repository {shown} is refused: only http(s), git and ssh URLs may be used ad hoc")
        })?;
        let named = matching.iter().any(|p| p.names_host(host));
        if let Some(rule) = internal_host_rule(host) {
            if !named {
                return Err(format!(
                    "the repository {shown} is refused: {rule} unless an 'allow' pattern names the host"
                ));
            }
        }
        Ok(Admission {
            server_credential: !with_credential.is_empty(),
            network: NetworkGuard {
                refuse_internal: !named,
                follow_redirects: false,
            },
            url,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(patterns: &[&str]) -> UrlPolicy {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        UrlPolicy::new(&patterns, &[]).unwrap()
    }

    fn check(url: &str, patterns: &[&str]) -> Result<Admission, String> {
        policy(patterns).admit(url)
    }

    #[test]
    fn everything_allowed_still_refuses_internal_targets() {
        for (url, needle) in [
            ("file:///etc/passwd", "only http(s)"),
            ("/etc/passwd", "neither a URL"),
            ("http://127.0.0.1/x.git", "loopback"),
            ("http://%31%32%37.0.0.1:8080/x.git", "loopback"),
            ("http://127.1/x.git", "loopback"),
            ("http://2130706433/x.git", "loopback"),
            ("http://localhost:8080/x.git", "loopback"),
            ("http://LOCALHOST./x.git", "loopback"),
            ("http://[::1]/x.git", "loopback"),
            ("http://[::ffff:127.0.0.1]/x.git", "loopback"),
            ("http://169.254.169.254/latest/meta-data", "link-local"),
            ("http://[64:ff9b::a9fe:a9fe]/x.git", "link-local"),
            ("http://10.1.2.3/x.git", "private"),
            ("https://192.168.0.10/x.git", "private"),
            ("https://172.20.0.1/x.git", "private"),
            ("http://[fd00::1]/x.git", "private"),
            ("http://0.0.0.0/x.git", "unroutable"),
            ("https://github.com/acme/../evil/x.git", "dot segments"),
            ("ext::sh -c evil", "space"),
        ] {
            let err = check(url, &["*"]).unwrap_err();
            assert!(err.contains(needle), "{url}: {err}");
        }
        let ok = check("https://github.com/acme/x.git", &["*"]).unwrap();
        assert!(!ok.server_credential);
        assert!(ok.network.refuse_internal);
    }

    #[test]
    fn globs_never_cross_a_segment_and_paths_are_parsed_before_matching() {
        let team = ["http://git.example.com/git/team-*"];
        assert!(check("http://git.example.com/git/team-a.git", &team).is_ok());
        for url in [
            "http://git.example.com/git/team-a.git\\..\\secret.git",
            "http://git.example.com/git/team-a.git/..%2fsecret.git",
            "http://git.example.com/git/team-a.git/%2e%2e/secret.git",
            "http://git.example.com/git/team-a/secret.git",
            "http://git.example.com/git/secret.git",
            "http://git.example.com:8080/git/team-a.git",
            "https://git.example.com/git/team-a.git",
            "http://evil.com/git.example.com/git/team-a.git",
            "http://git.example.com.evil.com/git/team-a.git",
        ] {
            assert!(check(url, &team).is_err(), "{url} passed");
        }
        let deep = ["https://gitlab.example.com/acme/**"];
        assert!(check("https://gitlab.example.com/acme/a/b/c.git", &deep).is_ok());
        assert!(check("https://gitlab.example.com/other/a.git", &deep).is_err());
        let below = ["https://*.example.com/acme/*"];
        assert!(check("https://git.example.com/acme/x.git", &below).is_ok());
        assert!(check("https://a.b.example.com/acme/x.git", &below).is_ok());
        assert!(check("https://example.com/acme/x.git", &below).is_err());
        assert!(check("https://badexample.com/acme/x.git", &below).is_err());
    }

    #[test]
    fn a_literal_host_in_allow_admits_it() {
        let literal = ["git://127.0.0.1:*/states/*"];
        let admitted = check("git://127.0.0.1:9418/states/a.git", &literal).unwrap();
        assert!(!admitted.network.refuse_internal);
        assert!(check("git://127.1:9418/states/a.git", &literal).is_ok());
        let wildcard_host = ["git://*:*/states/*"];
        assert!(check("git://127.0.0.1:9418/states/a.git", &wildcard_host).is_err());
        let other = ["https://github.com/acme/*"];
        let err = check("https://github.com/evil/x.git", &other).unwrap_err();
        assert!(err.contains("'allow' list"), "{err}");
        assert!(check("https://github.com/acme/x.git", &[])
            .unwrap_err()
            .contains("disabled"));
    }

    #[test]
    fn userinfo_is_refused_and_never_shown() {
        let err = check("http://user:hunter2@github.com/x.git", &["*"]).unwrap_err();
        assert!(err.contains("no user name or password"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = check("http://user:hunter2@10.0.0.1/x.git", &["*"]).unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(check("ssh://git@github.com/acme/x.git", &["*"]).is_ok());
    }

    #[test]
    fn only_credential_patterns_give_the_server_credential() {
        let p = UrlPolicy::new(
            &["https://github.com/*/*".into()],
            &["https://github.com/acme/*".into()],
        )
        .unwrap();
        assert!(
            p.admit("https://github.com/acme/x.git")
                .unwrap()
                .server_credential
        );
        assert!(
            !p.admit("https://github.com/other/x.git")
                .unwrap()
                .server_credential
        );
    }

    #[test]
    fn bad_patterns_are_configuration_errors() {
        for bad in [
            "github.com/acme/*",
            "file:///srv/*",
            "https://u:p@github.com/*",
            "https://git*.example.com/x/*",
            "https://github.com",
            "https://github.com/**/x",
            "https://github.com/../x",
        ] {
            assert!(AllowPattern::parse(bad).is_err(), "{bad}");
        }
    }
}
