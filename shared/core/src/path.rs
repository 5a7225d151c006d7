//! State paths: the `{path}` of `/state/{repo}/{path}`. A path names a file on the state branch and
//! is part of the lock ref `refs/heads/locks/{path}`, so it must satisfy git's ref-name rules too.

use std::fmt;

pub use gitstate_url::state_path::{PathError, MAX_PATH_LEN};

/// The folder of gitstate's own files on the state branch ([`StatePath::gitstate_file`]).
pub const GITSTATE_FOLDER: &str = ".gitstate";

/// A validated state path (DESIGN §3 path rules).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatePath(String);

impl StatePath {
    /// Validates `raw` against the path rules (the one rule: [`gitstate_url::state_path`]).
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        gitstate_url::state_path::check_state_path(raw)?;
        Ok(StatePath(raw.to_owned()))
    }

    /// One of gitstate's own files on the state branch: `.gitstate/{rest}` (workspace records,
    /// DESIGN §10). Its first segment starts with `.`, which no state path has ([`StatePath::parse`]
    /// refuses it), so no state can collide with it; no lock branch is ever taken on it.
    pub fn gitstate_file(rest: &StatePath) -> StatePath {
        StatePath(format!("{GITSTATE_FOLDER}/{}", rest.0))
    }

    /// What the state branch may hold at `raw`: a state path, or one of gitstate's own files
    /// ([`StatePath::gitstate_file`]). The git engine reads the paths of commits back through
    /// this (its own, and the write queue's, which anyone with push access can write).
    pub fn parse_stored(raw: &str) -> Result<Self, PathError> {
        match raw
            .strip_prefix(GITSTATE_FOLDER)
            .and_then(|r| r.strip_prefix('/'))
        {
            Some(rest) => Ok(StatePath::gitstate_file(&StatePath::parse(rest)?)),
            None => StatePath::parse(raw),
        }
    }

    /// Whether this is one of gitstate's own files ([`StatePath::gitstate_file`]), which has no
    /// lock branch.
    pub fn is_gitstate_file(&self) -> bool {
        self.0.starts_with(GITSTATE_FOLDER) && self.0[GITSTATE_FOLDER.len()..].starts_with('/')
    }

    /// The path as stored in the tree.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lock branch for this path: `refs/heads/locks/{path}` ([`crate::lock::LOCK_REF_PREFIX`]).
    pub fn lock_ref(&self) -> String {
        format!("{}{}", crate::lock::LOCK_REF_PREFIX, self.0)
    }

    /// The file inside the lock commit: `{path}.lock`.
    pub fn lock_file(&self) -> String {
        format!("{}.lock", self.0)
    }

    /// The folders this path is in, outermost first: `a` and `a/b` for `a/b/c`.
    pub fn ancestors(&self) -> impl Iterator<Item = &str> {
        self.0.match_indices('/').map(|(end, _)| &self.0[..end])
    }
}

/// What the state branch holds at a path, for [`PathConflict::in_tree`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeEntry {
    /// A file (a state).
    File,
    /// A folder (of states).
    Folder,
}

/// Why a state could never be written at a path (DESIGN §3): git's trees cannot hold a file and
/// a folder of one name, nor its refs a lock branch and a folder of lock branches. The POST of
/// such a path and its LOCK are both answered 409 with this sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathConflict {
    /// A folder of the path is a state file on the state branch.
    #[error(
        "the state path {path} cannot be created because {above} is a state file in the repository"
    )]
    StateAbove {
        /// The path asked for.
        path: String,
        /// The state file where the path needs a folder.
        above: String,
    },
    /// The path is a folder of other states on the state branch.
    #[error("the state path {path} is a directory of other states in the repository")]
    StatesBelow {
        /// The path asked for.
        path: String,
    },
    /// A folder of the path is locked: a state is about to be written there.
    #[error("the state path {path} cannot be created because {above} is locked, and its state would be a file where {path} needs a directory")]
    LockAbove {
        /// The path asked for.
        path: String,
        /// The locked path where the path needs a folder.
        above: String,
    },
    /// A path under the path is locked: a state is about to be written there.
    #[error("the state path {path} cannot be created because {below} is locked, and its state would make {path} a directory")]
    LockBelow {
        /// The path asked for.
        path: String,
        /// The locked path under it.
        below: String,
    },
}

