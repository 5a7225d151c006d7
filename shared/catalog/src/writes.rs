//! Writes to the catalog: recording an event (audit, state entry, resource index, duplicate
//! markers) and the rebuild steps.

use super::*;

impl DynamoCatalog {
    pub(super) async fn record_event(&self, event: CatalogEvent) -> Result<(), CatalogError> {
        let at = rfc3339(event.at);
        // The audit first: it is append-only, so a failure of the state entry still leaves the
        // trail complete, and the next write repairs the entry.
        self.add_audit(&event, &at).await?;
        let took = self.update_state(&event, &at).await?;
        let consumer = gitstate_core::links::StateRef {
            repository: event.repository.clone(),
            path: event.path.clone(),
        };
        match &event.change {
            CatalogChange::Write(facts) if took => {
                self.sync_index(&event.repository, &event.path, &facts.identifiers, true)
                    .await?;
                self.sync_consumer_links(&consumer, &facts.uses, &facts.reads, true)
                    .await?;
                Ok(())
            }
            CatalogChange::Delete { .. } => {
                self.sync_index(&event.repository, &event.path, &[], true)
                    .await?;
                self.sync_consumer_links(&consumer, &[], &[], true).await?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn rebuild_state_entry(
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

    pub(super) async fn forget_missing_states(
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

    pub(super) async fn rebuild_duplicate_markers(&self) -> Result<usize, CatalogError> {
        // A scan of every index entry, once: cheaper than asking per identifier when all of
        // them were just rewritten. Entries of the old plaintext layout found on the way (of
        // states no rebuild reaches) are deleted.
        let mut groups: std::collections::BTreeMap<(String, String, String), Vec<Holder>> =
            Default::default();
        let mut legacy = Vec::new();
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
                match Holder::of(item) {
                    Some(holder) => groups
                        .entry((
                            holder.value_hmac.clone(),
                            holder.resource_type.clone(),
                            holder.field.clone(),
                        ))
                        .or_default()
                        .push(holder),
                    None => legacy.push(item.clone()),
                }
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => break,
            }
        }
        let mut deletes: std::collections::BTreeSet<(String, String)> = Default::default();
        for item in &legacy {
            let (repository, path) = (
                get_s(item, "repository").unwrap_or_default(),
                get_s(item, "path").unwrap_or_default(),
            );
            if let (Some(pk), Some(sk)) = (get_s(item, "pk"), get_s(item, "sk")) {
                deletes.insert((pk, sk));
            }
            deletes.insert((
                format!("RES#{repository}#{path}"),
                format!(
                    "{}#{}",
                    get_s(item, "address").unwrap_or_default(),
                    get_s(item, "field").unwrap_or_default()
                ),
            ));
        }
        let requests = deletes
            .into_iter()
            .map(|(pk, sk)| delete_request(pk, sk))
            .collect::<Result<Vec<_>, _>>()?;
        self.batch_write(requests).await?;
        let every_value: std::collections::BTreeSet<String> =
            groups.keys().map(|(hash, _, _)| hash.clone()).collect();
        self.rewrite_idset(&every_value).await?;
        let duplicates: std::collections::BTreeMap<(String, String, String), String> = groups
            .into_iter()
            .filter(|(_, holders)| distinct_states(holders) > 1)
            .filter_map(|(key, holders)| {
                let value_enc = holders.first()?.value_enc.clone();
                Some((key, value_enc))
            })
            .collect();
        for marker in self.query_partition(DUPS.into()).await? {
            let key = (
                get_s(&marker, "value_hmac").unwrap_or_default(),
                get_s(&marker, "resource_type").unwrap_or_default(),
                get_s(&marker, "field").unwrap_or_default(),
            );
            if !duplicates.contains_key(&key) {
                if let Some(sk) = get_s(&marker, "sk") {
                    self.delete_marker(sk).await?;
                }
            }
        }
        for ((hash, resource_type, field), value_enc) in &duplicates {
            self.mark_duplicate(hash, resource_type, field, Some(value_enc.clone()))
                .await?;
        }
        Ok(duplicates.len())
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
    /// longer holds is deleted, what is new is put (both directions), hashed and encrypted under
    /// the index key (without one, nothing is indexed and what was is deleted); entries of the
    /// old plaintext layout are deleted. With `check_duplicates`, each identifier whose holders
    /// changed is read back and its `DUPS` marker set or removed (a rebuild skips that and
    /// recomputes every marker at the end).
    async fn sync_index(
        &self,
        repository: &str,
        path: &str,
        identifiers: &[ResourceIdentifier],
        check_duplicates: bool,
    ) -> Result<(), CatalogError> {
        let keys = if identifiers.is_empty() {
            None
        } else {
            self.index_keys().await?
        };
        let mut wanted: std::collections::BTreeMap<Indexed, &ResourceIdentifier> =
            Default::default();
        if let Some(keys) = &keys {
            for id in identifiers {
                wanted.insert(Indexed::of(keys, id)?, id);
            }
        } else if !identifiers.is_empty() {
            tracing::debug!(
                repository,
                path,
                "no resource index key: identifiers are not indexed"
            );
        }
        let state_pk = format!("RES#{repository}#{path}");
        let mut indexed = std::collections::BTreeSet::new();
        let mut requests = Vec::new();
        // Keys to delete; one also put in this batch is left to the put (a batch may not name
        // a key twice: DynamoDB refuses it, moto applied the delete after the put).
        let mut deletes: std::collections::BTreeSet<(String, String)> = Default::default();
        let mut legacy_values = Vec::new();
        for item in self.query_partition(state_pk.clone()).await? {
            match Indexed::from_item(&item) {
                Some(entry) => {
                    indexed.insert(entry);
                }
                None => {
                    // The old layout kept the identifier in clear: delete it wherever it is.
                    deletes.extend(legacy_keys(repository, path, &item));
                    legacy_values.push(item);
                }
            }
        }
        for gone in indexed.iter().filter(|i| !wanted.contains_key(*i)) {
            deletes.extend(index_item_keys(repository, path, gone));
        }
        // (value hash, type, field) → whether this state now holds it.
        let mut touched: std::collections::BTreeMap<(String, String, String), bool> =
            Default::default();
        for gone in indexed.iter().filter(|i| !wanted.contains_key(*i)) {
            touched.insert(gone.duplicate_key(), false);
        }
        let mut added = Vec::new();
        for (new, id) in wanted.iter().filter(|(i, _)| !indexed.contains(*i)) {
            touched.insert(new.duplicate_key(), true);
            added.push(new.value_hmac.clone());
            let Some(keys) = &keys else { continue };
            let value_enc = keys.seal(Kind::Value, &new.value_hmac, &id.value)?;
            let address_enc = keys.seal(Kind::Address, &new.address_hmac, &id.address)?;
            for (pk, sk) in index_item_keys(repository, path, new) {
                deletes.remove(&(pk.clone(), sk.clone()));
                let put = PutRequest::builder()
                    .item("pk", s(pk))
                    .item("sk", s(sk))
                    .item("value_hmac", s(&new.value_hmac))
                    .item("value_enc", s(&value_enc))
                    .item("address_hmac", s(&new.address_hmac))
                    .item("address_enc", s(&address_enc))
                    .item("resource_type", s(&new.resource_type))
                    .item("field", s(&new.field))
                    .item("repository", s(repository))
                    .item("path", s(path))
                    .build()
                    .map_err(|e| CatalogError(format!("building a put request: {e}")))?;
                requests.push(WriteRequest::builder().put_request(put).build());
            }
        }
        for (pk, sk) in deletes {
            requests.push(delete_request(pk, sk)?);
        }
        self.batch_write(requests).await?;
        if !added.is_empty() {
            self.add_to_idset(&added).await?;
        }
        if !legacy_values.is_empty() {
            tracing::info!(
                repository,
                path,
                entries = legacy_values.len(),
                "deleted resource index entries of the old plaintext layout"
            );
        }
        // After the index is written (read back consistently, so of two states adding one
        // identifier at once, the later one sees both): mark or unmark it as a duplicate.
        if !check_duplicates {
            return Ok(());
        }
        for ((hash, resource_type, field), held) in touched {
            let holders = self.holders(&hash, &resource_type, &field).await?;
            let duplicate = distinct_states(&holders) > 1;
            if duplicate || !held {
                // A marker can exist only where the identifier had another holder: one this
                // state just took needs no delete when it is alone.
                let value_enc = holders.first().map(|h| h.value_enc.clone());
                self.mark_duplicate(
                    &hash,
                    &resource_type,
                    &field,
                    value_enc.filter(|_| duplicate),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Puts the `DUPS` marker of an identifier (with its encrypted value), or deletes it
    /// (`None`).
    async fn mark_duplicate(
        &self,
        hash: &str,
        resource_type: &str,
        field: &str,
        value_enc: Option<String>,
    ) -> Result<(), CatalogError> {
        let sk = format!("{hash}#{resource_type}#{field}");
        match value_enc {
            Some(value_enc) => {
                self.client
                    .put_item()
                    .table_name(&self.table)
                    .item("pk", s(DUPS))
                    .item("sk", s(sk))
                    .item("value_hmac", s(hash))
                    .item("value_enc", s(value_enc))
                    .item("resource_type", s(resource_type))
                    .item("field", s(field))
                    .send()
                    .await
                    .map_err(failed("PutItem"))?;
                Ok(())
            }
            None => self.delete_marker(sk).await,
        }
    }

    async fn delete_marker(&self, sk: String) -> Result<(), CatalogError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(DUPS))
            .key("sk", s(sk))
            .send()
            .await
            .map_err(failed("DeleteItem"))?;
        Ok(())
    }
}
