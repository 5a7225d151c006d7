//! What a lock is (DESIGN §2, §3): where lock branches live, LockInfo (the JSON body of LOCK and
//! UNLOCK, stored exactly as received; this type is only the parsed view the rules need), who may
//! write a state while it is locked, and what an UNLOCK asks for, a checked release by the holder
//! or a force-unlock (which OIDC token took a lock is [`crate::lock_token`]). The protocol ([`crate::Backend`]), the HTTP layer and the catalog's audit
//! trail take these answers from here and decide none of them again.

use serde::Deserialize;

/// The one spelling of the lock branches' namespace.
macro_rules! lock_namespace {
    () => {
        "locks"
    };
}

/// The branch namespace of locks: the lock of `{path}` is the branch `locks/{path}`, and no
/// state branch (`ref`) may be inside it.
pub const LOCK_NAMESPACE: &str = lock_namespace!();

/// Where lock branches live, as a ref prefix: `refs/heads/locks/`.
pub const LOCK_REF_PREFIX: &str = concat!("refs/heads/", lock_namespace!(), "/");

/// The parsed fields of a LockInfo body. Unknown fields are allowed (clients add them over time).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct LockInfo {
    /// Lock ID chosen by the client.
    #[serde(rename = "ID")]
    pub id: String,
    /// The operation (e.g. `OperationTypeApply`).
    #[serde(rename = "Operation")]
    pub operation: String,
    /// Free-form info.
    #[serde(rename = "Info")]
    pub info: String,
    /// `user@host` of the holder.
    #[serde(rename = "Who")]
    pub who: String,
    /// Terraform version of the holder.
    #[serde(rename = "Version")]
    pub version: String,
    /// RFC 3339 creation time.
    #[serde(rename = "Created")]
    pub created: String,
    /// Path (empty for the http backend).
    #[serde(rename = "Path")]
    pub path: String,
}

/// Why a LockInfo body was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockInfoError {
    /// Not JSON, or a field of the wrong type.
    #[error("the lock body is not valid LockInfo JSON: {0}")]
    Malformed(String),
    /// No `ID`.
    #[error("the lock body has no \"ID\"; send the LockInfo JSON that terraform sends")]
    MissingId,
}

impl LockInfo {
    /// Parses a LOCK or UNLOCK body; `ID` must be a non-empty string.
    pub fn parse(body: &[u8]) -> Result<Self, LockInfoError> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|e| LockInfoError::Malformed(e.to_string()))?;
        if !value.is_object() {
            return Err(LockInfoError::Malformed("expected a JSON object".into()));
        }
        let info: LockInfo =
            serde_json::from_value(value).map_err(|e| LockInfoError::Malformed(e.to_string()))?;
        if info.id.is_empty() {
            return Err(LockInfoError::MissingId);
        }
        Ok(info)
    }

    /// A stored lock file, tolerant of anything: a lock file that is not LockInfo (written by
    /// hand) has empty fields, so no ID holds it and it can only be force-unlocked.
    pub fn stored(content: &[u8]) -> LockInfo {
        serde_json::from_slice(content).unwrap_or_default()
    }

    /// Whether this (stored) lock is held by the lock ID `id`.
    pub fn is_held_by(&self, id: &str) -> bool {
        !self.id.is_empty() && self.id == id
    }

    /// Whether a write that names `lock_id` (`?ID=` on POST and DELETE) may go on while this
    /// (stored) lock is held: only its holder's may. Any other write is answered 423.
    pub fn admits(&self, lock_id: Option<&str>) -> bool {
        lock_id.is_some_and(|id| self.is_held_by(id))
    }

    /// How old this (stored) lock is at `now` (Unix seconds), by its `Created`: `None` when
    /// `Created` is not an RFC 3339 time (a lock written by hand, or OpenTofu's zero time).
    /// A `Created` in the future counts as age zero.
    pub fn age_secs(&self, now: i64) -> Option<u64> {
        if self.created == GO_ZERO_TIME {
            return None;
        }
        let created = crate::time::parse_rfc3339(&self.created)?;
        Some(now.saturating_sub(created).max(0) as u64)
    }

    /// Whether this (stored) lock may be taken over under a repository's `lock_ttl`: it is older
    /// than `ttl_secs` by its `Created`. A lock whose age cannot be read never expires (it needs
    /// a force-unlock, as without a TTL).
    pub fn expired(&self, ttl_secs: u64, now: i64) -> bool {
        self.age_secs(now).is_some_and(|age| age > ttl_secs)
    }
}

