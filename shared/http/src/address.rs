//! Which state a request is about: `/state/{repo}/{path}`, `/lock/{repo}/{path}`, or the
//! terraform-backend-git query-style address `/?type=git&repository=URL&ref=REF&state=PATH`.

use gitstate_core::{BranchName, StatePath};
use percent_encoding::percent_decode_str;

use crate::error::ApiError;

/// Where the repository of a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repository {
    /// A configured repository, by name.
    Named(String),
    /// An ad-hoc URL and ref from a query-style address.
    AdHoc {
        /// Repository URL.
        url: String,
        /// Branch holding the states, checked against git's ref-name rules.
        git_ref: BranchName,
    },
}

/// A parsed request address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The repository.
    pub repository: Repository,
    /// The state path inside it.
    pub path: StatePath,
    /// `?ID=` — the lock ID the client holds, if any.
    pub lock_id: Option<String>,
    /// `?version=` — an earlier version asked for by serial or commit id (GET only).
    pub version: Option<String>,
    /// `?force=true` — the write skips the state guard (another lineage, an older serial).
    pub force: bool,
    /// `?amend=true` — terraform-backend-git's "amend the last commit and force-push": accepted,
    /// and the write is a normal commit (gitstate never force-pushes); the handler logs that.
    pub amend: bool,
}

fn decode(raw: &str) -> Result<String, ApiError> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ApiError::bad_request("the address is not valid UTF-8 after percent-decoding"))
}

fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The non-empty value of the query parameter `name`.
fn param(pairs: &[(String, String)], name: &str) -> Option<String> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}

/// A boolean query parameter: `true` or `false` (absent: `false`); anything else is a 400.
fn flag(pairs: &[(String, String)], name: &str) -> Result<bool, ApiError> {
    match param(pairs, name).as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "?{name}= takes true or false, not '{other}'"
        ))),
    }
}

/// `?force=`.
fn forced(pairs: &[(String, String)]) -> Result<bool, ApiError> {
    flag(pairs, "force")
}

impl Address {
    /// Parses `{repo}/{path...}` (what follows `/state/` or `/lock/`, still percent-encoded).
    pub fn from_path(rest: &str, query: Option<&str>) -> Result<Self, ApiError> {
        let (repo, path) = rest.split_once('/').ok_or_else(|| {
            ApiError::bad_request("the address names no state path; use /state/{repository}/{path}")
        })?;
        let repo = decode(repo)?;
        if repo.is_empty() {
            return Err(ApiError::bad_request(
                "the address names no repository; use /state/{repository}/{path}",
            ));
        }
        let path =
            StatePath::parse(&decode(path)?).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let pairs = query_pairs(query);
        Ok(Address {
            repository: Repository::Named(repo),
            path,
            lock_id: param(&pairs, "ID"),
            version: param(&pairs, "version"),
            force: forced(&pairs)?,
            amend: flag(&pairs, "amend")?,
        })
    }

