//! The fake [`Catalog`]: states, locks, the audit trail and the resource index, in memory.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::catalog::{
    AuditEntry, Catalog, CatalogChange, CatalogError, CatalogEvent, CatalogPage, Duplicate,
    LockEntry, LockFacts, ManagedBy, ResourceIdentifier, StateEntry,
};
use crate::links::{self, Graph, Link, Links, StateRef, Use};
use crate::listing::ListQuery;

/// A [`Catalog`] in memory with the port's rules: an older serial never overwrites a newer one,
/// a delete drops the state's identifiers from the index. It can be made to fail, as an
/// unreachable table would.
#[derive(Debug, Default)]
pub struct MemoryCatalog {
    inner: Mutex<CatalogData>,
    outage: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct CatalogData {
    /// Every recorded event, in the order `record` was called.
    events: Vec<CatalogEvent>,
    entries: BTreeMap<(String, String), StateEntry>,
    index: BTreeMap<(String, String), Vec<ResourceIdentifier>>,
    /// Per consumer state, its links.
    links: BTreeMap<StateRef, Vec<Link>>,
}

impl MemoryCatalog {
    /// An empty catalog.
    pub fn new() -> Arc<MemoryCatalog> {
        Arc::new(MemoryCatalog::default())
    }

    /// Makes every call fail (`true`), or work again.
    pub fn set_outage(&self, outage: bool) {
        self.outage.store(outage, Ordering::SeqCst);
    }

    /// Every event recorded, in the order it arrived.
    pub fn events(&self) -> Vec<CatalogEvent> {
        self.data().events.clone()
    }

    fn data(&self) -> MutexGuard<'_, CatalogData> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn available(&self) -> Result<MutexGuard<'_, CatalogData>, CatalogError> {
        if self.outage.load(Ordering::SeqCst) {
            return Err(CatalogError("the fake catalog table is unreachable".into()));
        }
        Ok(self.data())
    }
}

fn lock_entry(facts: &LockFacts) -> LockEntry {
    LockEntry {
        id: facts.id.clone(),
        who: facts.who.clone(),
        operation: facts.operation.clone(),
        created: facts.created.clone(),
    }
}

impl CatalogData {
    /// Applies `event`; `false` when it was a write older than the entry (nothing changed).
    fn apply(&mut self, event: &CatalogEvent) -> bool {
        let key = (event.repository.clone(), event.path.clone());
        let entry = self
            .entries
            .entry(key.clone())
            .or_insert_with(|| StateEntry {
                repository: event.repository.clone(),
                path: event.path.clone(),
                ..StateEntry::default()
            });
        match &event.change {
            CatalogChange::Write(facts) => {
                if entry.serial.is_some() && facts.serial < entry.serial && !entry.deleted {
                    return false;
                }
                entry.serial = facts.serial;
                entry.lineage = facts.lineage.clone();
                entry.size = Some(facts.size);
                entry.terraform_version = facts.terraform_version.clone();
                entry.resource_count = facts.resource_count;
                if facts.commit.is_some() {
                    entry.commit = facts.commit.clone();
                }
                entry.updated_by = Some(event.who.clone());
                entry.deleted = false;
                self.index.insert(key, facts.identifiers.clone());
            }
            CatalogChange::Delete { commit } => {
                entry.deleted = true;
                entry.commit = commit.clone();
                entry.updated_by = Some(event.who.clone());
                self.index.remove(&key);
            }
            CatalogChange::Lock(facts) => entry.lock = Some(lock_entry(facts)),
            CatalogChange::Unlock { .. } => entry.lock = None,
        }
        true
    }

    /// The links of `consumer` from its `uses` and `reads`, against the index as it is.
    fn link(&mut self, consumer: &StateRef, uses: &[Use], reads: &[StateRef]) -> usize {
        let mut holders: std::collections::HashMap<String, Vec<ManagedBy>> = Default::default();
        for (id, by) in self.managed_by() {
            holders.entry(id.value).or_default().push(by);
        }
        let found = links::resolve(consumer, uses, reads, &holders);
        let count = found.len();
        self.links.insert(consumer.clone(), found);
        count
    }