impl PathConflict {
    /// What keeps a state out of `path` on the state branch: a folder of it that is a file, or
    /// the path itself a folder. `at(p)` tells what the branch holds at `p` (`None`: nothing),
    /// for the path's folders outermost first, then the path; the walk stops where nothing is.
    pub fn in_tree<E>(
        path: &StatePath,
        mut at: impl FnMut(&str) -> Result<Option<TreeEntry>, E>,
    ) -> Result<Option<PathConflict>, E> {
        for above in path.ancestors() {
            match at(above)? {
                None => return Ok(None),
                Some(TreeEntry::File) => {
                    return Ok(Some(PathConflict::StateAbove {
                        path: path.to_string(),
                        above: above.to_owned(),
                    }))
                }
                Some(TreeEntry::Folder) => {}
            }
        }
        Ok(match at(path.as_str())? {
            Some(TreeEntry::Folder) => Some(PathConflict::StatesBelow {
                path: path.to_string(),
            }),
            _ => None,
        })
    }

    /// What keeps a lock off `path` among the held locks `locked` (their paths; any others may
    /// be among them): a lock on a folder of the path (the outermost), else one under it (the
    /// first in path order).
    pub fn among_locks<'a>(
        path: &StatePath,
        locked: impl IntoIterator<Item = &'a str>,
    ) -> Option<PathConflict> {
        let inside = format!("{path}/");
        let (mut above, mut below): (Option<&str>, Option<&str>) = (None, None);
        for held in locked {
            if path.as_str().starts_with(held) && path.as_str()[held.len()..].starts_with('/') {
                above = Some(above.map_or(held, |a| a.min(held)));
            } else if held.starts_with(&inside) {
                below = Some(below.map_or(held, |b| b.min(held)));
            }
        }
        match (above, below) {
            (Some(above), _) => Some(PathConflict::LockAbove {
                path: path.to_string(),
                above: above.to_owned(),
            }),
            (None, Some(below)) => Some(PathConflict::LockBelow {
                path: path.to_string(),
                below: below.to_owned(),
            }),
            (None, None) => None,
        }
    }
}

impl fmt::Display for StatePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Longest accepted branch name (the `ref` of a repository), in bytes: a ref is a file name on
/// many git servers, and file names stop at 255 bytes.
pub const MAX_REF_LEN: usize = 255;

/// A validated branch name: the `ref` holding the states (`main`), as configured or given by
/// `ref=` on a query-style address. The state branch is `refs/heads/{name}`.
///
/// The rules are git's (`git check-ref-format --branch`), so that a name can never be read as
/// an option, a refspec, a revision expression or a path outside `refs/heads/`: no `..`, no
/// ASCII control character, space, `~ ^ : ? * [ \`, no leading `-` or `/`, no `//`, no
/// component starting with `.` or ending with `.lock`, not ending with `/` or `.`, no `@{`, not
/// `@`, at most [`MAX_REF_LEN`] bytes. Two rules are gitstate's own: the name is the short one
/// (`main`, not `refs/heads/main`), and it is outside `locks/`, where the lock branches live.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BranchName(String);

