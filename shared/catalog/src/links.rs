//! Links across states (issue 36) on DynamoDB: which strings of a state are identifiers another
//! state holds, found by their keyed hash, and the links kept three ways.
//!
//! | item | `pk` | `sk` | attributes |
//! |---|---|---|---|
//! | the identifier set, one shard per first hex digit of the value hash | `IDSET` | `0`…`f` | `h`: a string set of the first 16 hex digits of every value hash indexed |
//! | a link, by consumer | `USES#{repository}#{path}` | `{link_hmac}` | `value_hmac`, `kind`, `consumer_repository`, `consumer_path`, `provider_repository`, `provider_path`, `sides_enc`, `checked_at` (unix seconds of the look-up) |
//! | the same, by provider | `USEDBY#{repository}#{path}` | `{consumer repository}#{consumer path}#{link_hmac}` | the same |
//! | the same, by the consumer's repository (for the order) | `LINKS#{repository}` | `{consumer path}#{link_hmac}` | the same |
//!
//! A write looks up only the strings whose hash prefix the identifier set holds (one
//! `BatchGetItem` of the shards it needs, kept 10 s per process), then one query per candidate;
//! a string it linked less than 15 minutes ago keeps its providers without a query.
//! The set only grows between rebuilds (a removed identifier costs one query that finds
//! nothing). The addresses and attributes of both sides are sealed (`sides_enc`) under the
//! index key, as the index's addresses are.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Instant;

use aws_sdk_dynamodb::types::KeysAndAttributes;
use gitstate_core::links::{self, Graph, Link, LinkKind, Links, StateRef, Use};

use super::*;

/// The partition of the identifier set.
pub(crate) const IDSET: &str = "IDSET";
/// How many hex digits of a value hash the identifier set keeps.
const PREFIX: usize = 16;
/// How long a process trusts a shard of the identifier set it read.
const IDSET_KEPT: Duration = Duration::from_secs(10);
/// Index queries one link sync runs at once.
const LOOKUPS_AT_ONCE: usize = 16;
/// How long the providers of a value already linked are trusted before a write looks them up
/// again (a new holder of an identifier already linked, or a provider's new address for it, is
/// seen within this time, or at the next rebuild).
const LINK_RECHECK: Duration = Duration::from_secs(15 * 60);

/// A link a sync keeps, with its value's hash and when its providers were looked up.
struct Wanted {
    link: Link,
    value_hash: String,
    checked_at: u64,
}

/// Shards of the identifier set this process read, with when.
pub(crate) type IdSetCache =
    std::sync::Arc<std::sync::Mutex<HashMap<String, (Instant, HashSet<String>)>>>;

/// The shard (sort key) of a value hash.
fn shard(hash: &str) -> String {
    hash.chars().next().unwrap_or('0').to_string()
}

fn prefix(hash: &str) -> &str {
    &hash[..hash.len().min(PREFIX)]
}

/// The two sides of a link, as sealed in `sides_enc`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Sides {
    consumer: (String, String),
    provider: (String, String),
}

impl DynamoCatalog {
    /// Adds value hashes to the identifier set (and to this process's copy).
    pub(super) async fn add_to_idset(&self, hashes: &[String]) -> Result<(), CatalogError> {
        let mut by_shard: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for hash in hashes {
            by_shard
                .entry(shard(hash))
                .or_default()
                .insert(prefix(hash).to_owned());
        }
        for (shard, prefixes) in by_shard {
            self.client
                .update_item()
                .table_name(&self.table)
                .key("pk", s(IDSET))
                .key("sk", s(&shard))
                .update_expression("ADD h :new")
                .expression_attribute_values(
                    ":new",
                    AttributeValue::Ss(prefixes.iter().cloned().collect()),
                )
                .send()
                .await
                .map_err(failed("UpdateItem"))?;
            if let Ok(mut cache) = self.idset.lock() {
                if let Some((_, known)) = cache.get_mut(&shard) {
                    known.extend(prefixes);
                }
            }
        }
        Ok(())
    }

