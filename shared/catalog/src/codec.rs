//! The item codec: how catalog facts are laid out in DynamoDB items (keys, attributes) and read
//! back. Pure functions, no client.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_dynamodb::types::{AttributeValue, DeleteRequest, WriteRequest};
use gitstate_core::{CatalogError, LockEntry, ManagedBy, ResourceIdentifier, StateEntry};

use crate::index_key::{IndexKeys, Kind};

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`: sorts as text in time order.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = gitstate_core::time::format_rfc3339(d.as_secs() as i64);
    format!("{}.{:09}Z", seconds.trim_end_matches('Z'), d.subsec_nanos())
}

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn get_s(item: &HashMap<String, AttributeValue>, key: &str) -> Option<String> {
    item.get(key).and_then(|v| v.as_s().ok()).cloned()
}

pub(crate) fn get_n(item: &HashMap<String, AttributeValue>, key: &str) -> Option<u64> {
    item.get(key)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

/// The partition of every state entry.
pub(crate) const STATES: &str = "STATES";
/// The partition of the identifiers held by more than one state.
pub(crate) const DUPS: &str = "DUPS";

/// The key of a state entry.
pub(crate) fn state_key(repository: &str, path: &str) -> (AttributeValue, AttributeValue) {
    (s(STATES), s(format!("{repository}#{path}")))
}

/// The partition and sort key of the resource index key.
pub(crate) const CONFIG: &str = "CONFIG";
pub(crate) const INDEX_KEY: &str = "index-key";

/// How many different states the holders are in.
pub(crate) fn distinct_states(holders: &[Holder]) -> usize {
    let states: std::collections::BTreeSet<(&str, &str)> = holders
        .iter()
        .map(|m| (m.repository.as_str(), m.path.as_str()))
        .collect();
    states.len()
}

/// An identifier as the index keeps it: hashes, never the value or the address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Indexed {
    pub(crate) value_hmac: String,
    pub(crate) address_hmac: String,
    pub(crate) resource_type: String,
    pub(crate) field: String,
}

impl Indexed {
    pub(crate) fn of(keys: &IndexKeys, id: &ResourceIdentifier) -> Result<Indexed, CatalogError> {
        Ok(Indexed {
            value_hmac: keys.hash(Kind::Value, &id.value)?,
            address_hmac: keys.hash(Kind::Address, &id.address)?,
            resource_type: id.resource_type.clone(),
            field: id.field.clone(),
        })
    }

    /// `None` for an entry of the old plaintext layout.
    pub(crate) fn from_item(item: &HashMap<String, AttributeValue>) -> Option<Indexed> {
        Some(Indexed {
            value_hmac: get_s(item, "value_hmac")?,
            address_hmac: get_s(item, "address_hmac")?,
            resource_type: get_s(item, "resource_type").unwrap_or_default(),
            field: get_s(item, "field").unwrap_or_default(),
        })
    }

    pub(crate) fn duplicate_key(&self) -> (String, String, String) {
        (
            self.value_hmac.clone(),
            self.resource_type.clone(),
            self.field.clone(),
        )
    }
}

/// One index entry of the `ID#` partition: where an identifier is held.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub(crate) repository: String,
    pub(crate) path: String,
    pub(crate) address_hmac: String,
    pub(crate) address_enc: String,
    pub(crate) resource_type: String,
    pub(crate) field: String,
    pub(crate) value_hmac: String,
    pub(crate) value_enc: String,
}

impl Holder {
    /// `None` for an entry of the old plaintext layout.
    pub(crate) fn of(item: &HashMap<String, AttributeValue>) -> Option<Holder> {
        Some(Holder {
            repository: get_s(item, "repository").unwrap_or_default(),
            path: get_s(item, "path").unwrap_or_default(),
            address_hmac: get_s(item, "address_hmac")?,
            address_enc: get_s(item, "address_enc")?,
            resource_type: get_s(item, "resource_type").unwrap_or_default(),
            field: get_s(item, "field").unwrap_or_default(),
            value_hmac: get_s(item, "value_hmac")?,
            value_enc: get_s(item, "value_enc")?,
        })
    }

    pub(crate) fn managed_by(&self, keys: &IndexKeys) -> Result<ManagedBy, CatalogError> {
        Ok(ManagedBy {
            repository: self.repository.clone(),
            path: self.path.clone(),
            address: keys.open(Kind::Address, &self.address_hmac, &self.address_enc)?,
            resource_type: self.resource_type.clone(),
            field: self.field.clone(),
        })
    }
}

