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
//! | a state's identifier | `RES#{repository}#{path}` | `{address_hmac}#{field}` | `value_hmac`, `value_enc`, `address_hmac`, `address_enc`, `resource_type`, `field`, `repository`, `path` |
//! | the same, by value | `ID#{value_hmac}` | `{repository}#{path}#{address_hmac}#{field}` | the same |
//! | an identifier held by more than one state | `DUPS` | `{value_hmac}#{resource_type}#{field}` | `value_hmac`, `value_enc`, `resource_type`, `field` |
//! | the resource index key | `CONFIG` | `index-key` | `kms_arn`, `wrapped`, `created_at` |
//! | the identifier set; links across states | `IDSET`, `USES#…`, `USEDBY#…`, `LINKS#…` | see [`links`] | |
//!
//! Every query reads only what it answers: `states` is one partition, `find` one partition,
//! `duplicates` the `DUPS` partition and one partition per duplicate; nothing scans the table.
//! State entries are updated with a condition so an older serial never overwrites a newer one;
//! the resource index of a state is brought in line with a write only when its entry took it.
//! The index holds identifying attributes only (`id`, `arn`, `self_link`, `name`), read from the
//! plaintext the server had in hand, never other attribute values; and it holds them as keyed
//! hashes (`*_hmac`) and encrypted (`*_enc`) under the table's index key ([`index_key`]), never in
//! clear. Without an index key (none in the table, and no KMS key to make one) nothing is indexed.
//!
//! It never decides an answer: git does. A catalog that fails is logged and counted, and the
//! request is answered as git decided.

mod codec;
pub mod index_key;
mod links;
mod reads;
mod writes;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TimeToLiveSpecification,
};
use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use codec::*;
use gitstate_core::catalog::catalog_key;
use gitstate_core::links::{Graph, Links, StateRef, Use};
use gitstate_core::{
    AuditEntry, Catalog, CatalogChange, CatalogError, CatalogEvent, CatalogPage, Duplicate,
    ListQuery, LockFacts, ManagedBy, ResourceIdentifier, StateEntry,
};
use index_key::{IndexKeys, Kind, INDEX_KEY_CONTEXT};

/// The DynamoDB catalog.
#[derive(Clone)]
pub struct DynamoCatalog {
    client: aws_sdk_dynamodb::Client,
    kms: aws_sdk_kms::Client,
    table: String,
    audit_ttl: Duration,
    /// The KMS key that makes the index key when the table has none.
    index_kms_arn: Option<String>,
    index: std::sync::Arc<tokio::sync::Mutex<IndexState>>,
    /// Shards of the identifier set read lately ([`links`]).
    idset: links::IdSetCache,
}

/// What this process knows of the index key.
enum IndexState {
    /// Not looked up yet (or the last attempt failed).
    Unknown,
    /// Unwrapped.
    On(std::sync::Arc<IndexKeys>),
    /// The table has none and there is no KMS key to make one (looked up at this time).
    Off(std::time::Instant),
}

/// How long "the table has no index key" is believed before it is asked again.
const INDEX_OFF_RECHECK: Duration = Duration::from_secs(60);

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

fn kms_failed<E: ProvideErrorMetadata + std::fmt::Debug>(
    action: &str,
) -> impl Fn(aws_sdk_kms::error::SdkError<E, aws_sdk_kms::config::http::HttpResponse>) -> CatalogError + '_
{
    move |e| {
        let detail = match &e {
            aws_sdk_kms::error::SdkError::ServiceError(s) => format!(
                "{} {}",
                s.err().code().unwrap_or("error"),
                s.err().message().unwrap_or("")
            ),
            aws_sdk_kms::error::SdkError::TimeoutError(_) => "timed out".into(),
            aws_sdk_kms::error::SdkError::DispatchFailure(_) => "KMS could not be reached".into(),
            _ => "the request failed".into(),
        };
        CatalogError(format!("{action}: {}", detail.trim_end()))
    }
}

