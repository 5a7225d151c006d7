//! The one model of a repository URL: parse once, normalise, then let the allow-list policy, the
//! logs and the git transport all work from the same parsed value.
//!
//! [`RepoUrl::parse`] reads `scheme://[user[:password]@]host[:port]/path` (schemes `https`,
//! `http`, `git`, `ssh`, `file`) and the scp-like `[user@]host:path` (ssh), and normalises:
//!
//! - the host as WHATWG URL parsers read it (the `url` crate): percent-decoding, IDNA to
//!   lower-case ASCII, IPv4 in every notation a resolver accepts (`127.1`, `2130706433`,
//!   `0x7f000001`, `0177.0.0.1`), IPv6 in brackets; a trailing dot is dropped;
//! - the path into decoded segments: `%XX` escapes decoded, and refused when they decode to `/`,
//!   `\`, a control character or anything outside the characters a repository path needs;
//!   `.`/`..` segments, backslashes, empty segments, queries and fragments are refused.
//!
//! What is handed to the transport ([`RepoUrl::transport_url`]) is re-serialised from these
//! parts, with no escape left in it, so the transport cannot read anything but what the policy
//! checked. Credentials never appear in [`RepoUrl::display`] or [`Display`](std::fmt::Display).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

/// Why a URL was refused; the message is one sentence and never holds a credential.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct UrlError(pub String);

/// The transports gitstate speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    Https,
    Http,
    Git,
    Ssh,
    File,
}

impl Scheme {
    fn parse(text: &str) -> Option<Scheme> {
        match text.to_ascii_lowercase().as_str() {
            "https" => Some(Scheme::Https),
            "http" => Some(Scheme::Http),
            "git" => Some(Scheme::Git),
            "ssh" | "git+ssh" | "ssh+git" => Some(Scheme::Ssh),
            "file" => Some(Scheme::File),
            _ => None,
        }
    }

    /// The scheme's name in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
            Scheme::Git => "git",
            Scheme::Ssh => "ssh",
            Scheme::File => "file",
        }
    }

    /// The port used when a URL names none.
    pub fn default_port(self) -> Option<u16> {
        match self {
            Scheme::Https => Some(443),
            Scheme::Http => Some(80),
            Scheme::Git => Some(9418),
            Scheme::Ssh => Some(22),
            Scheme::File => None,
        }
    }

    /// Whether the transport carries an HTTP basic-auth credential (the only kind a caller can
    /// pass through).
    pub fn carries_basic_auth(self) -> bool {
        matches!(self, Scheme::Https | Scheme::Http)
    }
}

/// A normalised host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name: lower-case ASCII (IDNA applied), no trailing dot.
    Domain(String),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl Host {
    /// Parses a host as WHATWG URL parsers do (percent-decoding, IDNA, every IPv4 notation,
    /// `[v6]`), then drops a trailing dot of a name.
    pub fn parse(text: &str) -> Result<Host, UrlError> {
        if text.is_empty() {
            return Err(UrlError("the URL has no host".into()));
        }
        let bad = || UrlError(format!("'{}' is not a valid host name", shown(text)));
        if text.starts_with('[') && text.contains('%') {
            return Err(UrlError(
                "IPv6 zone identifiers are not allowed in a host".into(),
            ));
        }
        match url::Host::parse(text).map_err(|_| bad())? {
            url::Host::Ipv4(v4) => Ok(Host::V4(v4)),
            url::Host::Ipv6(v6) => Ok(Host::V6(v6)),
            url::Host::Domain(name) => {
                let name = name.strip_suffix('.').unwrap_or(&name).to_owned();
                if name.is_empty() || name.ends_with('.') || name.contains("..") {
                    return Err(bad());
                }
                if !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                {
                    return Err(bad());
                }
                // `127.0.0.1.` is a name until the dot goes; read it again as an address.
                if let Ok(url::Host::Ipv4(v4)) = url::Host::parse(&name) {
                    return Ok(Host::V4(v4));
                }
                Ok(Host::Domain(name))
            }
        }
    }

    /// The IP address, for a numeric host; IPv4-mapped and NAT64/6to4 forms of an IPv4
    /// address give that IPv4 address.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Domain(_) => None,
            Host::V4(v4) => Some(IpAddr::V4(*v4)),
            Host::V6(v6) => Some(canonical_ip(IpAddr::V6(*v6))),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Domain(name) => f.write_str(name),
            Host::V4(v4) => write!(f, "{v4}"),
            Host::V6(v6) => write!(f, "[{v6}]"),
        }
    }
}

