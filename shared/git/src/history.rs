//! Reading a state branch's history out of a full (not shallow) repository: the versions of one
//! file, the files at the tip with the last commit that changed each, and a file at a commit.
//! Both stores use it: the local store on its repository, the remote store on its history cache.

use std::collections::{BTreeMap, HashMap};

use gitstate_core::{StateListing, StoreError, Version};
use gix::ObjectId;

use crate::objects::internal;

/// The blob at `path` in `tree`, or `None` when the path holds no file there.
fn blob_at(
    repo: &gix::Repository,
    tree: ObjectId,
    path: &str,
) -> Result<Option<ObjectId>, StoreError> {
    let tree = repo.find_tree(tree).map_err(internal("reading a tree"))?;
    let entry = tree
        .lookup_entry_by_path(path)
        .map_err(internal("looking up a path"))?;
    Ok(entry.filter(|e| e.mode().is_blob()).map(|e| e.object_id()))
}

fn blob_size(repo: &gix::Repository, blob: ObjectId) -> Result<u64, StoreError> {
    Ok(repo
        .find_header(blob)
        .map_err(internal("reading a blob header"))?
        .size())
}

/// What a history entry says about its commit.
fn version(
    repo: &gix::Repository,
    commit: ObjectId,
    size: Option<u64>,
) -> Result<Version, StoreError> {
    let commit_object = repo
        .find_commit(commit)
        .map_err(internal("reading a commit"))?;
    let time = commit_object
        .time()
        .map_err(internal("reading a commit time"))?
        .seconds;
    let author = commit_object
        .author()
        .map_err(internal("reading a commit author"))?
        .name
        .to_string();
    Ok(Version {
        commit: commit.to_string(),
        time,
        message: commit_object.message_raw_sloppy().to_string(),
        author,
        size,
    })
}

/// The commits of the first-parent history of `tip`, newest first, each with its tree.
fn first_parent_commits(
    repo: &gix::Repository,
    tip: ObjectId,
) -> Result<impl Iterator<Item = Result<(ObjectId, ObjectId), StoreError>> + '_, StoreError> {
    let walk = repo
        .rev_walk([tip])
        .first_parent_only()
        .all()
        .map_err(internal("walking the history"))?;
    Ok(walk.map(move |info| {
        let info = info.map_err(internal("walking the history"))?;
        let tree = repo
            .find_commit(info.id)
            .map_err(internal("reading a commit"))?
            .tree_id()
            .map_err(internal("reading a commit's tree"))?
            .detach();
        Ok((info.id, tree))
    }))
}

/// The versions of `path` in the first-parent history of `tip`, newest first, at most `limit`:
/// the commits whose file at `path` differs from their parent's (a deletion has no size).
pub fn versions(
    repo: &gix::Repository,
    tip: ObjectId,
    path: &str,
    limit: usize,
) -> Result<Vec<Version>, StoreError> {
    let mut found = Vec::new();
    // The newer commit of each pair and its blob: it is a version when its parent's blob differs.
    let mut newer: Option<(ObjectId, Option<ObjectId>)> = None;
    for entry in first_parent_commits(repo, tip)? {
        if found.len() >= limit {
            return Ok(found);
        }
        let (commit, tree) = entry?;
        let blob = blob_at(repo, tree, path)?;
        if let Some((newer_commit, newer_blob)) = newer {
            if newer_blob != blob {
                let size = newer_blob.map(|b| blob_size(repo, b)).transpose()?;
                found.push(version(repo, newer_commit, size)?);
            }
        }
        newer = Some((commit, blob));
    }
    // The oldest commit changed the file if it holds it (nothing before it did).
    if let Some((commit, Some(blob))) = newer {
        if found.len() < limit {
            found.push(version(repo, commit, Some(blob_size(repo, blob)?))?);
        }
    }
    Ok(found)
}

/// Every blob under `tree`, by path.
fn files(
    repo: &gix::Repository,
    tree: ObjectId,
    prefix: &str,
    out: &mut BTreeMap<String, ObjectId>,
) -> Result<(), StoreError> {
    for (name, (is_tree, is_blob, id)) in entries(repo, tree)? {
        let path = format!("{prefix}{name}");
        if is_tree {
            files(repo, id, &format!("{path}/"), out)?;
        } else if is_blob {
            out.insert(path, id);
        }
    }
    Ok(())
}