    /// Whether `link`'s provider still manages its identifier.
    fn holds(&self, link: &Link) -> bool {
        let key = (link.provider.repository.clone(), link.provider.path.clone());
        self.index.get(&key).is_some_and(|ids| {
            ids.iter().any(|id| {
                id.value == link.value
                    && id.address == link.provider_address
                    && id.field == link.provider_field
            })
        })
    }

    fn managed_by(&self) -> Vec<(ResourceIdentifier, ManagedBy)> {
        let mut all = Vec::new();
        for ((repository, path), identifiers) in &self.index {
            for id in identifiers {
                all.push((
                    id.clone(),
                    ManagedBy {
                        repository: repository.clone(),
                        path: path.clone(),
                        address: id.address.clone(),
                        resource_type: id.resource_type.clone(),
                        field: id.field.clone(),
                    },
                ));
            }
        }
        all
    }
}

#[async_trait]
impl Catalog for MemoryCatalog {
    async fn record(&self, event: CatalogEvent) -> Result<(), CatalogError> {
        let mut data = self.available()?;
        let took = data.apply(&event);
        let consumer = StateRef {
            repository: event.repository.clone(),
            path: event.path.clone(),
        };
        match &event.change {
            CatalogChange::Write(facts) if took => {
                data.link(&consumer, &facts.uses, &facts.reads);
            }
            CatalogChange::Delete { .. } => {
                data.links.remove(&consumer);
            }
            _ => {}
        }
        data.events.push(event);
        Ok(())
    }

    async fn rebuild_entry(
        &self,
        event: CatalogEvent,
        lock: Option<LockFacts>,
    ) -> Result<(), CatalogError> {
        let mut data = self.available()?;
        let key = (event.repository.clone(), event.path.clone());
        data.entries.remove(&key);
        data.apply(&event);
        if let Some(entry) = data.entries.get_mut(&key) {
            entry.lock = lock.as_ref().map(lock_entry);
        }
        Ok(())
    }

