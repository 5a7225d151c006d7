//! The fake [`Catalog`]: states, locks, the audit trail and the resource index, in memory.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::catalog::{
    AuditEntry, Catalog, CatalogChange, CatalogError, CatalogEvent, CatalogPage, Duplicate,
    LockEntry, LockFacts, ManagedBy, ResourceIdentifier, StateEntry,
};
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
    fn apply(&mut self, event: &CatalogEvent) {
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
                    return;
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
        data.apply(&event);
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
}