    /// Rewrites the identifier set from every value hash of the index (a rebuild's last step).
    pub(super) async fn rewrite_idset(
        &self,
        hashes: &BTreeSet<String>,
    ) -> Result<(), CatalogError> {
        let mut by_shard: BTreeMap<String, Vec<String>> = "0123456789abcdef"
            .chars()
            .map(|c| (c.to_string(), Vec::new()))
            .collect();
        for hash in hashes {
            by_shard
                .entry(shard(hash))
                .or_default()
                .push(prefix(hash).to_owned());
        }
        for (shard, mut prefixes) in by_shard {
            prefixes.dedup();
            if prefixes.is_empty() {
                self.client
                    .delete_item()
                    .table_name(&self.table)
                    .key("pk", s(IDSET))
                    .key("sk", s(&shard))
                    .send()
                    .await
                    .map_err(failed("DeleteItem"))?;
            } else {
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .item("pk", s(IDSET))
                    .item("sk", s(&shard))
                    .item("h", AttributeValue::Ss(prefixes))
                    .send()
                    .await
                    .map_err(failed("PutItem"))?;
            }
        }
        if let Ok(mut cache) = self.idset.lock() {
            cache.clear();
        }
        Ok(())
    }

    /// Which of `hashes` the identifier set may hold (by prefix): one `BatchGetItem` of the
    /// shards not read in the last [`IDSET_KEPT`].
    async fn maybe_identifiers<'h>(
        &self,
        hashes: &'h BTreeSet<String>,
    ) -> Result<Vec<&'h String>, CatalogError> {
        let needed: BTreeSet<String> = hashes.iter().map(|h| shard(h)).collect();
        let stale: Vec<String> = {
            let cache = self
                .idset
                .lock()
                .map_err(|_| CatalogError("the identifier set cache is poisoned".into()))?;
            needed
                .iter()
                .filter(|s| {
                    cache
                        .get(*s)
                        .is_none_or(|(at, _)| at.elapsed() > IDSET_KEPT)
                })
                .cloned()
                .collect()
        };
        if !stale.is_empty() {
            let mut read: HashMap<String, HashSet<String>> =
                stale.iter().map(|s| (s.clone(), HashSet::new())).collect();
            let mut keys = KeysAndAttributes::builder().consistent_read(false);
            for shard in &stale {
                keys = keys.keys(HashMap::from([
                    ("pk".to_owned(), s(IDSET)),
                    ("sk".to_owned(), s(shard)),
                ]));
            }
            let mut request = Some(
                keys.build()
                    .map_err(|e| CatalogError(format!("building a batch read: {e}")))?,
            );
            for attempt in 0..8u32 {
                let Some(keys) = request.take() else { break };
                let answer = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, keys)
                    .send()
                    .await
                    .map_err(failed("BatchGetItem"))?;
                for item in answer
                    .responses()
                    .and_then(|r| r.get(&self.table))
                    .into_iter()
                    .flatten()
                {
                    let Some(shard) = get_s(item, "sk") else {
                        continue;
                    };
                    if let Some(AttributeValue::Ss(prefixes)) = item.get("h") {
                        read.entry(shard)
                            .or_default()
                            .extend(prefixes.iter().cloned());
                    }
                }
                request = answer
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.table))
                    .filter(|k| !k.keys().is_empty())
                    .cloned();
                if request.is_some() {
                    tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                }
            }
            if request.is_some() {
                return Err(CatalogError(
                    "BatchGetItem: the identifier set stayed unread".into(),
                ));
            }
            let mut cache = self
                .idset
                .lock()
                .map_err(|_| CatalogError("the identifier set cache is poisoned".into()))?;
            for (shard, prefixes) in read {
                cache.insert(shard, (Instant::now(), prefixes));
            }
        }
        let cache = self
            .idset
            .lock()
            .map_err(|_| CatalogError("the identifier set cache is poisoned".into()))?;
        Ok(hashes
            .iter()
            .filter(|h| {
                cache
                    .get(&shard(h))
                    .is_some_and(|(_, known)| known.contains(prefix(h)))
            })
            .collect())
    }

    /// Who holds each of `values` (by hash), [`LOOKUPS_AT_ONCE`] queries at a time.
    async fn holders_of(
        &self,
        keys: &IndexKeys,
        candidates: Vec<(String, String)>,
    ) -> Result<HashMap<String, Vec<ManagedBy>>, CatalogError> {
        let mut found = HashMap::new();
        for chunk in candidates.chunks(LOOKUPS_AT_ONCE) {
            let mut lookups = tokio::task::JoinSet::new();
            for (value, hash) in chunk.iter().cloned() {
                let catalog = self.clone();
                lookups.spawn(async move {
                    let items = catalog.query_partition(format!("ID#{hash}")).await;
                    (value, items)
                });
            }
            while let Some(done) = lookups.join_next().await {
                let (value, items) =
                    done.map_err(|e| CatalogError(format!("an index lookup failed: {e}")))?;
                let holders = items?
                    .iter()
                    .filter_map(Holder::of)
                    .map(|h| h.managed_by(keys))
                    .collect::<Result<Vec<ManagedBy>, CatalogError>>()?;
                if !holders.is_empty() {
                    found.insert(value, holders);
                }
            }
        }
        Ok(found)
    }

    /// See [`Catalog::sync_links`]. With `reuse` (a write), a string already linked and looked
    /// up less than [`LINK_RECHECK`] ago keeps its providers without a query; without (a
    /// rebuild), every candidate is looked up.
    pub(super) async fn sync_consumer_links(
        &self,
        consumer: &StateRef,
        uses: &[Use],
        reads: &[StateRef],
        reuse: bool,
    ) -> Result<usize, CatalogError> {
        let keys = self.index_keys().await?;
        let uses_pk = format!("USES#{}#{}", consumer.repository, consumer.path);
        let existing = self.query_partition(uses_pk).await?;
        let mut wanted: BTreeMap<String, Wanted> = BTreeMap::new();
        if let Some(keys) = &keys {
            let stored = if reuse { existing.as_slice() } else { &[] };
            let found = self.find_links(keys, consumer, uses, reads, stored).await?;
            for (link, value_hash, checked_at) in found {
                let identity = format!(
                    "{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{:?}",
                    link.consumer.repository,
                    link.consumer.path,
                    link.consumer_address,
                    link.consumer_attribute,
                    link.provider.repository,
                    link.provider.path,
                    link.provider_address,
                    link.provider_field,
                    link.kind
                );
                wanted.insert(
                    keys.hash(Kind::Link, &identity)?,
                    Wanted {
                        link,
                        value_hash,
                        checked_at,
                    },
                );
            }
        }
        let mut requests = Vec::new();
        let mut kept = BTreeSet::new();
        for item in &existing {
            let Some(link_hash) = get_s(item, "sk") else {
                continue;
            };
            let stored_at = get_n(item, "checked_at").unwrap_or(0);
            match wanted.get(&link_hash) {
                Some(w) if w.checked_at == stored_at => {
                    kept.insert(link_hash);
                }
                // Looked up again: put anew below, with its new time.
                Some(_) => {}
                None => {
                    let provider = StateRef {
                        repository: get_s(item, "provider_repository").unwrap_or_default(),
                        path: get_s(item, "provider_path").unwrap_or_default(),
                    };
                    for (pk, sk) in link_keys(consumer, &provider, &link_hash) {
                        requests.push(delete_request(pk, sk)?);
                    }
                }
            }
        }
        if let Some(keys) = &keys {
            for (link_hash, w) in wanted.iter().filter(|(h, _)| !kept.contains(*h)) {
                requests.extend(put_link(keys, consumer, link_hash, w)?);
            }
        }
        self.batch_write(requests).await?;
        Ok(wanted.len())
    }

    /// The links of `consumer` now, each with its value's hash and when its providers were
    /// looked up: stored links of a value looked up less than [`LINK_RECHECK`] ago are reused,
    /// every other candidate (a value the identifier set may hold) is looked up.
    async fn find_links(
        &self,
        keys: &IndexKeys,
        consumer: &StateRef,
        uses: &[Use],
        reads: &[StateRef],
        existing: &[HashMap<String, AttributeValue>],
    ) -> Result<Vec<(Link, String, u64)>, CatalogError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        // What the stored links say of each value: its providers, and the oldest look-up.
        let mut stored: HashMap<String, (Vec<ManagedBy>, u64)> = HashMap::new();
        for item in existing {
            let (link, value_hash) = stored_link(keys, item)?;
            let checked_at = get_n(item, "checked_at").unwrap_or(0);
            let entry = stored.entry(value_hash).or_insert((Vec::new(), u64::MAX));
            entry.0.push(ManagedBy {
                repository: link.provider.repository,
                path: link.provider.path,
                address: link.provider_address,
                resource_type: String::new(),
                field: link.provider_field,
            });
            entry.1 = entry.1.min(checked_at);
        }
        let mut by_hash: HashMap<String, &str> = HashMap::new();
        for one in uses {
            by_hash.insert(keys.hash(Kind::Value, &one.value)?, one.value.as_str());
        }
        let mut holders: HashMap<String, Vec<ManagedBy>> = HashMap::new();
        let mut checked: HashMap<String, (String, u64)> = HashMap::new();
        let mut lookups = BTreeSet::new();
        for (hash, value) in &by_hash {
            match stored.get(hash) {
                Some((providers, at)) if now.saturating_sub(*at) < LINK_RECHECK.as_secs() => {
                    holders.insert(value.to_string(), providers.clone());
                    checked.insert(value.to_string(), (hash.clone(), *at));
                }
                _ => {
                    lookups.insert(hash.clone());
                }
            }
        }
        let candidates: Vec<(String, String)> = self
            .maybe_identifiers(&lookups)
            .await?
            .into_iter()
            .filter_map(|h| Some((by_hash.get(h)?.to_string(), h.clone())))
            .collect();
        for (value, hash) in &candidates {
            checked.insert(value.clone(), (hash.clone(), now));
        }
        holders.extend(self.holders_of(keys, candidates).await?);
        Ok(links::resolve(consumer, uses, reads, &holders)
            .into_iter()
            .map(|link| {
                let (hash, at) = checked.get(&link.value).cloned().unwrap_or_default();
                (link, hash, at)
            })
            .collect())
    }

    /// See [`Catalog::links`].
    pub(super) async fn state_links(&self, state: &StateRef) -> Result<Links, CatalogError> {
        let keys = self.required_index_keys().await?;
        let mut found = Links::default();
        // Uses: dangling where the provider no longer holds the value at that address.
        let mut holders: HashMap<String, Vec<Holder>> = HashMap::new();
        for item in self
            .query_partition(format!("USES#{}#{}", state.repository, state.path))
            .await?
        {
            let (link, value_hash) = stored_link(&keys, &item)?;
            if !holders.contains_key(&value_hash) {
                let held = self
                    .query_partition(format!("ID#{value_hash}"))
                    .await?
                    .iter()
                    .filter_map(Holder::of)
                    .collect();
                holders.insert(value_hash.clone(), held);
            }
            let address_hash = keys.hash(Kind::Address, &link.provider_address)?;
            let held = holders.get(&value_hash).into_iter().flatten().any(|h| {
                h.repository == link.provider.repository
                    && h.path == link.provider.path
                    && h.field == link.provider_field
                    && h.address_hmac == address_hash
            });
            found.uses.push(link.as_use(!held));
        }
        // Used by: dangling where this state no longer holds the value at that address.
        let mut own: Option<HashSet<(String, String, String)>> = None;
        for item in self
            .query_partition(format!("USEDBY#{}#{}", state.repository, state.path))
            .await?
        {
            let (link, value_hash) = stored_link(&keys, &item)?;
            if own.is_none() {
                let items = self
                    .query_partition(format!("RES#{}#{}", state.repository, state.path))
                    .await?;
                own = Some(
                    items
                        .iter()
                        .filter_map(Indexed::from_item)
                        .map(|i| (i.value_hmac, i.address_hmac, i.field))
                        .collect(),
                );
            }
            let address_hash = keys.hash(Kind::Address, &link.provider_address)?;
            let held = own.as_ref().is_some_and(|own| {
                own.contains(&(value_hash, address_hash, link.provider_field.clone()))
            });
            found.used_by.push(link.as_used_by(!held));
        }
        found.uses.sort();
        found.used_by.sort();
        Ok(found)
    }

    /// See [`Catalog::graph`].
    pub(super) async fn repository_graph(&self, repository: &str) -> Result<Graph, CatalogError> {
        let mut graph = Graph {
            states: self
                .query_partition(STATES.into())
                .await?
                .iter()
                .map(state_entry)
                .filter(|e| e.repository == repository && !e.deleted)
                .map(|e| e.path)
                .collect(),
            ..Graph::default()
        };
        for item in self.query_partition(format!("LINKS#{repository}")).await? {
            if get_s(&item, "provider_repository").as_deref() != Some(repository) {
                continue;
            }
            let (Some(consumer), Some(provider)) =
                (get_s(&item, "consumer_path"), get_s(&item, "provider_path"))
            else {
                continue;
            };
            graph.add(&consumer, &provider, kind_of(&item));
        }
        Ok(graph)
    }
}

