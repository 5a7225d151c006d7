//! What a caller's credential lets it do (DESIGN §6, "Scoped tokens"): its rights (read-write,
//! read-only, or outputs-only: the state with its resources emptied, what
//! `terraform_remote_state` reads) and the state paths it may use (patterns as in `allow`, see
//! [`SegmentPattern`]). A credential without a scope has the full one.
//!
//! A limited scope (anything but read-write on every path) reaches only the state addresses it
//! names; the operational endpoints under `/_/` span states (listings, history, the catalog, the
//! web page) and refuse it, so no endpoint added later leaks across a limit by default.

use std::fmt;

use gitstate_url::glob::SegmentPattern;

use crate::path::StatePath;

/// What a credential may do with a state it may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Rights {
    /// Every operation (the default).
    #[default]
    ReadWrite,
    /// GET only, the whole state.
    ReadOnly,
    /// GET only, the state with its resources emptied (its outputs, serial and lineage).
    OutputsOnly,
}

impl Rights {
    /// The configured spelling.
    pub fn name(self) -> &'static str {
        match self {
            Rights::ReadWrite => "read-write",
            Rights::ReadOnly => "read-only",
            Rights::OutputsOnly => "outputs-only",
        }
    }
}

impl std::str::FromStr for Rights {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-write" => Ok(Rights::ReadWrite),
            "read-only" => Ok(Rights::ReadOnly),
            "outputs-only" => Ok(Rights::OutputsOnly),
            other => Err(format!(
                "access '{other}' is unknown; use \"read-write\", \"read-only\" or \"outputs-only\""
            )),
        }
    }
}

/// A credential's rights and the state paths they apply to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    rights: Rights,
    /// Empty: every path. Each pattern as written, the repository it names (`None`: any), and
    /// the path pattern.
    paths: Vec<(String, Option<String>, SegmentPattern)>,
}

/// A request beyond the credential's scope (403): the sentence says what the credential may do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// What a request does to a state, as far as a scope is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// GET (any version).
    Read,
    /// POST, DELETE, LOCK, UNLOCK.
    Write,
}

/// How a scope admitted a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// The request goes on as asked.
    Whole,
    /// A read answered with the state's outputs only.
    OutputsOnly,
}

impl Scope {
    /// Every operation on every path.
    pub fn full() -> Scope {
        Scope::default()
    }

