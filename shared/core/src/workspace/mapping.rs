//! Workspace names and where a workspace's state lives (DESIGN §10, "The mapping"): a name as
//! the workspace API admits it, the repository's `workspace_path` pattern that turns it into a
//! state path (`workspaces/{name}.tfstate` by default), and the path of its record.

use std::fmt;

use crate::path::{PathError, StatePath};

/// Longest workspace name the API admits, in characters.
pub const MAX_NAME_LEN: usize = 90;

/// Where a repository keeps its workspaces' states unless it says otherwise.
pub const DEFAULT_WORKSPACE_PATH: &str = "workspaces/{name}.tfstate";

/// The placeholder a `workspace_path` holds exactly once.
const PLACEHOLDER: &str = "{name}";

/// A workspace name: 1 to 90 letters, digits, `-` and `_` (the API's rule).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkspaceName(String);

/// Why a workspace name was refused: one sentence naming the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// An empty name.
    #[error("the workspace name is empty; a name has 1 to 90 letters, digits, '-' or '_'")]
    Empty,
    /// Over [`MAX_NAME_LEN`].
    #[error("the workspace name is {0} characters long; a name has at most 90 letters, digits, '-' or '_'")]
    TooLong(usize),
    /// A character outside `[A-Za-z0-9_-]`.
    #[error("the workspace name contains {0}; a name has only letters, digits, '-' and '_'")]
    BadCharacter(String),
}

impl WorkspaceName {
    /// Checks `raw` against the API's rule.
    pub fn parse(raw: &str) -> Result<WorkspaceName, NameError> {
        if raw.is_empty() {
            return Err(NameError::Empty);
        }
        if let Some(c) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_')))
        {
            let shown = if c.is_control() || c.is_whitespace() {
                format!("the character U+{:04X}", c as u32)
            } else {
                format!("the character '{c}'")
            };
            return Err(NameError::BadCharacter(shown));
        }
        if raw.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong(raw.len()));
        }
        Ok(WorkspaceName(raw.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path of this workspace's record: `.gitstate/workspaces/{name}.json` on the state
    /// branch (a file of gitstate's own, never a state: [`StatePath::gitstate_file`]). A name is
    /// letters, digits, '-' and '_', so this never fails.
    pub fn record_path(&self) -> Result<StatePath, PathError> {
        let rest = StatePath::parse(&format!("workspaces/{}.json", self.0))?;
        Ok(StatePath::gitstate_file(&rest))
    }
}

impl fmt::Display for WorkspaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A repository's `workspace_path`: a state path pattern holding `{name}` exactly once, such
/// that every valid workspace name makes a valid state path (checked when it is parsed, at
/// start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePath {
    /// What comes before `{name}`.
    prefix: String,
    /// What comes after it.
    suffix: String,
}

impl Default for WorkspacePath {
    fn default() -> WorkspacePath {
        WorkspacePath {
            prefix: "workspaces/".into(),
            suffix: ".tfstate".into(),
        }
    }
}

impl WorkspacePath {
    /// Checks `pattern`: `{name}` exactly once, and a valid state path for every valid name.
    /// Names are letters, digits, `-` and `_`, never a dot, so a one-character name and a
    /// 90-character one cover every rule a name could break (an empty segment, a segment
    /// starting with `.` or ending with `.lock`, `..`, the length).
    pub fn parse(pattern: &str) -> Result<WorkspacePath, String> {
        let Some((prefix, suffix)) = pattern.split_once(PLACEHOLDER) else {
            return Err(format!(
                "workspace_path \"{pattern}\" lacks {{name}}; write e.g. \"envs/{{name}}/terraform.tfstate\""
            ));
        };
        if suffix.contains(PLACEHOLDER) {
            return Err(format!(
                "workspace_path \"{pattern}\" holds {{name}} more than once; it must hold it exactly once"
            ));
        }
        let parsed = WorkspacePath {
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        };
        for sample in ["a".to_owned(), "a".repeat(MAX_NAME_LEN)] {
            let joined = format!("{prefix}{sample}{suffix}");
            if let Err(e) = StatePath::parse(&joined) {
                return Err(format!(
                    "workspace_path \"{pattern}\" makes {joined} for a workspace named {sample}, which is not a state path: {e}"
                ));
            }
        }
        Ok(parsed)
    }

    /// The state path of the workspace `name`.
    pub fn path_of(&self, name: &WorkspaceName) -> Result<StatePath, PathError> {
        StatePath::parse(&format!("{}{}{}", self.prefix, name.0, self.suffix))
    }