/// The three puts of one link (its items by consumer, provider and repository).
fn put_link(
    keys: &IndexKeys,
    consumer: &StateRef,
    link_hash: &str,
    wanted: &Wanted,
) -> Result<Vec<WriteRequest>, CatalogError> {
    let link = &wanted.link;
    let sides = serde_json::to_string(&Sides {
        consumer: (
            link.consumer_address.clone(),
            link.consumer_attribute.clone(),
        ),
        provider: (link.provider_address.clone(), link.provider_field.clone()),
    })
    .map_err(|e| CatalogError(format!("encoding a link: {e}")))?;
    let sides_enc = keys.seal(Kind::Link, link_hash, &sides)?;
    let mut requests = Vec::new();
    for (pk, sk) in link_keys(consumer, &link.provider, link_hash) {
        let put = PutRequest::builder()
            .item("pk", s(pk))
            .item("sk", s(sk))
            .item("link_hmac", s(link_hash))
            .item("value_hmac", s(&wanted.value_hash))
            .item("kind", s(link.kind.as_str()))
            .item("consumer_repository", s(&consumer.repository))
            .item("consumer_path", s(&consumer.path))
            .item("provider_repository", s(&link.provider.repository))
            .item("provider_path", s(&link.provider.path))
            .item("sides_enc", s(&sides_enc))
            .item("checked_at", n(wanted.checked_at))
            .build()
            .map_err(|e| CatalogError(format!("building a put request: {e}")))?;
        requests.push(WriteRequest::builder().put_request(put).build());
    }
    Ok(requests)
}

