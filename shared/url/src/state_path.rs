//! The state path rule: what the `{path}` of a gitstate address `/state/{repo}/{path}` may be
//! (DESIGN §3). A path names a file on the state branch and is part of the lock ref
//! `refs/heads/locks/{path}`, so it must satisfy git's ref-name rules too. This is the rule
//! alone, on text: core's `StatePath` is a path that passed it, and the state-file checker
//! recognises a gitstate state address in a `terraform_remote_state` by it; both call this one
//! rule.

/// Longest accepted state path, in bytes.
pub const MAX_PATH_LEN: usize = 512;

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

/// Checks `raw` against the state path rules: the first one it breaks, or `Ok`.
pub fn check_state_path(raw: &str) -> Result<(), PathError> {
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
    Ok(())
}