    async fn forget_missing(
        &self,
        repository: &str,
        present: &std::collections::BTreeSet<String>,
    ) -> Result<usize, CatalogError> {
        let mut data = self.available()?;
        let gone: Vec<_> = data
            .entries
            .iter()
            .filter(|((repo, path), entry)| {
                repo == repository && !entry.deleted && !present.contains(path)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in &gone {
            data.index.remove(key);
            if let Some(entry) = data.entries.get_mut(key) {
                entry.deleted = true;
            }
        }
        Ok(gone.len())
    }

    async fn rebuild_duplicates(&self) -> Result<usize, CatalogError> {
        drop(self.available()?);
        Ok(self.duplicates().await?.len())
    }

    async fn states(&self, query: &ListQuery) -> Result<CatalogPage, CatalogError> {
        let data = self.available()?;
        Ok(CatalogPage::of_sorted(
            data.entries.values().cloned(),
            query,
        ))
    }

    async fn audit(&self, repository: &str, path: &str) -> Result<Vec<AuditEntry>, CatalogError> {
        let data = self.available()?;
        Ok(data
            .events
            .iter()
            .filter(|e| e.repository == repository && e.path == path)
            .map(|e| {
                let (action, serial, lock_id, commit) = match &e.change {
                    CatalogChange::Write(f) => ("write", f.serial, None, f.commit.clone()),
                    CatalogChange::Delete { commit } => ("delete", None, None, commit.clone()),
                    CatalogChange::Lock(f) => ("lock", None, Some(f.id.clone()), None),
                    CatalogChange::Unlock { force: true } => ("force-unlock", None, None, None),
                    CatalogChange::Unlock { force: false } => ("unlock", None, None, None),
                };
                AuditEntry {
                    at: crate::time::format_rfc3339(
                        e.at.duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs() as i64),
                    ),
                    action: action.into(),
                    who: e.who.clone(),
                    serial,
                    lock_id,
                    commit,
                }
            })
            .collect())
    }

    async fn find(&self, value: &str) -> Result<Vec<ManagedBy>, CatalogError> {
        let mut found: Vec<ManagedBy> = self
            .available()?
            .managed_by()
            .into_iter()
            .filter(|(id, _)| id.value == value)
            .map(|(_, by)| by)
            .collect();
        found.sort();
        Ok(found)
    }

    async fn duplicates(&self) -> Result<Vec<Duplicate>, CatalogError> {
        let mut groups: BTreeMap<(String, String, String), Vec<ManagedBy>> = BTreeMap::new();
        for (id, by) in self.available()?.managed_by() {
            groups
                .entry((id.value, id.resource_type, id.field))
                .or_default()
                .push(by);
        }
        Ok(groups
            .into_iter()
            .filter_map(|((value, resource_type, field), mut managed_by)| {
                managed_by.sort();
                let states: std::collections::BTreeSet<_> = managed_by
                    .iter()
                    .map(|m| (m.repository.clone(), m.path.clone()))
                    .collect();
                (states.len() > 1).then_some(Duplicate {
                    value,
                    resource_type,
                    field,
                    managed_by,
                })
            })
            .collect())
    }

    async fn sync_links(
        &self,
        consumer: &StateRef,
        uses: &[Use],
        reads: &[StateRef],
    ) -> Result<usize, CatalogError> {
        Ok(self.available()?.link(consumer, uses, reads))
    }

    async fn links(&self, state: &StateRef) -> Result<Links, CatalogError> {
        let data = self.available()?;
        let mut found = Links::default();
        for (consumer, links) in &data.links {
            for link in links {
                let dangling = !data.holds(link);
                if consumer == state {
                    found.uses.push(link.as_use(dangling));
                }
                if &link.provider == state {
                    found.used_by.push(link.as_used_by(dangling));
                }
            }
        }
        found.uses.sort();
        found.used_by.sort();
        Ok(found)
    }

    async fn graph(&self, repository: &str) -> Result<Graph, CatalogError> {
        let data = self.available()?;
        let mut graph = Graph {
            states: data
                .entries
                .values()
                .filter(|e| e.repository == repository && !e.deleted)
                .map(|e| e.path.clone())
                .collect(),
            ..Graph::default()
        };
        let links = data
            .links
            .iter()
            .filter(|(consumer, _)| consumer.repository == repository)
            .flat_map(|(_, links)| links)
            .filter(|l| l.provider.repository == repository);
        for link in links {
            graph.add(&link.consumer.path, &link.provider.path, link.kind);
        }
        Ok(graph)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_catalog_keeps_the_newest_serial_and_indexes_only_live_states() {
        let catalog = MemoryCatalog::new();
        let id = |value: &str| ResourceIdentifier {
            value: value.into(),
            resource_type: "aws_s3_bucket".into(),
            field: "id".into(),
            address: "aws_s3_bucket.b".into(),
        };
        let write = |path: &str, serial: u64, ids: Vec<ResourceIdentifier>| CatalogEvent {
            repository: "r".into(),
            path: path.into(),
            who: "alice".into(),
            at: std::time::SystemTime::now(),
            change: CatalogChange::Write(crate::catalog::StateFacts {
                serial: Some(serial),
                identifiers: ids,
                ..Default::default()
            }),
        };
        catalog
            .record(write("a", 5, vec![id("logs")]))
            .await
            .expect("record");
        catalog.record(write("a", 4, vec![])).await.expect("record");
        let page = catalog.states(&ListQuery::all()).await.expect("states");
        assert_eq!(page.states[0].serial, Some(5));
        catalog
            .record(write("b", 1, vec![id("logs")]))
            .await
            .expect("record");
        assert_eq!(catalog.find("logs").await.expect("find").len(), 2);
        assert_eq!(catalog.duplicates().await.expect("dups").len(), 1);
        catalog
            .record(CatalogEvent {
                change: CatalogChange::Delete { commit: None },
                ..write("b", 0, vec![])
            })
            .await
            .expect("record");
        assert_eq!(catalog.find("logs").await.expect("find").len(), 1);
        assert_eq!(catalog.audit("r", "a").await.expect("audit").len(), 2);
        catalog.set_outage(true);
        assert!(catalog.states(&ListQuery::all()).await.is_err());
    }

    #[tokio::test]
    async fn links_follow_writes_and_dangle_once_the_provider_goes() {
        let catalog = MemoryCatalog::new();
        let write = |path: &str, state: serde_json::Value| CatalogEvent {
            repository: "r".into(),
            path: path.into(),
            who: "alice".into(),
            at: std::time::SystemTime::now(),
            change: CatalogChange::Write(gitstate_statefile::catalog_facts(
                &serde_json::to_vec(&state).unwrap(),
            )),
        };
        let data = |name: &str, input: serde_json::Value| {
            serde_json::json!({"mode": "managed", "type": "terraform_data", "name": name,
                "instances": [{"attributes": {"id": format!("{name}-id"), "input": input}}]})
        };
        let state = |resources: Vec<serde_json::Value>| serde_json::json!({"version": 4, "serial": 1, "lineage": "l", "resources": resources});
        let remote = serde_json::json!({"mode": "data", "type": "terraform_remote_state", "name": "net",
            "instances": [{"attributes": {"backend": "http",
                "config": {"value": {"address": "http://h/state/r/network.tfstate"}}}}]});
        catalog
            .record(write(
                "network.tfstate",
                state(vec![data("vpc", serde_json::json!("x"))]),
            ))
            .await
            .unwrap();
        catalog
            .record(write(
                "app.tfstate",
                state(vec![data("app", serde_json::json!({"vpc": "vpc-id"}))]),
            ))
            .await
            .unwrap();
        catalog
            .record(write(
                "db.tfstate",
                state(vec![data("db", serde_json::json!("vpc-id")), remote]),
            ))
            .await
            .unwrap();
        let me = |path: &str| StateRef {
            repository: "r".into(),
            path: path.into(),
        };
        let network = catalog.links(&me("network.tfstate")).await.unwrap();
        let used_by: Vec<(&str, &str, &str, links::LinkKind)> = network
            .used_by
            .iter()
            .map(|e| {
                (
                    e.path.as_str(),
                    e.address.as_str(),
                    e.attribute.as_str(),
                    e.kind,
                )
            })
            .collect();
        assert_eq!(
            used_by,
            [
                (
                    "app.tfstate",
                    "terraform_data.app",
                    "input.vpc",
                    links::LinkKind::Literal
                ),
                (
                    "db.tfstate",
                    "terraform_data.db",
                    "input",
                    links::LinkKind::Declared
                ),
            ]
        );
        let app = catalog.links(&me("app.tfstate")).await.unwrap();
        assert_eq!(app.uses[0].path, "network.tfstate");
        assert_eq!(app.uses[0].address, "terraform_data.vpc");
        assert_eq!(app.uses[0].attribute, "id");
        assert!(!app.uses[0].dangling);
        let order = catalog.order("r").await.unwrap();
        assert_eq!(order.order[0], "network.tfstate", "{order:?}");
        // The network goes: its users' links dangle.
        catalog
            .record(write("network.tfstate", state(vec![])))
            .await
            .unwrap();
        let network = catalog.links(&me("network.tfstate")).await.unwrap();
        assert!(network.used_by.iter().all(|e| e.dangling), "{network:?}");
        assert_eq!(network.used_by.len(), 2);
    }
}