/// The two keys of an index entry: by state, and by value.
pub(crate) fn index_item_keys(repository: &str, path: &str, id: &Indexed) -> [(String, String); 2] {
    [
        (
            format!("RES#{repository}#{path}"),
            format!("{}#{}", id.address_hmac, id.field),
        ),
        (
            format!("ID#{}", id.value_hmac),
            format!("{repository}#{path}#{}#{}", id.address_hmac, id.field),
        ),
    ]
}

/// The keys of an entry of the old plaintext layout (`RES#` item given), its `ID#{value}`
/// counterpart and its duplicate marker: all to be deleted.
pub(crate) fn legacy_keys(
    repository: &str,
    path: &str,
    item: &HashMap<String, AttributeValue>,
) -> Vec<(String, String)> {
    let (value, address, resource_type, field) = (
        get_s(item, "value").unwrap_or_default(),
        get_s(item, "address").unwrap_or_default(),
        get_s(item, "resource_type").unwrap_or_default(),
        get_s(item, "field").unwrap_or_default(),
    );
    let mut keys = Vec::new();
    if let (Some(pk), Some(sk)) = (get_s(item, "pk"), get_s(item, "sk")) {
        keys.push((pk, sk));
    }
    keys.push((
        format!("ID#{value}"),
        format!("{repository}#{path}#{address}#{field}"),
    ));
    keys.push((DUPS.to_owned(), format!("{value}#{resource_type}#{field}")));
    keys
}

pub(crate) fn delete_request(pk: String, sk: String) -> Result<WriteRequest, CatalogError> {
    let delete = DeleteRequest::builder()
        .key("pk", s(pk))
        .key("sk", s(sk))
        .build()
        .map_err(|e| CatalogError(format!("building a delete request: {e}")))?;
    Ok(WriteRequest::builder().delete_request(delete).build())
}

