//! State paths: the `{path}` of `/state/{repo}/{path}`. A path names a file on the state branch and
//! is part of the lock ref `refs/heads/locks/{path}`, so it must satisfy git's ref-name rules too.

use std::fmt;

/// Longest accepted state path, in bytes.
pub const MAX_PATH_LEN: usize = 512;

/// A validated state path (DESIGN §3 path rules).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatePath(String);

/// Why a path was refused; the message names the rule so a user can fix the address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Empty path.
    #[error("the state path is empty; use an address like /state/default/prod.tfstate")]
    Empty,
    /// Over [`MAX_PATH_LEN`].
    #[error("the state path is {0} bytes long; at most 512 bytes are allowed")]
    TooLong(usize),
    /// A byte outside `[A-Za-z0-9._/-]`.
    #[error(
        "the state path contains {0}; only letters, digits, '.', '_', '-' and '/' are allowed"
    )]
    BadCharacter(String),
    /// `a//b`, a leading or trailing `/`.
    #[error("the state path has an empty segment (leading, trailing or doubled '/')")]
    EmptySegment,
    /// A segment starting with `.`.
    #[error("a segment of the state path starts with '.', which git ref names forbid")]
    DotSegment,
    /// `..` anywhere.
    #[error("the state path contains '..', which is not allowed")]
    DoubleDot,
    /// A segment ending with `.lock`.
    #[error("the state path or one of its segments ends with '.lock', which git ref names forbid")]
    LockSuffix,
}

impl StatePath {
    /// Validates `raw` against the path rules.
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        if raw.is_empty() {
            return Err(PathError::Empty);
        }
        if raw.len() > MAX_PATH_LEN {
            return Err(PathError::TooLong(raw.len()));
        }
        if let Some(c) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
        {
            let shown = if c.is_control() || c.is_whitespace() {
                format!("the character U+{:04X}", c as u32)
            } else {
                format!("the character '{c}'")
            };
            return Err(PathError::BadCharacter(shown));
        }
        if raw.contains("..") {
            return Err(PathError::DoubleDot);
        }
        for segment in raw.split('/') {
            if segment.is_empty() {
                return Err(PathError::EmptySegment);
            }
            if segment.starts_with('.') {
                return Err(PathError::DotSegment);
            }
            if segment.ends_with(".lock") {
                return Err(PathError::LockSuffix);
            }
        }
        Ok(StatePath(raw.to_owned()))
    }

    /// The path as stored in the tree.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lock branch for this path: `refs/heads/locks/{path}`.
    pub fn lock_ref(&self) -> String {
        format!("refs/heads/locks/{}", self.0)
    }

    /// The file inside the lock commit: `{path}.lock`.
    pub fn lock_file(&self) -> String {
        format!("{}.lock", self.0)
    }
}

impl fmt::Display for StatePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_paths() {
        for ok in ["prod.tfstate", "team-a/net/prod.tfstate", "a", "A_b-9.x/y"] {
            assert_eq!(StatePath::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_each_rule() {
        let cases: &[(&str, PathError)] = &[
            ("", PathError::Empty),
            (
                "a b",
                PathError::BadCharacter("the character U+0020".into()),
            ),
            ("a\\b", PathError::BadCharacter("the character '\\'".into())),
            ("a@{b", PathError::BadCharacter("the character '@'".into())),
            ("/abs", PathError::EmptySegment),
            ("a//b", PathError::EmptySegment),
            ("a/", PathError::EmptySegment),
            ("../x", PathError::DoubleDot),
            ("a..b", PathError::DoubleDot),
            (".hidden", PathError::DotSegment),
            ("a/.b", PathError::DotSegment),
            ("x.lock", PathError::LockSuffix),
            ("x.lock/y", PathError::LockSuffix),
        ];
        for (raw, want) in cases {
            assert_eq!(StatePath::parse(raw).unwrap_err(), *want, "{raw:?}");
        }
        let long = "a".repeat(513);
        assert_eq!(
            StatePath::parse(&long).unwrap_err(),
            PathError::TooLong(513)
        );
        assert!(StatePath::parse(&"a".repeat(512)).is_ok());
    }
}
