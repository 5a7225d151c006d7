//! The ids of the workspace API (DESIGN §10, "Ids"): stateless and reversible, so that any
//! process (any Lambda container) answers any request without a table. A workspace's id is
//! `ws-` and the lowercase base32 (RFC 4648, no padding) of its repository's name, a zero byte
//! and its name; a state version's, `sv-` and the base32 of the same and the digest of the state
//! it served; an output's, `wsout-` and the base32 of a state version's and the output's name.
//! An id that does not decode to that shape is no id (the API answers 404).

use std::fmt;

use super::mapping::WorkspaceName;

/// The prefix of a workspace id.
const WORKSPACE_PREFIX: &str = "ws-";

/// The prefix of a state version id.
const STATE_VERSION_PREFIX: &str = "sv-";

/// The prefix of a state version output's id.
const OUTPUT_PREFIX: &str = "wsout-";

/// RFC 4648 base32, lowercase (ids are URL-safe, and case-insensitive hosts keep them).
const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Longest id decoded, in characters (a repository name and a workspace name are short).
const MAX_ID_LEN: usize = 1024;

/// A workspace, as its id names it: the repository (the organization) and the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceId {
    /// The configured repository's name.
    pub repository: String,
    /// The workspace's name.
    pub name: WorkspaceName,
}

impl WorkspaceId {
    /// The id of the workspace `name` of `repository`.
    pub fn new(repository: &str, name: &WorkspaceName) -> WorkspaceId {
        WorkspaceId {
            repository: repository.to_owned(),
            name: name.clone(),
        }
    }

    /// The workspace `raw` names, or `None` when it is no workspace id.
    pub fn parse(raw: &str) -> Option<WorkspaceId> {
        let bytes = decode(raw.strip_prefix(WORKSPACE_PREFIX)?)?;
        let mut parts = bytes.split(|b| *b == 0);
        let (repository, name) = (parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        WorkspaceId::from_parts(repository, name)
    }

    fn from_parts(repository: &[u8], name: &[u8]) -> Option<WorkspaceId> {
        let repository = std::str::from_utf8(repository).ok()?;
        if repository.is_empty() || repository.chars().any(char::is_control) {
            return None;
        }
        let name = WorkspaceName::parse(std::str::from_utf8(name).ok()?).ok()?;
        Some(WorkspaceId {
            repository: repository.to_owned(),
            name,
        })
    }

    /// What the id encodes: the repository, a zero byte, the name.
    fn payload(&self) -> Vec<u8> {
        let mut bytes = self.repository.as_bytes().to_vec();
        bytes.push(0);
        bytes.extend_from_slice(self.name.as_str().as_bytes());
        bytes
    }
}

impl fmt::Display for WorkspaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{WORKSPACE_PREFIX}{}", encode(&self.payload()))
    }
}

/// A state version, as its id names it: the workspace, and the digest of the state it served
/// ([`super::Current::digest`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateVersionId {
    /// The workspace.
    pub workspace: WorkspaceId,
    /// The digest of the state (hex).
    pub digest: String,
}

impl StateVersionId {
    /// The state version `raw` names, or `None` when it is no state version id.
    pub fn parse(raw: &str) -> Option<StateVersionId> {
        let bytes = decode(raw.strip_prefix(STATE_VERSION_PREFIX)?)?;
        let mut parts = bytes.split(|b| *b == 0);
        let (repository, name, digest) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        StateVersionId::from_parts(repository, name, digest)
    }

    fn from_parts(repository: &[u8], name: &[u8], digest: &[u8]) -> Option<StateVersionId> {
        let digest = std::str::from_utf8(digest).ok()?;
        if digest.is_empty() || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(StateVersionId {
            workspace: WorkspaceId::from_parts(repository, name)?,
            digest: digest.to_owned(),
        })
    }
}

impl fmt::Display for StateVersionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = self.workspace.payload();
        bytes.push(0);
        bytes.extend_from_slice(self.digest.as_bytes());
        write!(f, "{STATE_VERSION_PREFIX}{}", encode(&bytes))
    }
}

/// An output of a state version, as its id names it: the state version and the output's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputId {
    /// The state version.
    pub version: StateVersionId,
    /// The output's name.
    pub name: String,
}

impl OutputId {
    /// The output `raw` names, or `None` when it is no output id.
    pub fn parse(raw: &str) -> Option<OutputId> {
        let bytes = decode(raw.strip_prefix(OUTPUT_PREFIX)?)?;
        let mut parts = bytes.splitn(4, |b| *b == 0);
        let (repository, name, digest, output) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let output = std::str::from_utf8(output).ok()?;
        if output.is_empty() || output.chars().any(char::is_control) {
            return None;
        }
        let version = StateVersionId::from_parts(repository, name, digest)?;
        Some(OutputId {
            version,
            name: output.to_owned(),
        })
    }
}

