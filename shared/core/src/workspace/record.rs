//! A workspace's record (DESIGN §10, "Records"): what makes a workspace exist before it has a
//! state, kept in git on the state branch at `.gitstate/workspaces/{name}.json`. It holds no
//! secret: the name, when it was created, and its tags.

use serde::{Deserialize, Serialize};

/// The JSON of a record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Record {
    /// The workspace's name, as created.
    pub name: String,
    /// When it was created (RFC 3339, UTC).
    #[serde(rename = "created-at")]
    pub created_at: String,
    /// Its tags, sorted, once each.
    pub tags: Vec<String>,
}

impl Record {
    /// A record of `name`, created now.
    pub fn new(name: &str) -> Record {
        Record {
            name: name.to_owned(),
            created_at: crate::time::now_rfc3339(),
            tags: Vec::new(),
        }
    }

    /// A stored record, tolerant of anything: someone with push access may write the file; one
    /// that is not a record's JSON still makes the workspace exist, with nothing else known.
    pub fn stored(content: &[u8]) -> Record {
        serde_json::from_slice(content).unwrap_or_default()
    }

    /// The file's bytes (pretty JSON and a newline, for readable diffs).
    pub fn to_bytes(&self) -> bytes::Bytes {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        bytes::Bytes::from(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_stranger_file_still_counts() {
        let record = Record::new("app-prod");
        assert_eq!(Record::stored(&record.to_bytes()), record);
        assert!(record.created_at.ends_with('Z'), "{}", record.created_at);
        assert_eq!(Record::stored(b"not json"), Record::default());
        assert_eq!(
            Record::stored(br#"{"name":"x","extra":1}"#).name,
            "x",
            "unknown fields are allowed"
        );
    }
}