/// A user name and password taken out of a URL.
#[derive(Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub user: String,
    pub password: Option<String>,
}

impl fmt::Debug for UserInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserInfo")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A parsed, normalised repository URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoUrl {
    scheme: Scheme,
    userinfo: Option<UserInfo>,
    /// `None` only for `file://` URLs.
    host: Option<Host>,
    port: Option<u16>,
    segments: Vec<String>,
    /// How the address was written; an scp-like one is serialised back the same way, since its
    /// path may be relative to the login directory there.
    form: Form,
}

/// The written form of a repository address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// `scheme://host/path`.
    Hierarchical,
    /// `[user@]host:path`: the path is relative to the login directory.
    ScpRelative,
    /// `[user@]host:/path`: an absolute path on the server.
    ScpAbsolute,
}

/// Characters a path segment may hold once decoded: RFC 3986 unreserved characters, and `@`,
/// `+`, `:`, `,`, `=`, `!`, `$`, `'`, `(`, `)`, `;` (forge paths use some of these; none has a
/// meaning to git's transports). Everything else is refused rather than escaped.
fn segment_char_allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~@+:,=!$'();".contains(c)
}

impl RepoUrl {
    /// Parses and normalises `raw` (see the module documentation).
    pub fn parse(raw: &str) -> Result<RepoUrl, UrlError> {
        if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(UrlError(
                "the repository URL contains a space or a control character".into(),
            ));
        }
        if raw.contains('\\') {
            return Err(UrlError(
                "the repository URL contains a backslash, which URL parsers read differently"
                    .into(),
            ));
        }
        if raw.contains('?') || raw.contains('#') {
            return Err(UrlError(
                "the repository URL has a query or a fragment; a git URL has neither".into(),
            ));
        }
        match raw.split_once("://") {
            Some((scheme, rest)) => {
                let scheme = Scheme::parse(scheme).ok_or_else(|| {
                    UrlError(format!(
                        "the URL scheme '{}' is not supported; use https://, http://, ssh://, git:// or file://",
                        shown(scheme)
                    ))
                })?;
                Self::parse_hierarchical(scheme, rest)
            }
            None => Self::parse_scp_like(raw),
        }
    }

    fn parse_hierarchical(scheme: Scheme, rest: &str) -> Result<RepoUrl, UrlError> {
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((info, host_port)) => (Some(parse_userinfo(info)?), host_port),
            None => (None, authority),
        };
        if scheme == Scheme::File {
            if userinfo.is_some() || !(host_port.is_empty() || host_port == "localhost") {
                return Err(UrlError(
                    "a file:// URL names no host: write file:///path/to/repository.git".into(),
                ));
            }
            let segments = parse_path(path)?;
            if segments.is_empty() {
                return Err(UrlError("a file:// URL must name a repository path".into()));
            }
            return Ok(RepoUrl {
                scheme,
                userinfo: None,
                host: None,
                port: None,
                segments,
                form: Form::Hierarchical,
            });
        }
        let (host, port) = split_host_port(host_port)?;
        if scheme == Scheme::Ssh {
            check_login(userinfo.as_ref())?;
        }
        if (scheme == Scheme::Ssh || scheme == Scheme::Git)
            && userinfo.as_ref().is_some_and(|u| u.password.is_some())
        {
            return Err(UrlError(format!(
                "a password in a {}:// URL is not used by that transport; remove it",
                scheme.as_str()
            )));
        }
        Ok(RepoUrl {
            scheme,
            userinfo,
            host: Some(Host::parse(host)?),
            port,
            segments: parse_path(path)?,
            form: Form::Hierarchical,
        })
    }

    /// `[user@]host:path`, as git reads it: only when the part before the first `:` has no `/`.
    fn parse_scp_like(raw: &str) -> Result<RepoUrl, UrlError> {
        let not_a_url = || {
            UrlError(
                "the repository is neither a URL (scheme://host/path) nor an ssh address (user@host:path)"
                    .into(),
            )
        };
        let (authority, path) = raw.split_once(':').ok_or_else(not_a_url)?;
        if authority.contains('/') || authority.is_empty() || path.is_empty() {
            return Err(not_a_url());
        }
        if path.starts_with(':') {
            // `transport::address` runs a git remote helper (`ext::` runs a command).
            return Err(UrlError(
                "the repository is a git remote-helper address (transport::address), which gitstate never runs"
                    .into(),
            ));
        }
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(parse_userinfo(user)?), host),
            None => (None, authority),
        };
        if userinfo.as_ref().is_some_and(|u| u.password.is_some()) {
            return Err(UrlError(
                "a password in an ssh address is not used by ssh; remove it".into(),
            ));
        }
        check_login(userinfo.as_ref())?;
        let (form, path) = match path.strip_prefix('/') {
            Some(absolute) => (Form::ScpAbsolute, absolute),
            None => (Form::ScpRelative, path),
        };
        let segments = parse_path(&format!("/{path}"))?;
        if segments.is_empty() {
            return Err(UrlError(
                "the ssh address names no repository (nothing after 'host:')".into(),
            ));
        }
        if form == Form::ScpAbsolute && segments[0].starts_with('~') {
            // git and gix read `host:/~user/x` as `~user/x`, under a home directory: not the
            // absolute path the policy would see.
            return Err(UrlError(
                "an ssh address 'host:/~…' names a home directory, not an absolute path; write 'host:~…'"
                    .into(),
            ));
        }
        Ok(RepoUrl {
            scheme: Scheme::Ssh,
            userinfo,
            host: Some(Host::parse(host)?),
            port: None,
            segments,
            form,
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The host (`None` for `file://`).
    pub fn host(&self) -> Option<&Host> {
        self.host.as_ref()
    }

    /// The port the URL names, if any.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The port a connection goes to: the URL's, or the scheme's default.
    pub fn effective_port(&self) -> Option<u16> {
        self.port.or(self.scheme.default_port())
    }

    /// The decoded path segments.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The user name and password the URL carried.
    pub fn userinfo(&self) -> Option<&UserInfo> {
        self.userinfo.as_ref()
    }

    /// Whether the URL carried a password (a credential) in it.
    pub fn has_password(&self) -> bool {
        self.userinfo.as_ref().is_some_and(|u| u.password.is_some())
    }

    /// The same URL without user name and password.
    pub fn without_userinfo(&self) -> RepoUrl {
        RepoUrl {
            userinfo: None,
            ..self.clone()
        }
    }

    /// The URL as shown in logs, messages and the catalog: no password, no user name for
    /// http(s) (it is half of a credential there); ssh keeps its login name.
    pub fn display(&self) -> String {
        self.serialise(self.scheme == Scheme::Ssh)
    }

    /// What the git transport is given: the normalised parts, no escapes, no password; an ssh
    /// login name is kept (it is not a secret and ssh needs it).
    pub fn transport_url(&self) -> String {
        self.serialise(self.scheme == Scheme::Ssh)
    }

    fn serialise(&self, with_user: bool) -> String {
        let user = match (&self.userinfo, with_user) {
            (Some(u), true) => format!("{}@", u.user),
            _ => String::new(),
        };
        let path = self.segments.join("/");
        let Some(host) = &self.host else {
            return format!("file:///{path}");
        };
        match self.form {
            Form::ScpRelative => return format!("{user}{host}:{path}"),
            Form::ScpAbsolute => return format!("{user}{host}:/{path}"),
            Form::Hierarchical => {}
        }
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://{user}{host}{port}/{path}", self.scheme.as_str())
    }
}

impl fmt::Display for RepoUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

fn parse_userinfo(info: &str) -> Result<UserInfo, UrlError> {
    let (user, password) = match info.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (info, None),
    };
    let decode = |text: &str, what: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .map(|s| s.into_owned())
            .map_err(|_| UrlError(format!("the {what} in the URL is not valid UTF-8")))
    };
    let user = decode(user, "user name")?;
    if user.chars().any(char::is_control) {
        return Err(UrlError(
            "the user name in the URL holds a control character".into(),
        ));
    }
    Ok(UserInfo {
        user,
        password: password.map(|p| decode(p, "password")).transpose()?,
    })
}