impl fmt::Display for OutputId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = self.version.workspace.payload();
        bytes.push(0);
        bytes.extend_from_slice(self.version.digest.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(self.name.as_bytes());
        write!(f, "{OUTPUT_PREFIX}{}", encode(&bytes))
    }
}

/// `bytes` in lowercase base32 without padding.
fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for byte in bytes {
        buffer = (buffer << 8) | u32::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
        buffer &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// The bytes `text` encodes ([`encode`]), or `None`: a character outside the alphabet (upper
/// case included), a length no encoding has, or unused bits that are not zero (so each id has
/// one spelling).
fn decode(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || text.len() > MAX_ID_LEN || matches!(text.len() % 8, 1 | 3 | 6) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 5 / 8);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let value = ALPHABET.iter().position(|a| *a == c)? as u32;
        buffer = (buffer << 5) | value;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
        buffer &= (1 << bits) - 1;
    }
    (buffer == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(raw: &str) -> WorkspaceName {
        WorkspaceName::parse(raw).unwrap()
    }

    #[test]
    fn an_output_id_names_its_state_version_and_output() {
        let version = StateVersionId {
            workspace: WorkspaceId::new("default", &name("app-prod")),
            digest: "0123abcd".into(),
        };
        let id = OutputId {
            version: version.clone(),
            name: "db_url".into(),
        };
        let text = id.to_string();
        assert!(text.starts_with("wsout-"), "{text}");
        assert_eq!(OutputId::parse(&text), Some(id));
        assert_eq!(OutputId::parse(&version.to_string()), None);
        assert_eq!(OutputId::parse(&text.replace("wsout-", "sv-")), None);
        assert_eq!(OutputId::parse(&text.to_uppercase()), None);
    }

    #[test]
    fn base32_is_rfc_4648_lowercase_without_padding() {
        for (plain, coded) in [
            ("", ""),
            ("f", "my"),
            ("fo", "mzxq"),
            ("foo", "mzxw6"),
            ("foob", "mzxw6yq"),
            ("fooba", "mzxw6ytb"),
            ("foobar", "mzxw6ytboi"),
        ] {
            assert_eq!(encode(plain.as_bytes()), coded);
            if !plain.is_empty() {
                assert_eq!(decode(coded).as_deref(), Some(plain.as_bytes()));
            }
        }
        for bad in ["MZXW6", "mzxw6yt", "m", "mzx", "mzxw6y", "my1", "mz"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_workspace_id_names_its_repository_and_name_and_nothing_else_is_one() {
        let id = WorkspaceId::new("default", &name("app-prod"));
        let text = id.to_string();
        assert!(text.starts_with("ws-"), "{text}");
        assert!(
            text[3..].bytes().all(|b| ALPHABET.contains(&b)),
            "URL-safe: {text}"
        );
        assert_eq!(WorkspaceId::parse(&text), Some(id.clone()));
        assert_ne!(
            WorkspaceId::new("prod", &name("app-prod")).to_string(),
            text,
            "another repository, another id"
        );
        let unknown = |payload: &[u8]| format!("ws-{}", encode(payload));
        for bad in [
            String::new(),
            "ws-".into(),
            text.to_uppercase(),
            text.replace("ws-", "sv-"),
            format!("{text}a"),
            unknown(b"default"),
            unknown(b"\0app"),
            unknown(b"default\0app.prod"),
            unknown(b"default\0app\0x"),
            unknown(b"default\0"),
            unknown(&[b'd', 0, 0xff]),
            format!("ws-{}", "a".repeat(2000)),
        ] {
            assert_eq!(WorkspaceId::parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn a_state_version_id_names_its_workspace_and_digest() {
        let id = StateVersionId {
            workspace: WorkspaceId::new("default", &name("app")),
            digest: "0123abcd".into(),
        };
        let text = id.to_string();
        assert!(text.starts_with("sv-"), "{text}");
        assert_eq!(StateVersionId::parse(&text), Some(id.clone()));
        assert_eq!(WorkspaceId::parse(&text), None);
        assert_eq!(
            StateVersionId::parse(&id.workspace.to_string().replace("ws-", "sv-")),
            None
        );
        let with = |digest: &str| {
            format!(
                "sv-{}",
                encode(format!("default\0app\0{digest}").as_bytes())
            )
        };
        assert_eq!(StateVersionId::parse(&with("xyz")), None);
        assert_eq!(StateVersionId::parse(&with("")), None);
    }
}
