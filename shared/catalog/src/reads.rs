//! Reads of the catalog: state entries, audit trails, who holds an identifier, duplicates.

use super::*;

impl DynamoCatalog {
    /// One page of the state entries (see [`Catalog::states`]): a query of the `STATES`
    /// partition from the cursor's sort key on (`{repository}#{path}` sorts as (repository,
    /// path) since repository names hold no byte below `#`), `begins_with` the prefix's sort
    /// key, until one entry past the page.
    pub(super) async fn state_page(&self, query: &ListQuery) -> Result<CatalogPage, CatalogError> {
        let begins = match query.prefix.split_once('/') {
            Some((repository, path)) => format!("{repository}#{path}"),
            None => query.prefix.clone(),
        };
        let mut start = query.after.as_deref().map(|after| {
            let (repository, path) = catalog_key(after);
            let (pk, sk) = state_key(repository, path);
            HashMap::from([("pk".to_owned(), pk), ("sk".to_owned(), sk)])
        });
        let wanted = query.limit.saturating_add(1);
        let mut entries: Vec<StateEntry> = Vec::new();
        loop {
            let request = self
                .client
                .query()
                .table_name(&self.table)
                .expression_attribute_values(":pk", s(STATES))
                .consistent_read(true)
                .limit(i32::try_from(wanted - entries.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take());
            let request = match begins.is_empty() {
                true => request.key_condition_expression("pk = :pk"),
                false => request
                    .key_condition_expression("pk = :pk AND begins_with(sk, :begins)")
                    .expression_attribute_values(":begins", s(begins.clone())),
            };
            let page = request.send().await.map_err(failed("Query"))?;
            entries.extend(page.items().iter().map(state_entry));
            if entries.len() >= wanted {
                break;
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => break,
            }
        }
        let more = entries.len() > query.limit;
        entries.truncate(query.limit);
        Ok(CatalogPage {
            states: entries,
            more,
        })
    }

    pub(super) async fn audit_trail(
        &self,
        repository: &str,
        path: &str,
    ) -> Result<Vec<AuditEntry>, CatalogError> {
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

    pub(super) async fn find_holders(&self, value: &str) -> Result<Vec<ManagedBy>, CatalogError> {
        let keys = self.required_index_keys().await?;
        let hash = keys.hash(Kind::Value, value)?;
        let mut found = self
            .query_partition(format!("ID#{hash}"))
            .await?
            .iter()
            .filter_map(Holder::of)
            .map(|h| h.managed_by(&keys))
            .collect::<Result<Vec<ManagedBy>, CatalogError>>()?;
        found.sort();
        Ok(found)
    }

    pub(super) async fn duplicate_identifiers(&self) -> Result<Vec<Duplicate>, CatalogError> {
        let keys = self.required_index_keys().await?;
        let mut found = Vec::new();
        for item in self.query_partition(DUPS.into()).await? {
            let (Some(hash), Some(value_enc)) =
                (get_s(&item, "value_hmac"), get_s(&item, "value_enc"))
            else {
                continue; // a marker of the old layout: the next rebuild deletes it
            };
            let (resource_type, field) = (
                get_s(&item, "resource_type").unwrap_or_default(),
                get_s(&item, "field").unwrap_or_default(),
            );
            // Read back rather than trusted: a marker a concurrent update left behind is
            // skipped here and repaired by the next update of that identifier.
            let holders = self.holders(&hash, &resource_type, &field).await?;
            if distinct_states(&holders) > 1 {
                let mut managed_by = holders
                    .iter()
                    .map(|h| h.managed_by(&keys))
                    .collect::<Result<Vec<ManagedBy>, CatalogError>>()?;
                managed_by.sort();
                found.push(Duplicate {
                    value: keys.open(Kind::Value, &hash, &value_enc)?,
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

    /// The index entries holding the identifier hashed `hash` as the `field` of a
    /// `resource_type`.
    pub(super) async fn holders(
        &self,
        hash: &str,
        resource_type: &str,
        field: &str,
    ) -> Result<Vec<Holder>, CatalogError> {
        let mut holders: Vec<Holder> = self
            .query_partition(format!("ID#{hash}"))
            .await?
            .iter()
            .filter_map(Holder::of)
            .filter(|h| h.resource_type == resource_type && h.field == field)
            .collect();
        holders.sort_by(|a, b| (&a.repository, &a.path).cmp(&(&b.repository, &b.path)));
        Ok(holders)
    }
}