/// Why a branch name was refused; each message names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// Empty.
    #[error("the ref is empty; name a branch, e.g. main")]
    Empty,
    /// Over [`MAX_REF_LEN`].
    #[error("the ref is {0} bytes long; at most 255 bytes are allowed")]
    TooLong(usize),
    /// Starts with `-` (it would read as an option).
    #[error("the ref starts with '-', which git branch names forbid")]
    LeadingDash,
    /// An ASCII control character, space, or one of `~ ^ : ? * [ \`.
    #[error("the ref contains {0}, which git ref names forbid (no control characters, space, '~', '^', ':', '?', '*', '[' or '\\')")]
    BadCharacter(String),
    /// `..` anywhere.
    #[error("the ref contains '..', which git ref names forbid")]
    DoubleDot,
    /// `@{` anywhere.
    #[error("the ref contains '@{{', which git ref names forbid")]
    AtBrace,
    /// Exactly `@`.
    #[error("the ref is '@', which git ref names forbid")]
    At,
    /// A leading or trailing `/`, or `//`.
    #[error("the ref has an empty component (leading, trailing or doubled '/'), which git ref names forbid")]
    EmptyComponent,
    /// A component starting with `.`.
    #[error("a component of the ref starts with '.', which git ref names forbid")]
    DotComponent,
    /// A component ending with `.lock`.
    #[error("a component of the ref ends with '.lock', which git ref names forbid")]
    LockSuffix,
    /// Ends with `.`.
    #[error("the ref ends with '.', which git ref names forbid")]
    TrailingDot,
    /// `HEAD`, which git refuses as a branch name.
    #[error("the ref is 'HEAD', which git refuses as a branch name")]
    Head,
    /// A full ref name (`refs/heads/main`) where the branch name is expected.
    #[error("the ref starts with 'refs/'; give the branch name only (main, not refs/heads/main)")]
    FullRef,
    /// Inside `locks/`, gitstate's lock branches.
    #[error(
        "the ref is inside 'locks/', where gitstate keeps its lock branches; choose another branch"
    )]
    LockNamespace,
}

impl BranchName {
    /// Validates `raw` against the ref rules (see [`BranchName`]).
    pub fn parse(raw: &str) -> Result<Self, RefError> {
        if raw.is_empty() {
            return Err(RefError::Empty);
        }
        if raw.len() > MAX_REF_LEN {
            return Err(RefError::TooLong(raw.len()));
        }
        if let Some(c) = raw.chars().find(|c| {
            c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')
        }) {
            let shown = if c.is_ascii_control() || c == ' ' {
                format!("the character U+{:04X}", c as u32)
            } else {
                format!("the character '{c}'")
            };
            return Err(RefError::BadCharacter(shown));
        }
        if raw.starts_with('-') {
            return Err(RefError::LeadingDash);
        }
        if raw == "@" {
            return Err(RefError::At);
        }
        if raw.contains("..") {
            return Err(RefError::DoubleDot);
        }
        if raw.contains("@{") {
            return Err(RefError::AtBrace);
        }
        for component in raw.split('/') {
            if component.is_empty() {
                return Err(RefError::EmptyComponent);
            }
            if component.starts_with('.') {
                return Err(RefError::DotComponent);
            }
            if component.ends_with(".lock") {
                return Err(RefError::LockSuffix);
            }
        }
        if raw.ends_with('.') {
            return Err(RefError::TrailingDot);
        }
        if raw == "HEAD" {
            return Err(RefError::Head);
        }
        if raw.starts_with("refs/") {
            return Err(RefError::FullRef);
        }
        let namespace = crate::lock::LOCK_NAMESPACE;
        if raw
            .strip_prefix(namespace)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        {
            return Err(RefError::LockNamespace);
        }
        Ok(BranchName(raw.to_owned()))
    }

    /// The branch name (`main`).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BranchName {
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