pub(crate) fn state_entry(item: &HashMap<String, AttributeValue>) -> StateEntry {
    let lock = get_s(item, "lock_id").map(|id| LockEntry {
        id,
        who: get_s(item, "lock_who").unwrap_or_default(),
        operation: get_s(item, "lock_operation").unwrap_or_default(),
        created: get_s(item, "lock_created").unwrap_or_default(),
    });
    StateEntry {
        repository: get_s(item, "repository").unwrap_or_default(),
        path: get_s(item, "path").unwrap_or_default(),
        serial: get_n(item, "serial"),
        lineage: get_s(item, "lineage"),
        size: get_n(item, "size"),
        terraform_version: get_s(item, "terraform_version"),
        resource_count: get_n(item, "resource_count"),
        commit: get_s(item, "commit"),
        updated_by: get_s(item, "updated_by"),
        updated_at: get_s(item, "updated_at"),
        deleted: item
            .get("deleted")
            .and_then(|v| v.as_bool().ok())
            .copied()
            .unwrap_or(false),
        lock,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_sort_as_text() {
        let a = rfc3339(UNIX_EPOCH + Duration::new(1_700_000_000, 5));
        let b = rfc3339(UNIX_EPOCH + Duration::new(1_700_000_000, 40));
        assert_eq!(a, "2023-11-14T22:13:20.000000005Z");
        assert!(a < b);
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn keys() -> IndexKeys {
        IndexKeys::from_secret(&[7u8; 32]).expect("an index key")
    }

    fn identifier(value: &str) -> ResourceIdentifier {
        ResourceIdentifier {
            value: value.into(),
            resource_type: "aws_s3_bucket".into(),
            field: "id".into(),
            address: "module.m.aws_s3_bucket.b[\"logs\"]".into(),
        }
    }

    #[test]
    fn a_state_item_reads_back_as_its_entry() {
        let full = item(&[
            ("repository", s("infra")),
            ("path", s("team/app.tfstate")),
            ("serial", n(12)),
            ("lineage", s("l-1")),
            ("size", n(2048)),
            ("terraform_version", s("1.11.4")),
            ("resource_count", n(3)),
            ("commit", s("abc")),
            ("updated_by", s("bob@ci")),
            ("updated_at", s("2026-11-23T10:00:00.000000000Z")),
            ("deleted", AttributeValue::Bool(true)),
            ("lock_id", s("id-1")),
            ("lock_who", s("bob@ci")),
            ("lock_operation", s("OperationTypeApply")),
            ("lock_created", s("2026-11-23T10:00:00Z")),
        ]);
        let entry = state_entry(&full);
        assert_eq!(
            (entry.repository.as_str(), entry.path.as_str()),
            ("infra", "team/app.tfstate")
        );
        assert_eq!(
            (entry.serial, entry.size, entry.resource_count),
            (Some(12), Some(2048), Some(3))
        );
        assert!(entry.deleted);
        let lock = entry.lock.expect("a lock");
        assert_eq!((lock.id.as_str(), lock.who.as_str()), ("id-1", "bob@ci"));

        let bare = state_entry(&item(&[
            ("repository", s("infra")),
            ("serial", s("not a number")),
        ]));
        assert_eq!(bare.serial, None, "a damaged number is absent, not zero");
        assert!(!bare.deleted && bare.lock.is_none());
    }

    #[test]
    fn index_items_hold_hashes_and_sealed_texts_never_the_identifier() {
        let keys = keys();
        let id = identifier("acme-logs");
        let indexed = Indexed::of(&keys, &id).expect("indexed");
        assert_ne!(indexed.value_hmac, id.value);
        assert_eq!(
            indexed,
            Indexed::of(&keys, &id).expect("indexed"),
            "the same identifier hashes the same (find and rebuild depend on it)"
        );
        let [(by_state_pk, by_state_sk), (by_value_pk, by_value_sk)] =
            index_item_keys("infra", "app.tfstate", &indexed);
        assert_eq!(by_state_pk, "RES#infra#app.tfstate");
        assert_eq!(by_state_sk, format!("{}#id", indexed.address_hmac));
        assert_eq!(by_value_pk, format!("ID#{}", indexed.value_hmac));
        assert!(by_value_sk.starts_with("infra#app.tfstate#"));
        for key in [&by_state_pk, &by_state_sk, &by_value_pk, &by_value_sk] {
            assert!(
                !key.contains("acme-logs") && !key.contains("aws_s3_bucket.b"),
                "{key}"
            );
        }

        let address_enc = keys
            .seal(Kind::Address, &indexed.address_hmac, &id.address)
            .expect("sealed");
        let value_enc = keys
            .seal(Kind::Value, &indexed.value_hmac, &id.value)
            .expect("sealed");
        let stored = item(&[
            ("repository", s("infra")),
            ("path", s("app.tfstate")),
            ("value_hmac", s(indexed.value_hmac.clone())),
            ("value_enc", s(value_enc)),
            ("address_hmac", s(indexed.address_hmac.clone())),
            ("address_enc", s(address_enc)),
            ("resource_type", s("aws_s3_bucket")),
            ("field", s("id")),
        ]);
        assert_eq!(Indexed::from_item(&stored), Some(indexed));
        let holder = Holder::of(&stored).expect("a holder");
        let managed = holder.managed_by(&keys).expect("opened");
        assert_eq!(managed.address, id.address);
        assert_eq!(
            (managed.repository.as_str(), managed.path.as_str()),
            ("infra", "app.tfstate")
        );
        assert!(
            holder
                .managed_by(&IndexKeys::from_secret(&[8u8; 32]).expect("key"))
                .is_err(),
            "another table's key opens nothing"
        );
    }

    #[test]
    fn items_of_the_old_plaintext_layout_are_recognised_for_removal() {
        let legacy = item(&[
            ("pk", s("RES#infra#app.tfstate")),
            ("sk", s("aws_s3_bucket.b#id")),
            ("value", s("acme-logs")),
            ("address", s("aws_s3_bucket.b")),
            ("resource_type", s("aws_s3_bucket")),
            ("field", s("id")),
        ]);
        assert_eq!(Indexed::from_item(&legacy), None);
        assert!(Holder::of(&legacy).is_none());
        assert_eq!(
            legacy_keys("infra", "app.tfstate", &legacy),
            [
                (
                    "RES#infra#app.tfstate".to_owned(),
                    "aws_s3_bucket.b#id".to_owned()
                ),
                (
                    "ID#acme-logs".to_owned(),
                    "infra#app.tfstate#aws_s3_bucket.b#id".to_owned()
                ),
                (DUPS.to_owned(), "acme-logs#aws_s3_bucket#id".to_owned()),
            ]
        );
    }
}
