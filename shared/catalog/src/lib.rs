//! gitstate's [`Catalog`] adapter on DynamoDB (single-table design). Git stays the source of
//! truth: this is a derived index that answers "which states are there, who holds their locks,
//! who did what when" without walking every repository.
//!
//! Key schema (table keys `pk` and `sk`, both strings; TTL attribute `expires_at`):
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | a state | `STATES` | `{repository}#{path}` | `repository`, `path`, `serial`, `lineage`, `size`, `terraform_version`, `resource_count`, `commit`, `updated_by`, `updated_at`, `deleted`, `lock_id`, `lock_who`, `lock_operation`, `lock_created` |
//! | an audit event | `AUDIT#{repository}#{path}` | `{RFC 3339 time with nanoseconds}#{sequence}` | `action` (write, delete, lock, unlock, force-unlock), `who`, `serial`, `lock_id`, `commit`, `expires_at` |
//! | a state's identifier | `RES#{repository}#{path}` | `{address}#{field}` | `value`, `resource_type`, `field`, `address`, `repository`, `path` |
//! | the same, by value | `ID#{value}` | `{repository}#{path}#{address}#{field}` | the same |
//! | an identifier held by more than one state | `DUPS` | `{value}#{resource_type}#{field}` | `value`, `resource_type`, `field` |
//!
//! Every query reads only what it answers: `states` is one partition, `find` one partition,
//! `duplicates` the `DUPS` partition and one partition per duplicate; nothing scans the table.
//! State entries are updated with a condition so an older serial never overwrites a newer one;
//! the resource index of a state is brought in line with a write only when its entry took it.
//! The index holds identifying attributes only (`id`, `arn`, `self_link`, `name`), read from the
//! plaintext the server had in hand, never other attribute values.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::types::{DeleteRequest, PutRequest, WriteRequest};
use gitstate_core::{
    AuditEntry, Catalog, CatalogChange, CatalogError, CatalogEvent, Duplicate, LockEntry,
    LockFacts, ManagedBy, ResourceIdentifier, StateEntry,
};

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

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`: sorts as text in time order.
fn rfc3339(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = gitstate_core::time::format_rfc3339(d.as_secs() as i64);
    format!("{}.{:09}Z", seconds.trim_end_matches('Z'), d.subsec_nanos())
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

    /// All items of the partition `pk`, in `sk` order (a query, page by page).
    async fn query_partition(
        &self,
        pk: String,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, CatalogError> {
        let mut items = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(pk.clone()))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(failed("Query"))?;
            items.extend(page.items().iter().cloned());
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(items),
            }
        }
    }

    /// Updates a state entry; `Ok(false)` when a newer serial is already recorded (the event
    /// arrived late and changes nothing).
    async fn update_state(&self, event: &CatalogEvent, at: &str) -> Result<bool, CatalogError> {
        let (key_pk, key_sk) = state_key(&event.repository, &event.path);
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
                    ("commit", facts.commit.clone()),
                ] {
                    if let Some(value) = value {
                        // aliased: `commit` is a DynamoDB reserved word
                        update = update
                            .expression_attribute_names(format!("#{name}"), name)
                            .expression_attribute_values(format!(":{name}"), s(value));
                        set.push_str(&format!(", #{name} = :{name}"));
                    }
                }
                if let Some(count) = facts.resource_count {
                    update = update.expression_attribute_values(":resources", n(count));
                    set.push_str(", resource_count = :resources");
                }
                set
            }
            CatalogChange::Delete { commit } => {
                update = update
                    .expression_attribute_values(":by", s(&event.who))
                    .expression_attribute_values(":at", s(at))
                    .expression_attribute_values(":yes", AttributeValue::Bool(true));
                let mut set = format!("{base}, updated_by = :by, updated_at = :at, deleted = :yes");
                if let Some(commit) = commit {
                    update = update.expression_attribute_values(":commit", s(commit));
                    set.push_str(", #commit = :commit");
                    update = update.expression_attribute_names("#commit", "commit");
                }
                set
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
            Ok(_) => Ok(true),
            // an older serial arrived late: the entry already shows a newer one
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(false),
            Err(e) => Err(failed("UpdateItem")(e)),
        }
    }

    async fn add_audit(&self, event: &CatalogEvent, at: &str) -> Result<(), CatalogError> {
        let (action, serial, lock_id, commit) = match &event.change {
            CatalogChange::Write(facts) => ("write", facts.serial, None, facts.commit.clone()),
            CatalogChange::Delete { commit } => ("delete", None, None, commit.clone()),
            CatalogChange::Lock(lock) => ("lock", None, Some(lock.id.clone()), None),
            CatalogChange::Unlock { force: false } => ("unlock", None, None, None),
            CatalogChange::Unlock { force: true } => ("force-unlock", None, None, None),
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
        if let Some(commit) = commit {
            put = put.item("commit", s(commit));
        }
        put.send().await.map_err(failed("PutItem"))?;
        Ok(())
    }

    /// Brings the resource index of one state in line with `identifiers`: what the state no
    /// longer holds is deleted, what is new is put (both directions); with `check_duplicates`,
    /// each identifier whose holders changed is read back and its `DUPS` marker set or removed
    /// (a rebuild skips that and recomputes every marker at the end).
    async fn sync_index(
        &self,
        repository: &str,
        path: &str,
        identifiers: &[ResourceIdentifier],
        check_duplicates: bool,
    ) -> Result<(), CatalogError> {
        let state_pk = format!("RES#{repository}#{path}");
        let indexed: std::collections::BTreeSet<ResourceIdentifier> = self
            .query_partition(state_pk.clone())
            .await?
            .iter()
            .map(identifier_of)
            .collect();
        let wanted: std::collections::BTreeSet<ResourceIdentifier> =
            identifiers.iter().cloned().collect();
        let mut requests = Vec::new();
        for gone in indexed.difference(&wanted) {
            for (pk, sk) in index_keys(repository, path, gone) {
                let delete = DeleteRequest::builder()
                    .key("pk", s(pk))
                    .key("sk", s(sk))
                    .build()
                    .map_err(|e| CatalogError(format!("building a delete request: {e}")))?;
                requests.push(WriteRequest::builder().delete_request(delete).build());
            }
        }
        // (value, type, field) → whether this state now holds it.
        let touched: std::collections::BTreeMap<(String, String, String), bool> = indexed
            .symmetric_difference(&wanted)
            .map(|id| {
                (
                    (id.value.clone(), id.resource_type.clone(), id.field.clone()),
                    wanted.contains(id),
                )
            })
            .collect();
        for new in wanted.difference(&indexed) {
            for (pk, sk) in index_keys(repository, path, new) {
                let put = PutRequest::builder()
                    .item("pk", s(pk))
                    .item("sk", s(sk))
                    .item("value", s(&new.value))
                    .item("resource_type", s(&new.resource_type))
                    .item("field", s(&new.field))
                    .item("address", s(&new.address))
                    .item("repository", s(repository))
                    .item("path", s(path))
                    .build()
                    .map_err(|e| CatalogError(format!("building a put request: {e}")))?;
                requests.push(WriteRequest::builder().put_request(put).build());
            }
        }
        self.batch_write(requests).await?;
        // After the index is written (read back consistently, so of two states adding one
        // identifier at once, the later one sees both): mark or unmark it as a duplicate.
        if !check_duplicates {
            return Ok(());
        }
        for ((value, resource_type, field), held) in touched {
            let holders = self.holders(&value, &resource_type, &field).await?;
            let duplicate = distinct_states(&holders) > 1;
            if duplicate || !held {
                // A marker can exist only where the identifier had another holder: one this
                // state just took needs no delete when it is alone.
                self.mark_duplicate(&value, &resource_type, &field, duplicate)
                    .await?;
            }
        }
        Ok(())
    }

    /// Puts (`duplicate`) or deletes the `DUPS` marker of an identifier.
    async fn mark_duplicate(
        &self,
        value: &str,
        resource_type: &str,
        field: &str,
        duplicate: bool,
    ) -> Result<(), CatalogError> {
        let (pk, sk) = (s(DUPS), s(format!("{value}#{resource_type}#{field}")));
        if duplicate {
            self.client
                .put_item()
                .table_name(&self.table)
                .item("pk", pk)
                .item("sk", sk)
                .item("value", s(value))
                .item("resource_type", s(resource_type))
                .item("field", s(field))
                .send()
                .await
                .map_err(failed("PutItem"))?;
        } else {
            self.client
                .delete_item()
                .table_name(&self.table)
                .key("pk", pk)
                .key("sk", sk)
                .send()
                .await
                .map_err(failed("DeleteItem"))?;
        }
        Ok(())
    }

    /// The resource instances holding `value` as the `field` of a `resource_type`, sorted.
    async fn holders(
        &self,
        value: &str,
        resource_type: &str,
        field: &str,
    ) -> Result<Vec<ManagedBy>, CatalogError> {
        let mut holders: Vec<ManagedBy> = self
            .query_partition(format!("ID#{value}"))
            .await?
            .iter()
            .map(managed_by)
            .filter(|m| m.resource_type == resource_type && m.field == field)
            .collect();
        holders.sort();
        Ok(holders)
    }

    /// Sends write requests 25 at a time, resending what DynamoDB left unprocessed.
    async fn batch_write(&self, requests: Vec<WriteRequest>) -> Result<(), CatalogError> {
        for chunk in requests.chunks(25) {
            let mut pending = chunk.to_vec();
            for attempt in 0..8u32 {
                if pending.is_empty() {
                    break;
                }
                let answer = self
                    .client
                    .batch_write_item()
                    .request_items(&self.table, pending)
                    .send()
                    .await
                    .map_err(failed("BatchWriteItem"))?;
                pending = answer
                    .unprocessed_items()
                    .and_then(|u| u.get(&self.table))
                    .cloned()
                    .unwrap_or_default();
                if !pending.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                }
            }
            if !pending.is_empty() {
                return Err(CatalogError(format!(
                    "BatchWriteItem: {} index updates stayed unprocessed",
                    pending.len()
                )));
            }
        }
        Ok(())
    }
}

/// The partition of every state entry.
const STATES: &str = "STATES";
/// The partition of the identifiers held by more than one state.
const DUPS: &str = "DUPS";

/// The key of a state entry.
fn state_key(repository: &str, path: &str) -> (AttributeValue, AttributeValue) {
    (s(STATES), s(format!("{repository}#{path}")))
}

/// How many different states the holders are in.
fn distinct_states(holders: &[ManagedBy]) -> usize {
    let states: std::collections::BTreeSet<(&str, &str)> = holders
        .iter()
        .map(|m| (m.repository.as_str(), m.path.as_str()))
        .collect();
    states.len()
}

/// The two keys of an index entry: by state, and by value.
fn index_keys(repository: &str, path: &str, id: &ResourceIdentifier) -> [(String, String); 2] {
    [
        (
            format!("RES#{repository}#{path}"),
            format!("{}#{}", id.address, id.field),
        ),
        (
            format!("ID#{}", id.value),
            format!("{repository}#{path}#{}#{}", id.address, id.field),
        ),
    ]
}

fn identifier_of(item: &HashMap<String, AttributeValue>) -> ResourceIdentifier {
    ResourceIdentifier {
        value: get_s(item, "value").unwrap_or_default(),
        resource_type: get_s(item, "resource_type").unwrap_or_default(),
        field: get_s(item, "field").unwrap_or_default(),
        address: get_s(item, "address").unwrap_or_default(),
    }
}

fn managed_by(item: &HashMap<String, AttributeValue>) -> ManagedBy {
    ManagedBy {
        repository: get_s(item, "repository").unwrap_or_default(),
        path: get_s(item, "path").unwrap_or_default(),
        address: get_s(item, "address").unwrap_or_default(),
        resource_type: get_s(item, "resource_type").unwrap_or_default(),
        field: get_s(item, "field").unwrap_or_default(),
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

#[async_trait]
impl Catalog for DynamoCatalog {
    async fn record(&self, event: CatalogEvent) -> Result<(), CatalogError> {
        let at = rfc3339(event.at);
        // The audit first: it is append-only, so a failure of the state entry still leaves the
        // trail complete, and the next write repairs the entry.
        self.add_audit(&event, &at).await?;
        let took = self.update_state(&event, &at).await?;
        match &event.change {
            CatalogChange::Write(facts) if took => {
                self.sync_index(&event.repository, &event.path, &facts.identifiers, true)
                    .await
            }
            CatalogChange::Delete { .. } => {
                self.sync_index(&event.repository, &event.path, &[], true)
                    .await
            }
            _ => Ok(()),
        }
    }

    async fn rebuild_entry(
        &self,
        event: CatalogEvent,
        lock: Option<LockFacts>,
    ) -> Result<(), CatalogError> {
        let CatalogChange::Write(facts) = &event.change else {
            return Err(CatalogError("a rebuilt entry must be a write".into()));
        };
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(STATES))
            .item("sk", s(format!("{}#{}", event.repository, event.path)))
            .item("repository", s(&event.repository))
            .item("path", s(&event.path))
            .item("size", n(facts.size))
            .item("updated_by", s(&event.who))
            .item("updated_at", s(rfc3339(event.at)))
            .item("deleted", AttributeValue::Bool(false));
        for (name, value) in [
            ("lineage", facts.lineage.clone()),
            ("terraform_version", facts.terraform_version.clone()),
            ("commit", facts.commit.clone()),
        ] {
            if let Some(value) = value {
                put = put.item(name, s(value));
            }
        }
        if let Some(serial) = facts.serial {
            put = put.item("serial", n(serial));
        }
        if let Some(count) = facts.resource_count {
            put = put.item("resource_count", n(count));
        }
        if let Some(lock) = lock {
            put = put
                .item("lock_id", s(lock.id))
                .item("lock_who", s(lock.who))
                .item("lock_operation", s(lock.operation))
                .item("lock_created", s(lock.created));
        }
        put.send().await.map_err(failed("PutItem"))?;
        self.sync_index(&event.repository, &event.path, &facts.identifiers, false)
            .await
    }

    async fn forget_missing(
        &self,
        repository: &str,
        present: &std::collections::BTreeSet<String>,
    ) -> Result<usize, CatalogError> {
        let known = self.query_partition(STATES.into()).await?;
        let mut forgotten = 0;
        for item in known {
            let entry = state_entry(&item);
            if entry.repository != repository || entry.deleted || present.contains(&entry.path) {
                continue;
            }
            let (pk, sk) = state_key(repository, &entry.path);
            self.client
                .update_item()
                .table_name(&self.table)
                .key("pk", pk)
                .key("sk", sk)
                .update_expression(
                    "SET deleted = :yes REMOVE lock_id, lock_who, lock_operation, lock_created",
                )
                .expression_attribute_values(":yes", AttributeValue::Bool(true))
                .send()
                .await
                .map_err(failed("UpdateItem"))?;
            self.sync_index(repository, &entry.path, &[], false).await?;
            forgotten += 1;
        }
        Ok(forgotten)
    }

    async fn rebuild_duplicates(&self) -> Result<usize, CatalogError> {
        // A scan of every index entry, once: cheaper than asking per identifier when all of
        // them were just rewritten.
        let mut groups: std::collections::BTreeMap<(String, String, String), Vec<ManagedBy>> =
            Default::default();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("begins_with(pk, :id)")
                .expression_attribute_values(":id", s("ID#"))
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(failed("Scan"))?;
            for item in page.items() {
                let id = identifier_of(item);
                groups
                    .entry((id.value, id.resource_type, id.field))
                    .or_default()
                    .push(managed_by(item));
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => break,
            }
        }
        let duplicates: std::collections::BTreeSet<(String, String, String)> = groups
            .into_iter()
            .filter(|(_, holders)| distinct_states(holders) > 1)
            .map(|(key, _)| key)
            .collect();
        for marker in self.query_partition(DUPS.into()).await? {
            let key = (
                get_s(&marker, "value").unwrap_or_default(),
                get_s(&marker, "resource_type").unwrap_or_default(),
                get_s(&marker, "field").unwrap_or_default(),
            );
            if !duplicates.contains(&key) {
                self.mark_duplicate(&key.0, &key.1, &key.2, false).await?;
            }
        }
        for (value, resource_type, field) in &duplicates {
            self.mark_duplicate(value, resource_type, field, true)
                .await?;
        }
        Ok(duplicates.len())
    }

    async fn states(&self) -> Result<Vec<StateEntry>, CatalogError> {
        let mut entries: Vec<StateEntry> = self
            .query_partition(STATES.into())
            .await?
            .iter()
            .map(state_entry)
            .collect();
        entries.sort_by(|a, b| (&a.repository, &a.path).cmp(&(&b.repository, &b.path)));
        Ok(entries)
    }

    async fn audit(&self, repository: &str, path: &str) -> Result<Vec<AuditEntry>, CatalogError> {
        Ok(self
            .query_partition(format!("AUDIT#{repository}#{path}"))
            .await?
            .iter()
            .map(|item| AuditEntry {
                at: get_s(item, "at").unwrap_or_default(),
                action: get_s(item, "action").unwrap_or_default(),
                who: get_s(item, "who").unwrap_or_default(),
                serial: get_n(item, "serial"),
                lock_id: get_s(item, "lock_id"),
                commit: get_s(item, "commit"),
            })
            .collect())
    }

    async fn find(&self, value: &str) -> Result<Vec<ManagedBy>, CatalogError> {
        let mut found: Vec<ManagedBy> = self
            .query_partition(format!("ID#{value}"))
            .await?
            .iter()
            .map(managed_by)
            .collect();
        found.sort();
        Ok(found)
    }

    async fn duplicates(&self) -> Result<Vec<Duplicate>, CatalogError> {
        let mut found = Vec::new();
        for item in self.query_partition(DUPS.into()).await? {
            let (value, resource_type, field) = (
                get_s(&item, "value").unwrap_or_default(),
                get_s(&item, "resource_type").unwrap_or_default(),
                get_s(&item, "field").unwrap_or_default(),
            );
            // Read back rather than trusted: a marker a concurrent update left behind is
            // skipped here and repaired by the next update of that identifier.
            let managed_by = self.holders(&value, &resource_type, &field).await?;
            if distinct_states(&managed_by) > 1 {
                found.push(Duplicate {
                    value,
                    resource_type,
                    field,
                    managed_by,
                });
            }
        }
        found.sort_by(|a, b| {
            (&a.value, &a.resource_type, &a.field).cmp(&(&b.value, &b.resource_type, &b.field))
        });
        Ok(found)
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
