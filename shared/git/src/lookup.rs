//! Path lookups in a commit's tree, through a process-wide index of large trees (issue 34).
//!
//! A state repository may keep tens of thousands of states in one folder: that folder's tree
//! object is megabytes, and git's own lookup inflates and scans it on every read (a warm GET
//! of one state read it three times). A tree is named by its content, so an index of its
//! entries built once can never be stale: every later lookup under the same tree id is a hash
//! lookup. Only trees with more than [`INDEXED_FROM`] entries are indexed; the index holds at
//! most [`MAX_INDEXED_ENTRIES`] entries in all, the oldest trees going first.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use gitstate_core::StoreError;
use gix::objs::tree::EntryKind;
use gix::ObjectId;

use crate::errors::internal;

/// Trees with more entries than this are indexed; smaller ones are scanned as git does.
pub const INDEXED_FROM: usize = 256;
/// Entries the index holds at most, over all trees (about 100 bytes each).
pub const MAX_INDEXED_ENTRIES: usize = 400_000;

/// An entry of a tree: what it is and its object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    pub id: ObjectId,
}

impl Entry {
    /// Whether the entry is a file (a blob, executable or not), not a tree, link or submodule.
    pub fn is_file(&self) -> bool {
        matches!(self.kind, EntryKind::Blob | EntryKind::BlobExecutable)
    }
}

type Index = Arc<HashMap<Vec<u8>, Entry>>;

#[derive(Default)]
struct Indexes {
    trees: HashMap<ObjectId, Index>,
    order: VecDeque<ObjectId>,
    entries: usize,
}

fn indexes() -> &'static Mutex<Indexes> {
    static INDEXES: OnceLock<Mutex<Indexes>> = OnceLock::new();
    INDEXES.get_or_init(Default::default)
}

/// How far the cache's trees reach along a path (a partial cache holds only the trees that
/// something read, DESIGN §9.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Every tree on the path is here: the entry at the path, or `None` when there is none.
    Found(Option<Entry>),
    /// The tree with this id, on the path, is not in the cache.
    Lacks(ObjectId),
}

/// The entry at `path` (segments separated by `/`) in the tree of `commit`, or `None`; an error
/// when a tree on the path is not in the cache (see [`reach`]).
pub fn entry_at(
    repo: &gix::Repository,
    commit: ObjectId,
    path: &str,
) -> Result<Option<Entry>, StoreError> {
    match reach(repo, commit, path)? {
        Reach::Found(entry) => Ok(entry),
        Reach::Lacks(tree) => Err(StoreError::Internal(format!(
            "the tree {tree} on the path {path} of {commit} is not in the cache"
        ))),
    }
}

/// Walks `path` from the tree of `commit` (which must be in the cache) as far as the cache's
/// trees go.
pub fn reach(repo: &gix::Repository, commit: ObjectId, path: &str) -> Result<Reach, StoreError> {
    let mut tree = repo
        .find_commit(commit)
        .map_err(internal("reading a commit"))?
        .tree_id()
        .map_err(internal("reading a commit's tree"))?
        .detach();
    let mut segments = path.split('/').peekable();
    while let Some(segment) = segments.next() {
        if !repo.has_object(tree) {
            return Ok(Reach::Lacks(tree));
        }
        let Some(entry) = entry_in(repo, tree, segment.as_bytes())? else {
            return Ok(Reach::Found(None));
        };
        if segments.peek().is_none() {
            return Ok(Reach::Found(Some(entry)));
        }
        if entry.kind != EntryKind::Tree {
            return Ok(Reach::Found(None));
        }
        tree = entry.id;
    }
    Ok(Reach::Found(None))
}