/// A lock that a LOCK took over because it had outlived the repository's `lock_ttl` (DESIGN §2,
/// "Stale locks"): answered in `X-Gitstate-Took-Over`, logged, and recorded as a force-unlock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenOver {
    /// The old lock's ID.
    pub id: String,
    /// The old lock's `Who`.
    pub who: String,
    /// Its age when it was taken over, in seconds.
    pub age_secs: u64,
}

/// How Go's `encoding/json` writes a zero `time.Time`.
const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// What an UNLOCK asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unlock {
    /// Release whatever lock is held: `terraform force-unlock` (an empty body) and OpenTofu's
    /// force-unlock (LockInfo with only `ID`; OpenTofu ≥ 1.10).
    Force,
    /// The holder releasing its own lock: released only while this LockInfo's `ID` holds it
    /// (any other field set beside `ID` makes it the holder's UNLOCK, not a force-unlock).
    Holder(LockInfo),
    /// An operator releasing the lock it was shown (`gitstate unlock`): released only while `id`
    /// still holds it, and recorded as a force-unlock, since the holder did not release it.
    OnBehalf {
        /// The lock ID that was shown.
        id: String,
    },
    /// The workspace API's unlock: the caller releasing the lock its credential sealed
    /// (DESIGN §10, "One lock"), whatever its ID: released only while the held lock is sealed
    /// by the token the release is made with ([`crate::Backend::unlock`]).
    Sealed,
}

impl Unlock {
    /// Reads an UNLOCK body.
    pub fn parse(body: &[u8]) -> Result<Unlock, LockInfoError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Unlock::Force);
        }
        let info = LockInfo::parse(body)?;
        // OpenTofu marshals a Go LockInfo whose only field set is ID: its `Created` is Go's zero
        // time, not empty.
        let id_only = info.operation.is_empty()
            && info.info.is_empty()
            && info.who.is_empty()
            && info.version.is_empty()
            && matches!(info.created.as_str(), "" | GO_ZERO_TIME)
            && info.path.is_empty();
        Ok(if id_only {
            Unlock::Force
        } else {
            Unlock::Holder(info)
        })
    }

    /// The lock ID that must hold the lock for it to be released (`None`: any).
    pub fn required_id(&self) -> Option<&str> {
        match self {
            Unlock::Force | Unlock::Sealed => None,
            Unlock::Holder(info) => Some(&info.id),
            Unlock::OnBehalf { id } => Some(id),
        }
    }

    /// What the release is, once made: a force-unlock unless the holder asked, and who the
    /// audit trail names (the holder's `Who` for its own release; `None`: the caller).
    pub fn answer(&self) -> Unlocked {
        match self {
            Unlock::Holder(info) => Unlocked {
                force: false,
                who: Some(info.who.clone()).filter(|w| !w.is_empty()),
                released: false,
            },
            Unlock::Sealed => Unlocked {
                force: false,
                who: None,
                released: false,
            },
            Unlock::Force | Unlock::OnBehalf { .. } => Unlocked {
                force: true,
                who: None,
                released: false,
            },
        }
    }
}