/// The entries of a tree: name → (is a tree, is a blob, id).
fn entries(
    repo: &gix::Repository,
    tree: ObjectId,
) -> Result<HashMap<String, (bool, bool, ObjectId)>, StoreError> {
    let object = repo.find_tree(tree).map_err(internal("reading a tree"))?;
    let mut found = HashMap::new();
    for entry in gix::objs::TreeRefIter::from_bytes(&object.data, repo.object_hash()) {
        let entry = entry.map_err(internal("decoding a tree"))?;
        found.insert(
            entry.filename.to_string(),
            (
                entry.mode.is_tree(),
                entry.mode.is_blob(),
                entry.oid.to_owned(),
            ),
        );
    }
    Ok(found)
}

/// The paths of blobs that differ between `old` (`None`: the empty tree) and `new`, descending
/// only into subtrees whose ids differ.
fn changed_paths(
    repo: &gix::Repository,
    old: Option<ObjectId>,
    new: Option<ObjectId>,
    prefix: &str,
    out: &mut Vec<String>,
) -> Result<(), StoreError> {
    if old == new {
        return Ok(());
    }
    let old_entries = old
        .map(|t| entries(repo, t))
        .transpose()?
        .unwrap_or_default();
    let new_entries = new
        .map(|t| entries(repo, t))
        .transpose()?
        .unwrap_or_default();
    let mut names: Vec<&String> = old_entries.keys().chain(new_entries.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let (before, after) = (old_entries.get(name), new_entries.get(name));
        if before.map(|e| e.2) == after.map(|e| e.2) {
            continue;
        }
        let path = format!("{prefix}{name}");
        let subtree = |e: Option<&(bool, bool, ObjectId)>| e.filter(|e| e.0).map(|e| e.2);
        let blob = |e: Option<&(bool, bool, ObjectId)>| e.is_some_and(|e| e.1);
        if subtree(before).is_some() || subtree(after).is_some() {
            changed_paths(
                repo,
                subtree(before),
                subtree(after),
                &format!("{path}/"),
                out,
            )?;
        }
        if blob(before) || blob(after) {
            out.push(path);
        }
    }
    Ok(())
}

/// The files at `tip` with the last commit of the first-parent history that changed each.
pub fn listing(repo: &gix::Repository, tip: ObjectId) -> Result<Vec<StateListing>, StoreError> {
    let tip_tree = repo
        .find_commit(tip)
        .map_err(internal("reading the tip"))?
        .tree_id()
        .map_err(internal("reading the tip's tree"))?
        .detach();
    let mut at_tip = BTreeMap::new();
    files(repo, tip_tree, "", &mut at_tip)?;
    let mut last_change: HashMap<String, ObjectId> = HashMap::new();
    let mut newer: Option<(ObjectId, ObjectId)> = None;
    for entry in first_parent_commits(repo, tip)? {
        if last_change.len() == at_tip.len() {
            break;
        }
        let (commit, tree) = entry?;
        if let Some((newer_commit, newer_tree)) = newer {
            let mut changed = Vec::new();
            changed_paths(repo, Some(tree), Some(newer_tree), "", &mut changed)?;
            for path in changed {
                if at_tip.contains_key(&path) {
                    last_change.entry(path).or_insert(newer_commit);
                }
            }
        }
        newer = Some((commit, tree));
    }
    if let Some((oldest, _)) = newer {
        for path in at_tip.keys() {
            last_change.entry(path.clone()).or_insert(oldest);
        }
    }
    let mut versions: HashMap<ObjectId, Version> = HashMap::new();
    let mut listed = Vec::with_capacity(at_tip.len());
    for (path, blob) in at_tip {
        let size = blob_size(repo, blob)?;
        let last = match last_change.get(&path) {
            Some(commit) => {
                if !versions.contains_key(commit) {
                    versions.insert(*commit, version(repo, *commit, None)?);
                }
                versions.get(commit).cloned().map(|mut v| {
                    v.size = Some(size);
                    v
                })
            }
            None => None,
        };
        listed.push(StateListing {
            path,
            size,
            last_change: last,
        });
    }
    Ok(listed)
}

/// The file at `path` in `commit`; `None` when the repository lacks the commit or the commit
/// holds no file there.
pub fn read_at(
    repo: &gix::Repository,
    commit: ObjectId,
    path: &str,
) -> Result<Option<bytes::Bytes>, StoreError> {
    match repo.try_find_header(commit) {
        Ok(Some(header)) if header.kind() == gix::objs::Kind::Commit => {
            crate::objects::read_file(repo, commit, path)
        }
        Ok(_) => Ok(None),
        Err(e) => Err(StoreError::Internal(format!("reading a commit: {e}"))),
    }
}