    /// `rights` on the paths matching one of `paths` (every path when empty); `Err` names the bad
    /// pattern and the rule. A pattern `REPOSITORY:PATTERN` (`default:teams/a/**`) holds in that
    /// configured repository only; one without a repository, in every repository of the
    /// deployment. (A state path never holds `:`, which git's ref names refuse.)
    pub fn new(rights: Rights, paths: &[String]) -> Result<Scope, String> {
        let paths = paths
            .iter()
            .map(|p| {
                let (repository, pattern) = match p.split_once(':') {
                    Some((repository, pattern)) => {
                        if repository.is_empty()
                            || !repository
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                        {
                            return Err(format!(
                                "path pattern '{p}': before ':' comes a configured repository's name (letters, digits, '-', '_', '.')"
                            ));
                        }
                        (Some(repository.to_owned()), pattern)
                    }
                    None => (None, p.as_str()),
                };
                SegmentPattern::parse(pattern)
                    .map(|parsed| (p.clone(), repository, parsed))
                    .map_err(|e| format!("path pattern '{p}': {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Scope { rights, paths })
    }

    /// The rights.
    pub fn rights(&self) -> Rights {
        self.rights
    }

    /// Whether this is less than the full scope.
    pub fn is_limited(&self) -> bool {
        self.rights != Rights::ReadWrite || !self.paths.is_empty()
    }

    /// Whether `operation` on `path` is admitted in any repository, and how (see
    /// [`Scope::admit_in`]).
    pub fn admit(&self, operation: Use, path: &StatePath) -> Result<Admitted, Refusal> {
        self.admit_in(operation, None, path)
    }

    /// Whether `operation` on `path` of the configured `repository` (`None`: an ad-hoc one,
    /// which no repository-qualified pattern names) is admitted, and how; a refusal (403) says
    /// what the credential may do.
    pub fn admit_in(
        &self,
        operation: Use,
        repository: Option<&str>,
        path: &StatePath,
    ) -> Result<Admitted, Refusal> {
        let matches = |(_, named, pattern): &(String, Option<String>, SegmentPattern)| {
            named
                .as_deref()
                .is_none_or(|named| Some(named) == repository)
                && pattern.matches_path(path.as_str())
        };
        if !self.paths.is_empty() && !self.paths.iter().any(matches) {
            return Err(Refusal(format!(
                "this credential may not use the state {path}: it is limited to {self}"
            )));
        }
        match (operation, self.rights) {
            (Use::Write, Rights::ReadOnly | Rights::OutputsOnly) => {
                Err(Refusal(format!(
                    "this credential may only read ({self}); POST, DELETE, LOCK and UNLOCK need a read-write one"
                )))
            }
            (Use::Read, Rights::OutputsOnly) => Ok(Admitted::OutputsOnly),
            _ => Ok(Admitted::Whole),
        }
    }

    /// Whether this scope may use what spans states (the endpoints under `/_/`): the full scope
    /// and read-only on every path may; outputs-only or a path limit may not.
    pub fn admit_across_states(&self) -> Result<(), Refusal> {
        if self.rights == Rights::OutputsOnly || !self.paths.is_empty() {
            return Err(Refusal(format!(
                "this credential is limited to {self}, so it may only use state addresses; listings, history, the catalog and the web page span states and need a credential without a limit"
            )));
        }
        Ok(())
    }
}

impl fmt::Display for Scope {
    /// `outputs-only on teams/a/**, teams/b/*` (for sentences).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rights.name())?;
        if self.paths.is_empty() {
            return f.write_str(" on every state");
        }
        let patterns: Vec<&str> = self.paths.iter().map(|(text, ..)| text.as_str()).collect();
        write!(f, " on {}", patterns.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> StatePath {
        StatePath::parse(p).expect("a path")
    }

    fn refusal(result: Result<Admitted, Refusal>) -> String {
        match result {
            Err(Refusal(sentence)) => sentence,
            other => panic!("expected a 403 refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_full_scope_admits_everything_everywhere() {
        let full = Scope::full();
        assert!(!full.is_limited());
        for operation in [Use::Read, Use::Write] {
            assert_eq!(
                full.admit(operation, &path("any/where.tfstate")).ok(),
                Some(Admitted::Whole)
            );
        }
        full.admit_across_states().expect("spans states");
    }

    #[test]
    fn outputs_only_reads_outputs_inside_its_paths_and_nothing_else() {
        let scope = Scope::new(Rights::OutputsOnly, &["teams/a/**".into()]).expect("scope");
        assert!(scope.is_limited());
        assert_eq!(
            scope.admit(Use::Read, &path("teams/a/app.tfstate")).ok(),
            Some(Admitted::OutputsOnly)
        );
        let write = refusal(scope.admit(Use::Write, &path("teams/a/app.tfstate")));
        assert!(write.contains("may only read"), "{write}");
        let outside = refusal(scope.admit(Use::Read, &path("teams/b/app.tfstate")));
        assert!(
            outside.contains("teams/b/app.tfstate")
                && outside.contains("outputs-only on teams/a/**"),
            "{outside}"
        );
        assert!(scope.admit_across_states().is_err());
    }

    #[test]
    fn read_only_reads_whole_states_and_may_list_when_it_has_no_path_limit() {
        let scope = Scope::new(Rights::ReadOnly, &[]).expect("scope");
        assert_eq!(
            scope.admit(Use::Read, &path("x.tfstate")).ok(),
            Some(Admitted::Whole)
        );
        assert!(scope.admit(Use::Write, &path("x.tfstate")).is_err());
        scope.admit_across_states().expect("reads across states");
        let limited = Scope::new(Rights::ReadWrite, &["a/*".into()]).expect("scope");
        assert!(limited.admit(Use::Write, &path("a/x.tfstate")).is_ok());
        assert!(limited.admit(Use::Write, &path("b/x.tfstate")).is_err());
        assert!(limited.admit_across_states().is_err());
    }

    #[test]
    fn rights_and_patterns_are_parsed_with_a_sentence_for_each_mistake() {
        assert_eq!("outputs-only".parse(), Ok(Rights::OutputsOnly));
        assert!("write".parse::<Rights>().unwrap_err().contains("read-only"));
        let bad = Scope::new(Rights::ReadOnly, &["a/../b".into()]).unwrap_err();
        assert!(bad.contains("'a/../b'") && bad.contains(".."), "{bad}");
    }

    /// A pattern may name its repository (issue 50): it then holds there only; one without a
    /// repository holds in every repository, as before.
    #[test]
    fn a_pattern_may_name_its_repository() {
        let scope = Scope::new(
            Rights::ReadWrite,
            &["default:teams/a/**".into(), "shared/*.tfstate".into()],
        )
        .expect("scope");
        let a = path("teams/a/app.tfstate");
        assert!(scope.admit_in(Use::Write, Some("default"), &a).is_ok());
        let other = refusal(scope.admit_in(Use::Write, Some("payments"), &a));
        assert!(other.contains("default:teams/a/**"), "{other}");
        assert!(
            scope.admit_in(Use::Read, None, &a).is_err(),
            "an ad-hoc repository"
        );
        let shared = path("shared/net.tfstate");
        for repository in [Some("default"), Some("payments"), None] {
            assert!(scope.admit_in(Use::Read, repository, &shared).is_ok());
        }
        for bad in [":teams/**", "a b:teams/**", "re*po:x"] {
            assert!(
                Scope::new(Rights::ReadWrite, &[bad.into()]).is_err(),
                "{bad}"
            );
        }
    }
}
