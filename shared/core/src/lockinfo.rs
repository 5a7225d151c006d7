//! LockInfo, the JSON body of LOCK/UNLOCK requests. It is stored exactly as received; this type is
//! only the parsed view the lock rules need.

use serde::Deserialize;

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
    /// Parses a LockInfo body; `ID` must be a non-empty string.
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

    /// True when only `ID` is set: OpenTofu's force-unlock.
    pub fn is_id_only(&self) -> bool {
        self.operation.is_empty()
            && self.info.is_empty()
            && self.who.is_empty()
            && self.version.is_empty()
            && self.created.is_empty()
    }

    /// The holder's ID from a stored lock file, tolerant of anything: a lock file that is not
    /// LockInfo (written by hand) has no ID and can only be force-unlocked.
    pub fn holder_id(stored: &[u8]) -> Option<String> {
        serde_json::from_slice::<LockInfo>(stored)
            .ok()
            .map(|l| l.id)
            .filter(|id| !id.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_terraform_body() {
        let body = br#"{"ID":"abc","Operation":"OperationTypeApply","Info":"","Who":"me@host","Version":"1.0.3","Created":"2024-01-01T00:00:00Z","Path":""}"#;
        let info = LockInfo::parse(body).unwrap();
        assert_eq!(info.id, "abc");
        assert_eq!(info.who, "me@host");
        assert!(!info.is_id_only());
    }

    #[test]
    fn id_only_is_force() {
        let info = LockInfo::parse(br#"{"ID":"abc"}"#).unwrap();
        assert!(info.is_id_only());
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