    /// What every state path of this pattern starts with (what a listing of its states asks
    /// for).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The workspace whose state is at `path`, if `path` is one of this pattern's.
    pub fn name_of(&self, path: &StatePath) -> Option<WorkspaceName> {
        let name = path
            .as_str()
            .strip_prefix(&self.prefix)?
            .strip_suffix(&self.suffix)?;
        WorkspaceName::parse(name).ok()
    }
}

impl fmt::Display for WorkspacePath {
    /// The pattern as configured: `workspaces/{name}.tfstate`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{PLACEHOLDER}{}", self.prefix, self.suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_api_rule_and_anything_else_is_one_sentence() {
        for good in ["app-prod", "A_1", "x", &"z".repeat(90)] {
            assert_eq!(WorkspaceName::parse(good).unwrap().as_str(), good);
        }
        let refused = |raw: &str| WorkspaceName::parse(raw).unwrap_err();
        assert_eq!(refused(""), NameError::Empty);
        assert_eq!(refused(&"z".repeat(91)), NameError::TooLong(91));
        for bad in ["a.b", "a/b", "a b", "..", "é", "a\n", "{name}", "a:b"] {
            let e = refused(bad);
            assert!(matches!(e, NameError::BadCharacter(_)), "{bad:?}: {e}");
            let sentence = e.to_string();
            assert!(
                !sentence.contains('\n') && sentence.ends_with('\''),
                "{sentence}"
            );
        }
    }

    #[test]
    fn the_default_pattern_and_a_configured_one_map_names_both_ways() {
        let name = WorkspaceName::parse("app-prod").unwrap();
        let default = WorkspacePath::default();
        assert_eq!(default.to_string(), DEFAULT_WORKSPACE_PATH);
        assert_eq!(
            WorkspacePath::parse(DEFAULT_WORKSPACE_PATH).unwrap(),
            default
        );
        let path = default.path_of(&name).unwrap();
        assert_eq!(path.as_str(), "workspaces/app-prod.tfstate");
        assert_eq!(default.name_of(&path), Some(name.clone()));
        let envs = WorkspacePath::parse("envs/{name}/terraform.tfstate").unwrap();
        let path = envs.path_of(&name).unwrap();
        assert_eq!(path.as_str(), "envs/app-prod/terraform.tfstate");
        assert_eq!(envs.name_of(&path), Some(name));
        for other in [
            "envs/a/b/terraform.tfstate",
            "prod.tfstate",
            "envs/a.b/terraform.tfstate",
        ] {
            assert_eq!(
                envs.name_of(&StatePath::parse(other).unwrap()),
                None,
                "{other}"
            );
        }
        assert_eq!(
            WorkspacePath::parse("{name}")
                .unwrap()
                .path_of(&WorkspaceName::parse("-x").unwrap())
                .unwrap()
                .as_str(),
            "-x"
        );
    }

    #[test]
    fn a_pattern_that_some_name_would_break_is_refused_at_start() {
        for (pattern, says) in [
            ("workspaces/prod.tfstate", "lacks {name}"),
            ("{name}/{name}.tfstate", "more than once"),
            ("envs/.{name}", "starts with '.'"),
            ("envs//{name}", "empty segment"),
            ("envs/{name}.lock", ".lock"),
            ("envs/{name} x", "U+0020"),
            ("envs/{name}/../x", "'..'"),
            (&format!("{}/{{name}}", "d".repeat(430)), "bytes long"),
            ("/{name}", "empty segment"),
        ] {
            let e = WorkspacePath::parse(pattern).unwrap_err();
            assert!(e.contains(says), "{pattern}: {e}");
        }
    }

    #[test]
    fn a_record_lives_in_gitstates_own_folder_where_no_state_can() {
        let record = WorkspaceName::parse("app-prod")
            .unwrap()
            .record_path()
            .unwrap();
        assert_eq!(record.as_str(), ".gitstate/workspaces/app-prod.json");
        assert!(record.is_gitstate_file());
        assert!(StatePath::parse(record.as_str()).is_err());
        assert_eq!(StatePath::parse_stored(record.as_str()), Ok(record));
        assert!(StatePath::parse_stored(".gitstate/../x").is_err());
        assert!(StatePath::parse_stored(".other/x").is_err());
        assert!(!StatePath::parse("gitstate/x").unwrap().is_gitstate_file());
    }
}