/// The entry `name` of the tree `tree`: from the index when the tree is indexed, else by a scan
/// (which indexes the tree when it is large).
fn entry_in(
    repo: &gix::Repository,
    tree: ObjectId,
    name: &[u8],
) -> Result<Option<Entry>, StoreError> {
    if let Some(index) = indexes()
        .lock()
        .ok()
        .and_then(|i| i.trees.get(&tree).cloned())
    {
        return Ok(index.get(name).copied());
    }
    let object = repo.find_tree(tree).map_err(internal("reading a tree"))?;
    let decoded = object.decode().map_err(internal("decoding a tree"))?;
    if decoded.entries.len() <= INDEXED_FROM {
        return Ok(decoded
            .entries
            .iter()
            .find(|e| e.filename == name)
            .map(|e| Entry {
                kind: e.mode.kind(),
                id: e.oid.to_owned(),
            }));
    }
    let index: HashMap<Vec<u8>, Entry> = decoded
        .entries
        .iter()
        .map(|e| {
            let entry = Entry {
                kind: e.mode.kind(),
                id: e.oid.to_owned(),
            };
            (e.filename.to_vec(), entry)
        })
        .collect();
    let found = index.get(name).copied();
    remember(tree, Arc::new(index));
    Ok(found)
}

/// Keeps the index of `tree`, dropping the oldest ones beyond [`MAX_INDEXED_ENTRIES`].
fn remember(tree: ObjectId, index: Index) {
    let Ok(mut indexes) = indexes().lock() else {
        return;
    };
    if index.len() > MAX_INDEXED_ENTRIES || indexes.trees.contains_key(&tree) {
        return;
    }
    indexes.entries += index.len();
    indexes.trees.insert(tree, index);
    indexes.order.push_back(tree);
    while indexes.entries > MAX_INDEXED_ENTRIES {
        let Some(oldest) = indexes.order.pop_front() else {
            break;
        };
        if let Some(dropped) = indexes.trees.remove(&oldest) {
            indexes.entries -= dropped.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare repository with `count` files in folder `big/` and one in `small/`, committed.
    fn repository(count: usize) -> (tempfile::TempDir, gix::Repository, ObjectId) {
        let dir = tempfile::tempdir().unwrap();
        let repo = gix::init_bare(dir.path()).unwrap();
        let empty = repo.empty_tree().id;
        let mut editor = repo.edit_tree(empty).unwrap();
        for i in 0..count {
            let blob = repo.write_blob(format!("state {i}")).unwrap().detach();
            editor
                .upsert(format!("big/s{i:05}.tfstate"), EntryKind::Blob, blob)
                .unwrap();
        }
        let blob = repo.write_blob("small").unwrap().detach();
        editor
            .upsert("small/one.tfstate", EntryKind::Blob, blob)
            .unwrap();
        let tree = editor.write().unwrap().detach();
        let signature = gix::actor::SignatureRef {
            name: "t".into(),
            email: "t@t".into(),
            time: "0 +0000",
        };
        let commit = repo
            .new_commit_as(signature, signature, "seed", tree, Vec::<ObjectId>::new())
            .unwrap()
            .id;
        (dir, repo, commit)
    }

    fn by_git(repo: &gix::Repository, commit: ObjectId, path: &str) -> Option<Entry> {
        let tree = repo.find_commit(commit).unwrap().tree().unwrap();
        tree.lookup_entry_by_path(path).unwrap().map(|e| Entry {
            kind: e.mode().kind(),
            id: e.object_id(),
        })
    }

    #[test]
    fn lookups_answer_what_git_answers_in_large_and_small_trees() {
        let (_dir, repo, commit) = repository(INDEXED_FROM * 3);
        for path in [
            "big/s00000.tfstate",
            "big/s00700.tfstate",
            "big/s00767.tfstate",
            "big/missing.tfstate",
            "big",
            "small/one.tfstate",
            "small/two.tfstate",
            "big/s00001.tfstate/deeper",
            "nothing/here",
        ] {
            // Twice: the second lookup of the large folder comes from its index.
            for _ in 0..2 {
                assert_eq!(
                    entry_at(&repo, commit, path).unwrap(),
                    by_git(&repo, commit, path),
                    "{path}"
                );
            }
        }
        let big = by_git(&repo, commit, "big").unwrap().id;
        let indexed = indexes().lock().unwrap().trees.contains_key(&big);
        assert!(indexed, "the large folder was not indexed");
    }
}
