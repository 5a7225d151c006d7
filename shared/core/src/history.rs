//! A state's history as people ask for it: its versions with serial, writer, time and size; one
//! earlier version; a restore of an earlier version as a new commit; the held locks.

use bytes::Bytes;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::backend::{Backend, BackendError, Caller};
use crate::listing::{ListQuery, Version};
use crate::lock::LockInfo;
use crate::path::StatePath;
use crate::seal::SealError;
use crate::store::{Revision, StateStore, StoreError};

/// Most versions a history lists unless asked otherwise.
pub const DEFAULT_HISTORY_LIMIT: usize = 100;

/// How far back a version given by serial or commit is looked for.
const RESOLVE_LIMIT: usize = 100_000;

/// One version of a state, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionInfo {
    /// The commit that wrote (or deleted) this version.
    pub commit: Revision,
    /// The state's serial, when known (from gitstate's commit message, else the state itself).
    pub serial: Option<u64>,
    /// Who wrote it: the lock holder's `Who` or the caller gitstate recorded, else the commit's
    /// author.
    pub who: String,
    /// Commit time, seconds since the Unix epoch.
    pub time: i64,
    /// Stored size in bytes; `None` for a deletion.
    pub size: Option<u64>,
    /// This commit deleted the state.
    pub deleted: bool,
}

impl VersionInfo {
    /// Reads what gitstate's commit messages say (`Update {path} (serial N) by {Who}`,
    /// `Delete {path} by {Who}`); other commits are attributed to their author.
    pub fn of(version: &Version, path: &StatePath) -> VersionInfo {
        let first_line = version.message.lines().next().unwrap_or("");
        let (serial, who) = parse_message(first_line, path.as_str());
        VersionInfo {
            commit: version.commit.clone(),
            serial,
            who: who.unwrap_or_else(|| version.author.clone()),
            time: version.time,
            size: version.size,
            deleted: version.size.is_none(),
        }
    }
}

/// `(serial, who)` from a gitstate commit message's first line.
fn parse_message(line: &str, path: &str) -> (Option<u64>, Option<String>) {
    let rest = line
        .strip_prefix("Update ")
        .or_else(|| line.strip_prefix("Delete "))
        .and_then(|rest| rest.strip_prefix(path))
        .and_then(|rest| rest.strip_prefix(' '));
    let Some(rest) = rest else {
        return (None, None);
    };
    let (serial, rest) = match rest
        .strip_prefix("(serial ")
        .and_then(|r| r.split_once(") "))
    {
        Some((n, rest)) => (n.parse().ok(), rest),
        None => (None, rest),
    };
    (serial, rest.strip_prefix("by ").map(str::to_owned))
}

/// A held lock, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockListing {
    /// The state path.
    pub path: String,
    /// The holder's LockInfo `ID`, `Who`, `Operation`, `Created` (RFC 3339) and `Info`.
    pub id: String,
    /// `Who`.
    pub who: String,
    /// `Operation`.
    pub operation: String,
    /// `Created`.
    pub created: String,
    /// `Info`.
    pub info: String,
    /// Tip of the lock branch.
    pub commit: Revision,
    /// Seconds since `Created`, when it is an RFC 3339 time.
    pub age_seconds: Option<i64>,
}

/// A state on the branch, as listed: its size and what its last commit says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateRow {
    /// The state path.
    pub path: String,
    /// Stored size in bytes.
    pub size: u64,
    /// Serial of the current version, when gitstate's commit message names it.
    pub serial: Option<u64>,
    /// Who wrote the current version.
    pub updated_by: Option<String>,
    /// When (commit time, seconds since the Unix epoch).
    pub updated_at: Option<i64>,
    /// The commit of the current version.
    pub commit: Option<Revision>,
    /// The lock, when one is held.
    pub lock: Option<LockListing>,
}

/// One page of a repository's states ([`Backend::states`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatesPage {
    /// The rows, in path order.
    pub rows: Vec<StateRow>,
    /// Files under the query's prefix, in all pages.
    pub total: usize,
    /// The cursor of the next page (`after=`), when one follows.
    pub next: Option<String>,
}

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Restored {
    /// The version whose content was written back.
    pub from: VersionInfo,
    /// The serial the restored state got.
    pub serial: u64,
    /// The new commit (`None`: the state already held exactly that content).
    pub commit: Option<Revision>,
    /// The catalog's facts of the state written back (its commit included), from the one check
    /// of it.
    #[serde(skip)]
    pub facts: crate::catalog::StateFacts,
}