/// An ssh login name goes into the URL the transport reads: letters, digits, `.`, `_`, `-`.
fn check_login(userinfo: Option<&UserInfo>) -> Result<(), UrlError> {
    match userinfo {
        Some(u)
            if u.user.is_empty()
                || !u
                    .user
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) =>
        {
            Err(UrlError(
                "an ssh login name may only hold letters, digits, '.', '_' and '-'".into(),
            ))
        }
        _ => Ok(()),
    }
}

fn split_host_port(host_port: &str) -> Result<(&str, Option<u16>), UrlError> {
    let (host, port) = if host_port.starts_with('[') {
        match host_port.find(']') {
            Some(end) => {
                let (host, rest) = host_port.split_at(end + 1);
                match rest.strip_prefix(':') {
                    Some(port) => (host, Some(port)),
                    None if rest.is_empty() => (host, None),
                    None => return Err(UrlError("the URL's host is malformed".into())),
                }
            }
            None => return Err(UrlError("the URL's IPv6 host has no closing ']'".into())),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    let port = match port {
        None => None,
        Some("") => None,
        Some(p) => Some(
            Some(p)
                .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u16>().ok())
                .filter(|p| *p != 0)
                .ok_or_else(|| UrlError(format!("'{}' is not a valid port", shown(p))))?,
        ),
    };
    Ok((host, port))
}

/// Decodes `/seg/seg/…` into segments (a trailing `/` is dropped; `/` alone, a repository at
/// the server's root, has none).
fn parse_path(path: &str) -> Result<Vec<String>, UrlError> {
    let path = path.strip_prefix('/').unwrap_or(path);
    let path = path.strip_suffix('/').unwrap_or(path);
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let mut segments = Vec::new();
    for raw in path.split('/') {
        if raw.is_empty() {
            return Err(UrlError(
                "the repository path has an empty segment ('//')".into(),
            ));
        }
        let decoded = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| UrlError("the repository path is not valid UTF-8".into()))?;
        if raw.contains('%') {
            let malformed = raw
                .split('%')
                .skip(1)
                .any(|s| s.len() < 2 || !s.as_bytes()[..2].iter().all(u8::is_ascii_hexdigit));
            if malformed {
                return Err(UrlError(
                    "the repository path has a malformed %-escape".into(),
                ));
            }
        }
        if decoded == "." || decoded == ".." {
            return Err(UrlError(
                "dot segments ('.', '..') are not allowed in the repository path".into(),
            ));
        }
        if let Some(c) = decoded.chars().find(|c| !segment_char_allowed(*c)) {
            let what = match c {
                '/' => "an encoded '/'".to_owned(),
                '\\' => "a backslash".to_owned(),
                c if c.is_control() => "a control character".to_owned(),
                c => format!("the character {c:?}"),
            };
            return Err(UrlError(format!(
                "the repository path holds {what}, which is not allowed in a repository URL"
            )));
        }
        segments.push(decoded.into_owned());
    }
    Ok(segments)
}