    #[test]
    fn branch_names_follow_check_ref_format() {
        for ok in [
            "main",
            "states",
            "team/a",
            "release-1.2",
            "a.b",
            "x@y",
            "ünïcode",
            "a-",
        ] {
            assert_eq!(BranchName::parse(ok).unwrap().as_str(), ok);
        }
        let cases: &[(&str, RefError)] = &[
            ("", RefError::Empty),
            ("--upload-pack=x", RefError::LeadingDash),
            ("-b", RefError::LeadingDash),
            ("a..b", RefError::DoubleDot),
            ("refs/heads/../../HEAD", RefError::DoubleDot),
            (
                "main:refs/heads/x",
                RefError::BadCharacter("the character ':'".into()),
            ),
            ("a b", RefError::BadCharacter("the character U+0020".into())),
            (
                "a\nb",
                RefError::BadCharacter("the character U+000A".into()),
            ),
            (
                "a\tb",
                RefError::BadCharacter("the character U+0009".into()),
            ),
            (
                "a\u{7f}",
                RefError::BadCharacter("the character U+007F".into()),
            ),
            ("a~1", RefError::BadCharacter("the character '~'".into())),
            ("a^", RefError::BadCharacter("the character '^'".into())),
            ("a?", RefError::BadCharacter("the character '?'".into())),
            ("a*", RefError::BadCharacter("the character '*'".into())),
            ("a[0]", RefError::BadCharacter("the character '['".into())),
            ("a\\b", RefError::BadCharacter("the character '\\'".into())),
            ("/main", RefError::EmptyComponent),
            ("main/", RefError::EmptyComponent),
            ("a//b", RefError::EmptyComponent),
            (".hidden", RefError::DotComponent),
            ("a/.b", RefError::DotComponent),
            ("main.lock", RefError::LockSuffix),
            ("a.lock/b", RefError::LockSuffix),
            ("main.", RefError::TrailingDot),
            ("a@{1}", RefError::AtBrace),
            ("@", RefError::At),
            ("HEAD", RefError::Head),
            ("refs/heads/main", RefError::FullRef),
            ("locks", RefError::LockNamespace),
            ("locks/prod.tfstate", RefError::LockNamespace),
        ];
        for (raw, want) in cases {
            assert_eq!(BranchName::parse(raw).unwrap_err(), *want, "{raw:?}");
        }
        assert!(BranchName::parse(&"a".repeat(255)).is_ok());
        assert_eq!(
            BranchName::parse(&"a".repeat(256)).unwrap_err(),
            RefError::TooLong(256)
        );
        // Every message names its rule.
        for (raw, _) in cases {
            let message = BranchName::parse(raw).unwrap_err().to_string();
            assert!(
                message.starts_with("the ref") || message.starts_with("a component"),
                "{message}"
            );
        }
    }

    #[test]
    fn a_state_cannot_nest_in_a_state_or_a_lock_nor_hold_one() {
        let p = |raw: &str| StatePath::parse(raw).unwrap();
        let nested = p("a/b/c.tfstate");
        let ancestors: Vec<&str> = nested.ancestors().collect();
        assert_eq!(ancestors, ["a", "a/b"]);
        assert_eq!(p("prod").ancestors().count(), 0);

        // The branch holds `prod` (a file) and `other/x` (a file in a folder).
        let tree = |at: &str| -> Result<Option<TreeEntry>, ()> {
            Ok(match at {
                "prod" | "other/x" => Some(TreeEntry::File),
                "other" => Some(TreeEntry::Folder),
                _ => None,
            })
        };
        let conflict = |raw: &str| PathConflict::in_tree(&p(raw), tree).unwrap();
        assert_eq!(
            conflict("prod/net").map(|c| c.to_string()).as_deref(),
            Some(
                "the state path prod/net cannot be created because prod is a state file in the repository"
            )
        );
        assert_eq!(
            conflict("other/x/y"),
            Some(PathConflict::StateAbove {
                path: "other/x/y".into(),
                above: "other/x".into()
            })
        );
        assert_eq!(
            conflict("other").map(|c| c.to_string()).as_deref(),
            Some("the state path other is a directory of other states in the repository")
        );
        for free in ["prod", "prod-a", "other/y", "new/a/b", "other/x"] {
            assert_eq!(conflict(free), None, "{free}");
        }

        let locked = ["prod", "other/x/y", "team/a", "team/a/b"];
        let conflict = |raw: &str| PathConflict::among_locks(&p(raw), locked);
        assert_eq!(
            conflict("prod/net").map(|c| c.to_string()).as_deref(),
            Some("the state path prod/net cannot be created because prod is locked, and its state would be a file where prod/net needs a directory")
        );
        assert_eq!(
            conflict("other").map(|c| c.to_string()).as_deref(),
            Some("the state path other cannot be created because other/x/y is locked, and its state would make other a directory")
        );
        // The outermost lock above wins over a lock below.
        assert_eq!(
            conflict("team/a/b/c"),
            Some(PathConflict::LockAbove {
                path: "team/a/b/c".into(),
                above: "team/a".into()
            })
        );
        assert_eq!(
            conflict("other/x"),
            Some(PathConflict::LockBelow {
                path: "other/x".into(),
                below: "other/x/y".into()
            })
        );
        for free in ["prod", "prod-a", "pro", "other/xy", "team/b"] {
            assert_eq!(conflict(free), None, "{free}");
        }
    }
}
