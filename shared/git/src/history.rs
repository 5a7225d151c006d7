//! Reading a state branch's history out of a full (not shallow) repository: the versions of one
//! file and a file at a commit (the listing of the files at the tip is `listing.rs`).
//! Both stores use it: the local store on its repository, the remote store on its history cache.

use gitstate_core::{StoreError, Version};
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

/// The size of the blob `blob` (its header only).
pub(crate) fn blob_size(repo: &gix::Repository, blob: ObjectId) -> Result<u64, StoreError> {
    Ok(repo
        .find_header(blob)
        .map_err(internal("reading a blob header"))?
        .size())
}

/// What a history entry says about its commit.
pub(crate) fn version(
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

/// The tree of `commit`.
pub(crate) fn tree_of(repo: &gix::Repository, commit: ObjectId) -> Result<ObjectId, StoreError> {
    Ok(repo
        .find_commit(commit)
        .map_err(internal("reading a commit"))?
        .tree_id()
        .map_err(internal("reading a commit's tree"))?
        .detach())
}

/// The commits of the first-parent history of `tip`, newest first, each with its tree.
pub(crate) fn first_parent_commits(
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
        Ok((info.id, tree_of(repo, info.id)?))
    }))
}

/// Brings the blobs `ids` into the repository a history is read from, where it lacks them (the
/// remote store's history cache holds no blob until one is read, DESIGN §9.5), and returns a
/// handle that sees them. A full repository passes itself back.
pub type Blobs<'a> = &'a dyn Fn(Vec<ObjectId>) -> Result<gix::Repository, StoreError>;

/// The [`Blobs`] of a full repository (the local store's): it holds every blob already.
pub fn held(
    repo: &gix::Repository,
) -> impl Fn(Vec<ObjectId>) -> Result<gix::Repository, StoreError> + '_ {
    move |_| Ok(repo.clone())
}

/// The versions of `path` in the first-parent history of `tip`, newest first, at most `limit`:
/// the commits whose file at `path` differs from their parent's (a deletion has no size). The
/// versions' blobs come through `blobs`, for their sizes.
pub fn versions(
    repo: &gix::Repository,
    tip: ObjectId,
    path: &str,
    limit: usize,
    blobs: Blobs<'_>,
) -> Result<Vec<Version>, StoreError> {
    let mut found: Vec<(ObjectId, Option<ObjectId>)> = Vec::new();
    // The newer commit of each pair and its blob: it is a version when its parent's blob differs.
    let mut newer: Option<(ObjectId, Option<ObjectId>)> = None;
    for entry in first_parent_commits(repo, tip)? {
        if found.len() >= limit {
            break;
        }
        let (commit, tree) = entry?;
        let blob = blob_at(repo, tree, path)?;
        if let Some((newer_commit, newer_blob)) = newer {
            if newer_blob != blob {
                found.push((newer_commit, newer_blob));
            }
        }
        newer = Some((commit, blob));
    }
    // The oldest commit changed the file if it holds it (nothing before it did).
    if let Some((commit, Some(blob))) = newer {
        if found.len() < limit {
            found.push((commit, Some(blob)));
        }
    }
    let repo = blobs(found.iter().filter_map(|(_, blob)| *blob).collect())?;
    found
        .into_iter()
        .map(|(commit, blob)| {
            let size = blob.map(|b| blob_size(&repo, b)).transpose()?;
            version(&repo, commit, size)
        })
        .collect()
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
