//! gitstate's [`Catalog`] adapter on DynamoDB (single-table design). Git stays the source of
//! truth: this is a derived index that answers "which states are there, who holds their locks,
//! who did what when" without walking every repository.
//!
//! Key schema (table keys `pk` and `sk`, both strings; TTL attribute `expires_at`):
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | a state | `STATE#{repository}` | `{path}` | `repository`, `path`, `serial`, `lineage`, `size`, `terraform_version`, `resource_count`, `updated_by`, `updated_at`, `deleted`, `lock_id`, `lock_who`, `lock_operation`, `lock_created` |
//! | an audit event | `AUDIT#{repository}#{path}` | `{RFC 3339 time with nanoseconds}#{sequence}` | `action` (write, delete, lock, unlock, force-unlock), `who`, `serial`, `lock_id`, `expires_at` |
//!
//! State entries are updated with a condition so an older serial never overwrites a newer one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use gitstate_core::{Catalog, CatalogChange, CatalogError, CatalogEvent};
use serde::Serialize;

/// The DynamoDB catalog.
#[derive(Clone)]
pub struct DynamoCatalog {
    client: aws_sdk_dynamodb::Client,
    table: String,
    audit_ttl: Duration,
}

impl std::fmt::Debug for DynamoCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoCatalog")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// One state as the catalog knows it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct StateEntry {
    /// Repository name.
    pub repository: String,
    /// State path.
    pub path: String,
    /// Latest serial seen.
    pub serial: Option<u64>,
    /// Lineage.
    pub lineage: Option<String>,
    /// Size of the state as POSTed.
    pub size: Option<u64>,
    /// Terraform version that wrote it.
    pub terraform_version: Option<String>,
    /// Resource instances.
    pub resource_count: Option<u64>,
    /// Last writer.
    pub updated_by: Option<String>,
    /// When (RFC 3339).
    pub updated_at: Option<String>,
    /// Deleted since.
    pub deleted: bool,
    /// The lock holder's ID, `Who`, operation and creation time, when locked.
    pub lock: Option<LockEntry>,
}

/// A held lock.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct LockEntry {
    /// `ID`.
    pub id: String,
    /// `Who`.
    pub who: String,
    /// `Operation`.
    pub operation: String,
    /// `Created`.
    pub created: String,
}

/// One audit event.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct AuditEntry {
    /// When (RFC 3339 with nanoseconds).
    pub at: String,
    /// `write`, `delete`, `lock`, `unlock` or `force-unlock`.
    pub action: String,
    /// Who.
    pub who: String,
    /// Serial written, for writes.
    pub serial: Option<u64>,
    /// Lock ID, for locks.
    pub lock_id: Option<String>,
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

fn failed<E: ProvideErrorMetadata + std::fmt::Debug>(
    action: &str,
) -> impl Fn(
    aws_sdk_dynamodb::error::SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
) -> CatalogError
       + '_ {
    move |e| {
        let detail = match &e {
            aws_sdk_dynamodb::error::SdkError::ServiceError(s) => format!(
                "{} {}",
                s.err().code().unwrap_or("error"),
                s.err().message().unwrap_or("")
            ),
            aws_sdk_dynamodb::error::SdkError::TimeoutError(_) => "timed out".into(),
            aws_sdk_dynamodb::error::SdkError::DispatchFailure(_) => {
                "DynamoDB could not be reached".into()
            }
            _ => "the request failed".into(),
        };
        CatalogError(format!("{action}: {}", detail.trim_end()))
    }
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
fn rfc3339(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        d.subsec_nanos()
    )
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s(item: &HashMap<String, AttributeValue>, key: &str) -> Option<String> {
    item.get(key).and_then(|v| v.as_s().ok()).cloned()
}

fn get_n(item: &HashMap<String, AttributeValue>, key: &str) -> Option<u64> {
    item.get(key)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
}