impl DynamoCatalog {
    /// A catalog on `table`, with the AWS configuration of the environment (credential chain,
    /// region, `AWS_ENDPOINT_URL`), explicit timeouts, and audit events kept `audit_ttl`.
    /// `index_kms_arn` makes the resource index key when the table has none yet (reading an
    /// existing one needs only `kms:Decrypt` on the key that wrapped it); without either, the
    /// resource index stays empty.
    pub async fn connect(
        table: &str,
        audit_ttl: Duration,
        index_kms_arn: Option<String>,
    ) -> DynamoCatalog {
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
            kms: aws_sdk_kms::Client::new(&sdk),
            table: table.to_owned(),
            audit_ttl,
            index_kms_arn: index_kms_arn.filter(|a| !a.is_empty()),
            index: std::sync::Arc::new(tokio::sync::Mutex::new(IndexState::Unknown)),
            idset: Default::default(),
        }
    }

    /// The resource index keys; `None` when the index is off (no key in the table, and no KMS
    /// key to make one).
    async fn index_keys(&self) -> Result<Option<std::sync::Arc<IndexKeys>>, CatalogError> {
        let mut state = self.index.lock().await;
        match &*state {
            IndexState::On(keys) => return Ok(Some(keys.clone())),
            IndexState::Off(at) if at.elapsed() < INDEX_OFF_RECHECK => return Ok(None),
            _ => {}
        }
        *state = IndexState::Unknown;
        let keys = self.load_index_keys().await?;
        *state = match &keys {
            Some(keys) => IndexState::On(keys.clone()),
            None => IndexState::Off(std::time::Instant::now()),
        };
        Ok(keys)
    }

    /// The index keys, or a sentence saying why there are none.
    async fn required_index_keys(&self) -> Result<std::sync::Arc<IndexKeys>, CatalogError> {
        self.index_keys().await?.ok_or_else(|| {
            CatalogError(format!(
                "the resource index is off: the table {} has no index key, and this process has no KMS key to make one. Give the server a KMS key (catalog.kms_arn, --catalog-kms-arn or GITSTATE_CATALOG_KMS_ARN; else the first of encryption.kms_arns) and write or rebuild once",
                self.table
            ))
        })
    }

    async fn load_index_keys(&self) -> Result<Option<std::sync::Arc<IndexKeys>>, CatalogError> {
        for _ in 0..2 {
            if let Some(item) = self.index_key_item().await? {
                return self.unwrap_index_key(&item).await.map(Some);
            }
            let Some(arn) = &self.index_kms_arn else {
                return Ok(None);
            };
            if let Some(keys) = self.create_index_key(arn).await? {
                return Ok(Some(keys));
            }
            // Another process made it first: read theirs.
        }
        Err(CatalogError(
            "the resource index key was made by another process but cannot be read back".into(),
        ))
    }

    async fn index_key_item(
        &self,
    ) -> Result<Option<HashMap<String, AttributeValue>>, CatalogError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(CONFIG))
            .key("sk", s(INDEX_KEY))
            .consistent_read(true)
            .send()
            .await
            .map_err(failed("GetItem (index key)"))?;
        Ok(out.item().cloned())
    }

    async fn unwrap_index_key(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<std::sync::Arc<IndexKeys>, CatalogError> {
        use base64::Engine as _;
        let arn = get_s(item, "kms_arn").unwrap_or_default();
        let wrapped = get_s(item, "wrapped")
            .and_then(|w| base64::engine::general_purpose::STANDARD.decode(w).ok())
            .ok_or_else(|| {
                CatalogError("the table's index key item is malformed (no wrapped key)".into())
            })?;
        let out = self
            .kms
            .decrypt()
            .key_id(&arn)
            .ciphertext_blob(aws_sdk_kms::primitives::Blob::new(wrapped))
            .encryption_context(INDEX_KEY_CONTEXT.0, INDEX_KEY_CONTEXT.1)
            .send()
            .await
            .map_err(kms_failed(&format!(
                "KMS Decrypt of the index key with {arn}"
            )))?;
        let secret = zeroize::Zeroizing::new(
            out.plaintext()
                .map(|p| p.as_ref().to_vec())
                .unwrap_or_default(),
        );
        Ok(std::sync::Arc::new(IndexKeys::from_secret(&secret)?))
    }

    /// Makes the table's index key with KMS `GenerateDataKey` under `arn`; `None` when another
    /// process stored one first.
    async fn create_index_key(
        &self,
        arn: &str,
    ) -> Result<Option<std::sync::Arc<IndexKeys>>, CatalogError> {
        use base64::Engine as _;
        let out = self
            .kms
            .generate_data_key()
            .key_id(arn)
            .key_spec(aws_sdk_kms::types::DataKeySpec::Aes256)
            .encryption_context(INDEX_KEY_CONTEXT.0, INDEX_KEY_CONTEXT.1)
            .send()
            .await
            .map_err(kms_failed(&format!(
                "KMS GenerateDataKey for the index key with {arn}"
            )))?;
        let secret = zeroize::Zeroizing::new(
            out.plaintext()
                .map(|p| p.as_ref().to_vec())
                .unwrap_or_default(),
        );
        let keys = IndexKeys::from_secret(&secret)?;
        let wrapped = out
            .ciphertext_blob()
            .map(|b| base64::engine::general_purpose::STANDARD.encode(b.as_ref()))
            .ok_or_else(|| CatalogError("KMS GenerateDataKey returned no ciphertext".into()))?;
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", s(CONFIG))
            .item("sk", s(INDEX_KEY))
            .item("kms_arn", s(arn))
            .item("wrapped", s(wrapped))
            .item("created_at", s(rfc3339(SystemTime::now())))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match put {
            Ok(_) => {
                tracing::info!(table = %self.table, kms_arn = %arn, "made the resource index key");
                Ok(Some(std::sync::Arc::new(keys)))
            }
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(None),
            Err(e) => Err(failed("PutItem (index key)")(e)),
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

#[async_trait]
impl Catalog for DynamoCatalog {
    async fn record(&self, event: CatalogEvent) -> Result<(), CatalogError> {
        self.record_event(event).await
    }

    async fn rebuild_entry(
        &self,
        event: CatalogEvent,
        lock: Option<LockFacts>,
    ) -> Result<(), CatalogError> {
        self.rebuild_state_entry(event, lock).await
    }

    async fn forget_missing(
        &self,
        repository: &str,
        present: &std::collections::BTreeSet<String>,
    ) -> Result<usize, CatalogError> {
        self.forget_missing_states(repository, present).await
    }

    async fn rebuild_duplicates(&self) -> Result<usize, CatalogError> {
        self.rebuild_duplicate_markers().await
    }

    async fn states(&self, query: &ListQuery) -> Result<CatalogPage, CatalogError> {
        self.state_page(query).await
    }

    async fn audit(&self, repository: &str, path: &str) -> Result<Vec<AuditEntry>, CatalogError> {
        self.audit_trail(repository, path).await
    }

    async fn find(&self, value: &str) -> Result<Vec<ManagedBy>, CatalogError> {
        self.find_holders(value).await
    }

    async fn duplicates(&self) -> Result<Vec<Duplicate>, CatalogError> {
        self.duplicate_identifiers().await
    }

    async fn sync_links(
        &self,
        consumer: &StateRef,
        uses: &[Use],
        reads: &[StateRef],
    ) -> Result<usize, CatalogError> {
        self.sync_consumer_links(consumer, uses, reads, false).await
    }

    async fn links(&self, state: &StateRef) -> Result<Links, CatalogError> {
        self.state_links(state).await
    }

    async fn graph(&self, repository: &str) -> Result<Graph, CatalogError> {
        self.repository_graph(repository).await
    }
}