/// The three keys of one link.
fn link_keys(consumer: &StateRef, provider: &StateRef, link_hash: &str) -> [(String, String); 3] {
    [
        (
            format!("USES#{}#{}", consumer.repository, consumer.path),
            link_hash.to_owned(),
        ),
        (
            format!("USEDBY#{}#{}", provider.repository, provider.path),
            format!("{}#{}#{link_hash}", consumer.repository, consumer.path),
        ),
        (
            format!("LINKS#{}", consumer.repository),
            format!("{}#{link_hash}", consumer.path),
        ),
    ]
}

/// A stored link's kind (anything but `declared` reads as literal, the warning).
fn kind_of(item: &HashMap<String, AttributeValue>) -> LinkKind {
    match get_s(item, "kind").as_deref() {
        Some("declared") => LinkKind::Declared,
        _ => LinkKind::Literal,
    }
}

/// A link as stored (its value is only known by hash, returned beside it).
fn stored_link(
    keys: &IndexKeys,
    item: &HashMap<String, AttributeValue>,
) -> Result<(Link, String), CatalogError> {
    let link_hash = get_s(item, "link_hmac").unwrap_or_default();
    let sides: Sides = serde_json::from_str(&keys.open(
        Kind::Link,
        &link_hash,
        &get_s(item, "sides_enc").unwrap_or_default(),
    )?)
    .map_err(|e| CatalogError(format!("a link ({link_hash}) does not read: {e}")))?;
    let kind = kind_of(item);
    let link = Link {
        consumer: StateRef {
            repository: get_s(item, "consumer_repository").unwrap_or_default(),
            path: get_s(item, "consumer_path").unwrap_or_default(),
        },
        consumer_address: sides.consumer.0,
        consumer_attribute: sides.consumer.1,
        provider: StateRef {
            repository: get_s(item, "provider_repository").unwrap_or_default(),
            path: get_s(item, "provider_path").unwrap_or_default(),
        },
        provider_address: sides.provider.0,
        provider_field: sides.provider.1,
        kind,
        value: String::new(),
    };
    Ok((link, get_s(item, "value_hmac").unwrap_or_default()))
}