/// Whether a version asked for could be a commit id: 4 to 40 hex digits (a prefix is enough).
fn is_commit_prefix(spec: &str) -> bool {
    (4..=40).contains(&spec.len()) && spec.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Backend {
    /// The versions of `path`, newest first, at most `limit`.
    pub async fn history(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        limit: usize,
    ) -> Result<Vec<VersionInfo>, BackendError> {
        let versions = store.history(path, limit).await?;
        let mut listed = Vec::with_capacity(versions.len());
        for version in &versions {
            let mut info = VersionInfo::of(version, path);
            if info.serial.is_none() && !info.deleted {
                // Not written by gitstate: the state itself says. A version that cannot be
                // opened here (terraform-backend-git's legacy aes without its passphrase, a sops
                // document without its key) is listed without a serial; reading it is refused.
                let state = match self.read_version(store, path, &info.commit).await {
                    Ok(state) => state,
                    Err(BackendError::Seal(e)) if !matches!(e, SealError::Unavailable { .. }) => {
                        None
                    }
                    Err(e) => return Err(e),
                };
                info.serial = state
                    .and_then(|state| gitstate_statefile::read(&state).ok())
                    .and_then(|summary| summary.serial);
            }
            listed.push(info);
        }
        Ok(listed)
    }

    /// The content of `path` at `commit` (a commit of its history), opened (decrypted) when
    /// sealed.
    pub async fn read_version(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        commit: &Revision,
    ) -> Result<Option<Bytes>, BackendError> {
        match store.read_version(path, commit).await? {
            Some(stored) => {
                let at = crate::seal::Place::new(store.repository(), path);
                Ok(Some(self.open_stored(&at, stored).await?))
            }
            None => Ok(None),
        }
    }

    /// Finds the version `spec` names: a serial (the newest version with it) or a commit id
    /// (prefix of at least 4 hex digits). Digits are read as a serial first.
    pub async fn resolve_version(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        spec: &str,
    ) -> Result<VersionInfo, BackendError> {
        let spec = spec.trim();
        let as_serial = spec
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| spec.parse::<u64>().ok())
            .flatten();
        if as_serial.is_none() && !is_commit_prefix(spec) {
            return Err(BackendError::BadRequest(format!(
                "the version '{spec}' is neither a serial (digits) nor a commit id (4 to 40 hex digits)"
            )));
        }
        let versions = self.history(store, path, RESOLVE_LIMIT).await?;
        let by_serial = versions
            .iter()
            .find(|v| !v.deleted && v.serial.is_some() && v.serial == as_serial);
        let by_commit = || {
            let spec = spec.to_ascii_lowercase();
            let mut hits = versions.iter().filter(|v| v.commit.starts_with(&spec));
            match (hits.next(), hits.next()) {
                (Some(hit), None) => Ok(Some(hit)),
                (Some(_), Some(_)) => Err(BackendError::BadRequest(format!(
                    "the commit id '{spec}' is ambiguous in the history of {path}; give more digits"
                ))),
                _ => Ok(None),
            }
        };
        let found = match by_serial {
            Some(found) => Some(found),
            None if is_commit_prefix(spec) => by_commit()?,
            None => None,
        };
        found.cloned().ok_or_else(|| {
            BackendError::NotFound(format!(
                "{path} has no version '{spec}' (give a serial or a commit id from its history)"
            ))
        })
    }

    /// `GET ?version=`: an earlier version of the state, opened; `None` when that version is a
    /// deletion.
    pub async fn get_version(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        spec: &str,
    ) -> Result<(VersionInfo, Option<Bytes>), BackendError> {
        let info = self.resolve_version(store, path, spec).await?;
        if info.deleted {
            return Ok((info, None));
        }
        let state = self.read_version(store, path, &info.commit).await?;
        Ok((info, state))
    }

    /// Writes the content of version `spec` back as a new commit with the serial after both the
    /// current one and the restored one's, under the usual lock rules (a held lock refuses it with
    /// [`BackendError::Locked`] unless `lock_id` is its ID).
    pub async fn restore(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        spec: &str,
        lock_id: Option<&str>,
        caller: &Caller,
    ) -> Result<Restored, BackendError> {
        let (from, state) = self.get_version(store, path, spec).await?;
        let Some(state) = state else {
            return Err(BackendError::BadRequest(format!(
                "version {spec} of {path} is a deletion; there is no state to restore"
            )));
        };
        let current = match self.get(store, path, None).await? {
            // A current state Terraform cannot read (one written before gitstate checked states)
            // has no serial to continue: restoring over it is how it is mended.
            Some(current) => gitstate_statefile::read(&current)
                .ok()
                .and_then(|file| file.serial),
            None => None,
        };
        let serial = current.unwrap_or(0).max(from.serial.unwrap_or(0)) + 1;
        let state = self.check(with_serial(&state, serial)?, true)?;
        let commit = self
            .post(store, path, &state, lock_id, caller)
            .await?
            .map(|written| written.commit);
        let mut facts = state.facts.unwrap_or_default();
        facts.commit = commit.clone();
        Ok(Restored {
            from,
            serial,
            commit,
            facts,
        })
    }

    /// One page of the states of a repository (the files on the state branch that are valid
    /// state paths, as `query` asks), with their last writer and lock holder, in path order.
    /// Locks on paths without a state are rows too, where they sort (not counted in `total`).
    pub async fn states(
        &self,
        store: &dyn StateStore,
        query: &ListQuery,
    ) -> Result<StatesPage, BackendError> {
        let (listed, locks) = tokio::try_join!(
            async { store.list_states(query).await.map_err(BackendError::from) },
            self.locks(store)
        )?;
        let next = listed.next().map(str::to_owned);
        let mut locks: std::collections::BTreeMap<String, LockListing> = locks
            .into_iter()
            .filter(|l| query.admits(&l.path))
            .filter(|l| next.as_ref().is_none_or(|last| l.path <= *last))
            .map(|l| (l.path.clone(), l))
            .collect();
        let mut rows = Vec::with_capacity(listed.states.len());
        for entry in listed.states {
            let Ok(path) = StatePath::parse(&entry.path) else {
                continue; // a README or anything else that is not a state
            };
            let info = entry
                .last_change
                .as_ref()
                .map(|version| VersionInfo::of(version, &path));
            rows.push(StateRow {
                lock: locks.remove(&entry.path),
                path: entry.path,
                size: entry.size,
                serial: info.as_ref().and_then(|i| i.serial),
                updated_by: info.as_ref().map(|i| i.who.clone()),
                updated_at: info.as_ref().map(|i| i.time),
                commit: info.map(|i| i.commit),
            });
        }
        rows.extend(locks.into_values().map(|lock| StateRow {
            path: lock.path.clone(),
            size: 0,
            serial: None,
            updated_by: None,
            updated_at: None,
            commit: None,
            lock: Some(lock),
        }));
        rows.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(StatesPage {
            rows,
            total: listed.total,
            next,
        })
    }

    /// The held locks of a repository, with their LockInfo.
    pub async fn locks(&self, store: &dyn StateStore) -> Result<Vec<LockListing>, BackendError> {
        let held = store.list_locks().await?;
        Ok(held
            .into_iter()
            .map(|lock| {
                let info = LockInfo::stored(&lock.content);
                let age_seconds = info.age_secs(crate::time::now_secs()).map(|age| age as i64);
                LockListing {
                    path: lock.path,
                    id: info.id,
                    who: info.who,
                    operation: info.operation,
                    created: info.created,
                    info: info.info,
                    commit: lock.tip,
                    age_seconds,
                }
            })
            .collect())
    }
}