    /// Parses the query-style address `?type=git&repository=URL&ref=REF&state=PATH`; without
    /// `ref`, the branch is `default_ref`.
    pub fn from_query(query: Option<&str>, default_ref: &str) -> Result<Self, ApiError> {
        let pairs = query_pairs(query);
        let get = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .filter(|v| !v.is_empty())
        };
        match get("type") {
            Some("git") => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "backend type '{other}' is not supported; use type=git"
                )))
            }
            None => {
                return Err(ApiError::bad_request(
                    "a query-style address needs type=git&repository=URL&state=PATH",
                ))
            }
        }
        let url = get("repository")
            .ok_or_else(|| ApiError::bad_request("the query-style address has no 'repository'"))?;
        let state = get("state")
            .ok_or_else(|| ApiError::bad_request("the query-style address has no 'state'"))?;
        let path = StatePath::parse(state).map_err(|e| ApiError::bad_request(e.to_string()))?;
        // The ref reaches git as a branch name: git's own rules, before anything is opened.
        let git_ref = match pairs.iter().find(|(k, _)| k == "ref") {
            Some((_, raw)) if !raw.is_empty() => {
                BranchName::parse(raw).map_err(|e| ApiError::bad_request(e.to_string()))?
            }
            _ => {
                BranchName::parse(default_ref).map_err(|e| ApiError::bad_request(e.to_string()))?
            }
        };
        Ok(Address {
            repository: Repository::AdHoc {
                url: url.to_owned(),
                git_ref,
            },
            path,
            lock_id: param(&pairs, "ID"),
            version: param(&pairs, "version"),
            force: forced(&pairs)?,
            amend: flag(&pairs, "amend")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_addresses() {
        let a = Address::from_path("default/team/prod.tfstate", Some("ID=abc")).unwrap();
        assert_eq!(a.repository, Repository::Named("default".into()));
        assert_eq!(a.path.as_str(), "team/prod.tfstate");
        assert_eq!(a.lock_id.as_deref(), Some("abc"));
        assert!(Address::from_path("default/%2e%2e/x", None).is_err());
        assert!(Address::from_path("default", None).is_err());
        assert!(Address::from_path("default/a%00b", None).is_err());
        assert!(Address::from_path("default/%ff", None).is_err());
    }

    #[test]
    fn query_addresses() {
        let a = Address::from_query(Some(
            "type=git&repository=https%3A%2F%2Fexample.com%2Fa.git&ref=states&state=x%2Fy.json&ID=7",
        ), "main")
        .unwrap();
        assert_eq!(
            a.repository,
            Repository::AdHoc {
                url: "https://example.com/a.git".into(),
                git_ref: BranchName::parse("states").unwrap()
            }
        );
        assert_eq!(a.path.as_str(), "x/y.json");
        assert_eq!(a.lock_id.as_deref(), Some("7"));
        assert!(Address::from_query(Some("type=s3&state=x"), "main").is_err());
        let main = Address::from_query(
            Some("type=git&repository=https%3A%2F%2Fh%2Fa.git&state=x"),
            "main",
        )
        .unwrap();
        assert!(
            matches!(&main.repository, Repository::AdHoc { git_ref, .. } if git_ref.as_str() == "main")
        );
        assert!(Address::from_query(None, "main").is_err());
        // terraform-backend-git's standalone server: its default branch.
        let master = Address::from_query(
            Some("type=git&repository=https%3A%2F%2Fh%2Fa.git&state=x"),
            "master",
        )
        .unwrap();
        assert!(
            matches!(&master.repository, Repository::AdHoc { git_ref, .. } if git_ref.as_str() == "master")
        );
    }

    #[test]
    fn amend_is_a_boolean_like_force() {
        let q = "type=git&repository=https%3A%2F%2Fh%2Fa.git&state=x";
        assert!(
            Address::from_query(Some(&format!("{q}&amend=true")), "main")
                .unwrap()
                .amend
        );
        assert!(
            !Address::from_query(Some(&format!("{q}&amend=false")), "main")
                .unwrap()
                .amend
        );
        assert!(!Address::from_query(Some(q), "main").unwrap().amend);
        assert!(
            Address::from_path("default/x", Some("amend=true"))
                .unwrap()
                .amend
        );
        let err = Address::from_query(Some(&format!("{q}&amend=yes")), "main").unwrap_err();
        assert!(
            format!("{err:?}").contains("?amend= takes true or false"),
            "{err:?}"
        );
    }

    #[test]
    fn refs_are_checked_with_gits_rules() {
        for (bad, rule) in [
            ("--upload-pack%3Dx", "starts with '-'"),
            ("a..b", "'..'"),
            ("main%3Arefs%2Fheads%2Fx", "':'"),
            ("refs%2Fheads%2F..%2F..%2FHEAD", "'..'"),
            ("a%0Ab", "U+000A"),
            ("a%20b", "U+0020"),
            ("main.lock", ".lock"),
            ("%40", "'@'"),
        ] {
            let query = format!("type=git&repository=https%3A%2F%2Fh%2Fa.git&state=x&ref={bad}");
            let err = Address::from_query(Some(&query), "main").unwrap_err();
            let (status, message) = match err {
                ApiError::Message(status, message) => (status, message),
                other => panic!("{bad}: {other:?}"),
            };
            assert_eq!(status, axum::http::StatusCode::BAD_REQUEST, "{bad}");
            assert!(message.contains(rule), "{bad}: {message}");
        }
    }
}