/// The answer to an UNLOCK that succeeded (the lock is released, or none was held).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlocked {
    /// Released without the holder asking (force-unlock, or an operator's release).
    pub force: bool,
    /// Who released it, as the request says (the holder's `Who`); `None`: the caller.
    pub who: Option<String>,
    /// A lock was released (`false`: none was held, which is a success too).
    pub released: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_expires_only_past_its_ttl_by_a_readable_created() {
        let at = |created: &str| LockInfo {
            id: "a".into(),
            created: created.into(),
            ..LockInfo::default()
        };
        let now = crate::time::parse_rfc3339("2026-11-26T12:00:00Z").unwrap();
        let old = at("2026-11-26T11:29:59Z");
        assert_eq!(old.age_secs(now), Some(1801));
        assert!(old.expired(1800, now));
        assert!(!old.expired(1801, now));
        assert!(
            !at("2026-11-26T11:30:00Z").expired(1800, now),
            "exactly the TTL is not past it"
        );
        assert_eq!(
            at("2026-11-26T13:00:00Z").age_secs(now),
            Some(0),
            "a future Created"
        );
        for unreadable in ["", "yesterday", GO_ZERO_TIME] {
            assert_eq!(at(unreadable).age_secs(now), None, "{unreadable:?}");
            assert!(!at(unreadable).expired(0, now), "{unreadable:?}");
        }
    }

    #[test]
    fn parses_terraform_body() {
        let body = br#"{"ID":"abc","Operation":"OperationTypeApply","Info":"","Who":"me@host","Version":"1.0.3","Created":"2024-01-01T00:00:00Z","Path":""}"#;
        let info = LockInfo::parse(body).unwrap();
        assert_eq!(info.id, "abc");
        assert_eq!(info.who, "me@host");
        assert_eq!(Unlock::parse(body).unwrap(), Unlock::Holder(info));
    }

    #[test]
    fn each_unlock_form_is_what_terraform_and_opentofu_mean_by_it() {
        for (body, force, required) in [
            (&b""[..], true, None),
            (b" \n", true, None),
            (br#"{"ID":"abc"}"#, true, None),
            // What OpenTofu >= 1.10 sends for `tofu force-unlock abc`.
            (
                br#"{"ID":"abc","Operation":"","Info":"","Who":"","Version":"","Created":"0001-01-01T00:00:00Z","Path":""}"#,
                true,
                None,
            ),
            (
                br#"{"ID":"abc","Created":"2026-01-01T00:00:00Z"}"#,
                false,
                Some("abc"),
            ),
            (br#"{"ID":"abc","Version":"1"}"#, false, Some("abc")),
            (br#"{"ID":"abc","Path":"p"}"#, false, Some("abc")),
            (
                br#"{"ID":"abc","Operation":"OperationTypeApply","Who":"me@host"}"#,
                false,
                Some("abc"),
            ),
        ] {
            let unlock = Unlock::parse(body).unwrap();
            let text = String::from_utf8_lossy(body);
            assert_eq!(unlock.answer().force, force, "{text}");
            assert_eq!(unlock.required_id(), required, "{text}");
        }
        let on_behalf = Unlock::OnBehalf { id: "abc".into() };
        assert_eq!(
            (on_behalf.answer().force, on_behalf.required_id()),
            (true, Some("abc"))
        );
        assert!(Unlock::parse(br#"{"Who":"x"}"#).is_err());
    }

    #[test]
    fn only_the_holder_writes_under_a_lock() {
        let held = LockInfo::stored(br#"{"ID":"abc","Who":"me"}"#);
        assert!(held.admits(Some("abc")));
        assert!(!held.admits(Some("abd")) && !held.admits(None));
        // A lock file that is not LockInfo admits nobody, not even an empty ID.
        let odd = LockInfo::stored(b"written by hand");
        assert!(!odd.admits(Some("")) && !odd.admits(None));
        assert!(!LockInfo::stored(b"[]").is_held_by(""));
    }

    #[test]
    fn the_namespace_is_spelled_once() {
        assert_eq!(LOCK_REF_PREFIX, format!("refs/heads/{LOCK_NAMESPACE}/"));
    }

    #[test]
    fn refuses_bad_bodies() {
        assert!(matches!(
            LockInfo::parse(b"nope"),
            Err(LockInfoError::Malformed(_))
        ));
        assert!(matches!(
            LockInfo::parse(b"[]"),
            Err(LockInfoError::Malformed(_))
        ));
        assert!(matches!(
            LockInfo::parse(br#"{"ID":5}"#),
            Err(LockInfoError::Malformed(_))
        ));
        assert_eq!(
            LockInfo::parse(br#"{"Who":"x"}"#),
            Err(LockInfoError::MissingId)
        );
    }
}