impl DynamoCatalog {
    /// A catalog on `table`, with the AWS configuration of the environment (credential chain,
    /// region, `AWS_ENDPOINT_URL`), explicit timeouts, and audit events kept `audit_ttl`.
    pub async fn connect(table: &str, audit_ttl: Duration) -> DynamoCatalog {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(3))
            .operation_attempt_timeout(Duration::from_secs(5))
            .operation_timeout(Duration::from_secs(12))
            .build();
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .timeout_config(timeouts)
            .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(2))
            .load()
            .await;
        DynamoCatalog {
            client: aws_sdk_dynamodb::Client::new(&sdk),
            table: table.to_owned(),
            audit_ttl,
        }
    }

    /// Creates the table (as `infra/template.yaml` does) unless it exists.
    pub async fn create_table(&self) -> Result<bool, CatalogError> {
        let key = |name: &str, kind: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
        };
        let attribute = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
        };
        let built = (
            key("pk", KeyType::Hash),
            key("sk", KeyType::Range),
            attribute("pk"),
            attribute("sk"),
        );
        let (Ok(pk), Ok(sk), Ok(pk_attr), Ok(sk_attr)) = built else {
            return Err(CatalogError("building the table definition failed".into()));
        };
        let created = self
            .client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(pk)
            .key_schema(sk)
            .attribute_definitions(pk_attr)
            .attribute_definitions(sk_attr)
            .send()
            .await;
        match created {
            Ok(_) => {}
            Err(e) if e.code() == Some("ResourceInUseException") => return Ok(false),
            Err(e) => return Err(failed("CreateTable")(e)),
        }
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name("expires_at")
            .enabled(true)
            .build()
            .map_err(|e| CatalogError(format!("TTL specification: {e}")))?;
        self.client
            .update_time_to_live()
            .table_name(&self.table)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(failed("UpdateTimeToLive"))?;
        Ok(true)
    }

    /// Every state entry, sorted by repository and path.
    pub async fn states(&self) -> Result<Vec<StateEntry>, CatalogError> {
        let mut entries = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(pk, :state)")
                .expression_attribute_values(":state", s("STATE#"))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(failed("Scan"))?;
            for item in page.items() {
                entries.push(state_entry(item));
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => break,
            }
        }
        entries.sort_by(|a, b| (&a.repository, &a.path).cmp(&(&b.repository, &b.path)));
        Ok(entries)
    }

    /// One state's audit trail, oldest first.
    pub async fn audit(
        &self,
        repository: &str,
        path: &str,
    ) -> Result<Vec<AuditEntry>, CatalogError> {
        let mut entries = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(format!("AUDIT#{repository}#{path}")))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(failed("Query"))?;
            for item in page.items() {
                entries.push(AuditEntry {
                    at: get_s(item, "at").unwrap_or_default(),
                    action: get_s(item, "action").unwrap_or_default(),
                    who: get_s(item, "who").unwrap_or_default(),
                    serial: get_n(item, "serial"),
                    lock_id: get_s(item, "lock_id"),
                });
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => break,
            }
        }
        Ok(entries)
    }

    async fn update_state(&self, event: &CatalogEvent, at: &str) -> Result<(), CatalogError> {
        let key_pk = s(format!("STATE#{}", event.repository));
        let key_sk = s(event.path.clone());
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", key_pk)
            .key("sk", key_sk)
            .expression_attribute_values(":repository", s(&event.repository))
            .expression_attribute_values(":path", s(&event.path));
        let base = "SET repository = :repository, #path = :path";
        // `path` and `size` are DynamoDB reserved words
        update = update.expression_attribute_names("#path", "path");
        let expression = match &event.change {
            CatalogChange::Write(facts) => {
                update = update
                    .expression_attribute_names("#size", "size")
                    .expression_attribute_values(":size", n(facts.size))
                    .expression_attribute_values(":by", s(&event.who))
                    .expression_attribute_values(":at", s(at))
                    .expression_attribute_values(":no", AttributeValue::Bool(false));
                let mut set = format!(
                    "{base}, #size = :size, updated_by = :by, updated_at = :at, deleted = :no"
                );
                if let Some(serial) = facts.serial {
                    update = update
                        .expression_attribute_values(":serial", n(serial))
                        .condition_expression("attribute_not_exists(serial) OR serial <= :serial");
                    set.push_str(", serial = :serial");
                }
                for (name, value) in [
                    ("lineage", facts.lineage.clone()),
                    ("terraform_version", facts.terraform_version.clone()),
                ] {
                    if let Some(value) = value {
                        update = update.expression_attribute_values(format!(":{name}"), s(value));
                        set.push_str(&format!(", {name} = :{name}"));
                    }
                }
                if let Some(count) = facts.resource_count {
                    update = update.expression_attribute_values(":resources", n(count));
                    set.push_str(", resource_count = :resources");
                }
                set
            }
            CatalogChange::Delete => {
                update = update
                    .expression_attribute_values(":by", s(&event.who))
                    .expression_attribute_values(":at", s(at))
                    .expression_attribute_values(":yes", AttributeValue::Bool(true));
                format!("{base}, updated_by = :by, updated_at = :at, deleted = :yes")
            }
            CatalogChange::Lock(lock) => {
                update = update
                    .expression_attribute_values(":lock_id", s(&lock.id))
                    .expression_attribute_values(":lock_who", s(&lock.who))
                    .expression_attribute_values(":lock_operation", s(&lock.operation))
                    .expression_attribute_values(":lock_created", s(&lock.created));
                format!("{base}, lock_id = :lock_id, lock_who = :lock_who, lock_operation = :lock_operation, lock_created = :lock_created")
            }
            CatalogChange::Unlock { .. } => {
                format!("{base} REMOVE lock_id, lock_who, lock_operation, lock_created")
            }
        };
        match update.update_expression(expression).send().await {
            Ok(_) => Ok(()),
            // an older serial arrived late: the entry already shows a newer one
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(()),
            Err(e) => Err(failed("UpdateItem")(e)),
        }
    }

    async fn add_audit(&self, event: &CatalogEvent, at: &str) -> Result<(), CatalogError> {
        let (action, serial, lock_id) = match &event.change {
            CatalogChange::Write(facts) => ("write", facts.serial, None),
            CatalogChange::Delete => ("delete", None, None),
            CatalogChange::Lock(lock) => ("lock", None, Some(lock.id.clone())),
            CatalogChange::Unlock { force: false } => ("unlock", None, None),
            CatalogChange::Unlock { force: true } => ("force-unlock", None, None),
        };
        let expires = event
            .at
            .checked_add(self.audit_ttl)
            .unwrap_or(event.at)
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(
                "pk",
                s(format!("AUDIT#{}#{}", event.repository, event.path)),
            )
            .item("sk", s(format!("{at}#{sequence:012}")))
            .item("at", s(at))
            .item("action", s(action))
            .item("who", s(&event.who))
            .item("expires_at", n(expires));
        if let Some(serial) = serial {
            put = put.item("serial", n(serial));
        }
        if let Some(id) = lock_id {
            put = put.item("lock_id", s(id));
        }
        put.send().await.map_err(failed("PutItem"))?;
        Ok(())
    }
}

fn state_entry(item: &HashMap<String, AttributeValue>) -> StateEntry {
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

#[async_trait]
impl Catalog for DynamoCatalog {
    async fn record(&self, event: CatalogEvent) -> Result<(), CatalogError> {
        let at = rfc3339(event.at);
        // The audit first: it is append-only, so a failure of the state entry still leaves the
        // trail complete, and the next write repairs the entry.
        self.add_audit(&event, &at).await?;
        self.update_state(&event, &at).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_sort_as_text() {
        let a = rfc3339(UNIX_EPOCH + Duration::new(1_700_000_000, 5));
        let b = rfc3339(UNIX_EPOCH + Duration::new(1_700_000_000, 40));
        assert_eq!(a, "2023-11-14T22:13:20.000000005Z");
        assert!(a < b);
    }
}