/// At most 60 characters of a refused piece of URL, for a message (never a whole URL, which
/// may hold a password).
fn shown(text: &str) -> String {
    let mut s: String = text.chars().take(60).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// An IPv6 address that embeds an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) as that IPv4 address; others unchanged.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if s[..6] == [0, 0, 0, 0, 0, 0] && !v6.is_loopback() && !v6.is_unspecified() {
        return IpAddr::V4(embedded(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return IpAddr::V4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return IpAddr::V4(embedded(s[1], s[2]));
    }
    IpAddr::V6(v6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::redact_in_text;

    fn parse(raw: &str) -> RepoUrl {
        RepoUrl::parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"))
    }

    fn refused(raw: &str) -> String {
        match RepoUrl::parse(raw) {
            Ok(u) => panic!("{raw} was accepted as {u:?}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn reads_the_usual_forms() {
        let u = parse("https://bob:s%3Acret@GitHub.com/acme/states.git");
        assert_eq!(u.scheme(), Scheme::Https);
        assert_eq!(u.host(), Some(&Host::Domain("github.com".into())));
        assert_eq!(u.segments(), ["acme", "states.git"]);
        assert_eq!(u.userinfo().unwrap().password.as_deref(), Some("s:cret"));
        assert_eq!(u.display(), "https://github.com/acme/states.git");
        assert_eq!(u.transport_url(), "https://github.com/acme/states.git");
        assert_eq!(u.effective_port(), Some(443));

        let u = parse("git@github.com:acme/states.git");
        assert_eq!(u.scheme(), Scheme::Ssh);
        assert_eq!(u.transport_url(), "git@github.com:acme/states.git");
        // An absolute scp-like path stays absolute (relative ones are under the login's home).
        assert_eq!(
            parse("git@h:/srv/x.git").transport_url(),
            "git@h:/srv/x.git"
        );
        assert_ne!(parse("git@h:/srv/x.git"), parse("git@h:srv/x.git"));
        for nothing in ["h:/", "git@h:/", "ü:/"] {
            assert!(RepoUrl::parse(nothing).is_err(), "{nothing}");
        }
        let u = parse("ssh://git@host:2222/srv/x.git");
        assert_eq!(u.transport_url(), "ssh://git@host:2222/srv/x.git");
        assert_eq!(parse("git://h/x.git/").transport_url(), "git://h/x.git");
        assert_eq!(
            parse("file:///srv/git/x.git").transport_url(),
            "file:///srv/git/x.git"
        );
        assert_eq!(
            parse("http://[::1]:8080/x").transport_url(),
            "http://[::1]:8080/x"
        );
        // A repository at the server's root (dulwich serves one that way).
        assert_eq!(parse("http://h:8000/").transport_url(), "http://h:8000/");
        assert_eq!(parse("http://h:8000").transport_url(), "http://h:8000/");
        assert!(RepoUrl::parse("file:///").is_err());
    }

    #[test]
    fn paths_that_parsers_disagree_on_are_refused() {
        for raw in [
            "http://h/git/team-a.git\\..\\secret.git",
            "http://h/git/team-a.git/..%2fsecret.git",
            "http://h/git/team-a.git/%2e%2e/secret.git",
            "http://h/git/team-a.git/../secret.git",
            "http://h/git/./x.git",
            "http://h/git//x.git",
            "http://h/git/x%00.git",
            "http://h/git/x%zz.git",
            "http://h/git/x.git?service=x",
            "http://h/git/x.git#frag",
            "http://h/git/x .git",
            "http://[::1%25eth0]/x",
            "ext::sh -c touch% /tmp/pwned",
            "ext::sh",
            "fd::3",
            "ü::1",
            "ü:/~",
            "git@h:/~bob/x.git",
            "git@h:/%7ebob/x.git",
            "ftp://h/x",
            "http://h:99999/x",
            "http://h:0/x",
            "http://h:+80/x",
        ] {
            let why = refused(raw);
            assert!(!why.is_empty(), "{raw}");
        }
        // Escapes of allowed characters are decoded, and the transport gets the plain form.
        assert_eq!(
            parse("https://h/acme/st%61tes.git").transport_url(),
            "https://h/acme/states.git"
        );
    }

    #[test]
    fn credentials_never_show() {
        let u = parse("https://bob:hunter2@h/x.git");
        assert!(!u.display().contains("hunter2"));
        assert!(!u.display().contains("bob"));
        assert!(!format!("{u:?}").contains("hunter2"));
        assert!(!u.transport_url().contains("hunter2"));
        assert!(refused("ssh://git:pw@h/x").contains("password"));
        assert_eq!(
            redact_in_text("failed for \"https://bob:s3cret@host/x.git\" and http://h/y"),
            "failed for \"https://***@host/x.git\" and http://h/y"
        );
    }
}