/// The top-level members of a JSON object in document order, values kept as written.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(entry);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

/// `state` with its top-level `serial` set to `serial`, everything else byte for byte (member
/// order and nested formatting kept, so `git diff` shows only the serial).
pub fn with_serial(state: &[u8], serial: u64) -> Result<Bytes, BackendError> {
    let Members(mut members) = serde_json::from_slice(state).map_err(|e| {
        BackendError::BadRequest(format!("the stored version is not a JSON object: {e}"))
    })?;
    let value = RawValue::from_string(serial.to_string())
        .map_err(|e| BackendError::Store(StoreError::Internal(e.to_string())))?;
    match members.iter_mut().find(|(key, _)| key == "serial") {
        Some(member) => member.1 = value,
        None => members.push(("serial".into(), value)),
    }
    // Terraform writes two-space indented JSON; keep that layout when the input has it.
    let pretty = state.starts_with(b"{\n  \"");
    let mut out = String::with_capacity(state.len() + 8);
    out.push('{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if pretty {
            out.push_str("\n  ");
        }
        out.push_str(&serde_json::Value::String(key.clone()).to_string());
        out.push(':');
        if pretty {
            out.push(' ');
        }
        out.push_str(value.get());
    }
    if pretty {
        out.push('\n');
    }
    out.push('}');
    if pretty && state.ends_with(b"\n") {
        out.push('\n');
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(
            parse_message(
                "Update envs/prod.tfstate (serial 12) by alice",
                "envs/prod.tfstate"
            ),
            (Some(12), Some("alice".into()))
        );
        assert_eq!(
            parse_message("Delete x.tfstate by bob by night", "x.tfstate"),
            (None, Some("bob by night".into()))
        );
        assert_eq!(
            parse_message("Update x.tfstate by me", "x.tfstate"),
            (None, Some("me".into()))
        );
        assert_eq!(parse_message("Import states", "x.tfstate"), (None, None));
    }

    #[test]
    fn serial_rewrite_keeps_everything_else() {
        let state = "{\n  \"version\": 4,\n  \"terraform_version\": \"1.15.5\",\n  \"serial\": 3,\n  \"lineage\": \"l\",\n  \"outputs\": {\n    \"a\": {\n      \"value\": 1.50\n    }\n  }\n}\n";
        let rewritten = with_serial(state.as_bytes(), 9).unwrap();
        assert_eq!(
            std::str::from_utf8(&rewritten).unwrap(),
            state.replace("\"serial\": 3", "\"serial\": 9")
        );
        let compact = with_serial(br#"{"version":4,"lineage":"l"}"#, 2).unwrap();
        assert_eq!(&compact[..], br#"{"version":4,"lineage":"l","serial":2}"#);
        assert!(with_serial(b"[1]", 1).is_err());
    }
}
