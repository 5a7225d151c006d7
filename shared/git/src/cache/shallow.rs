//! The cache's `shallow` file: the depth-1 boundary, read and written as git and gix do.

use std::path::Path;

use gitstate_core::StoreError;
use gix::ObjectId;

use gitstate_wire::fetchpack::ShallowUpdate;

/// The commits of the cache's `shallow` file (none when there is no file).
pub(super) fn read_shallow(path: &Path) -> Result<Vec<ObjectId>, StoreError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(StoreError::Internal(format!(
                "reading the cache's shallow file: {e}"
            )))
        }
    };
    text.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            ObjectId::from_hex(line).map_err(|e| {
                StoreError::Internal(format!("the cache's shallow file is corrupt: {e}"))
            })
        })
        .collect()
}

/// Writes `current` with `updates` applied as the new `shallow` file under `lock` (removing the
/// file when nothing is left), as git and gix do.
pub(super) fn write_shallow(
    mut lock: gix::lock::File,
    mut current: Vec<ObjectId>,
    updates: &[ShallowUpdate],
) -> Result<(), StoreError> {
    use std::io::Write;
    if updates.is_empty() {
        return Ok(()); // dropping the lock leaves the file as it was
    }
    for update in updates {
        match update {
            ShallowUpdate::Shallow(id) => current.push(*id),
            ShallowUpdate::Unshallow(id) => current.retain(|c| c != id),
        }
    }
    current.sort();
    current.dedup();
    let failed = |e: &dyn std::fmt::Display| {
        StoreError::Internal(format!("writing the cache's shallow file: {e}"))
    };
    if current.is_empty() {
        match std::fs::remove_file(lock.resource_path()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(&e)),
        }
        return Ok(());
    }
    let mut text = Vec::with_capacity(current.len() * 41);
    for id in &current {
        text.extend_from_slice(id.to_hex().to_string().as_bytes());
        text.push(b'\n');
    }
    lock.with_mut(|file| file.write_all(&text))
        .map_err(|e| failed(&e))?;
    lock.commit().map_err(|e| failed(&e.error))?;
    Ok(())
}
