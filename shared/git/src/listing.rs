//! One page of the files on a state branch at its tip (issue 34, DESIGN §9.5), out of a full
//! repository (the local store's, the remote store's history cache).
//!
//! A page costs what the page holds, not what the repository holds:
//! - its files come from one walk of the trees in path order (git orders a tree's entries as
//!   their paths sort), skipping whole folders outside the prefix or before the cursor, and
//!   stopping one file past the page;
//! - the count under the prefix adds up per-tree counts kept by tree id (a tree never changes, so
//!   a count is never stale): after a write, only the trees on its path are counted again;
//! - the last change of each file of the page comes from the first-parent history, stopping once
//!   every file of the page has its commit; what each commit changed is read once per process
//!   (a diff that goes into a folder only when its tree id differs) and kept by commit id.

use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use gitstate_core::{ListQuery, StateListing, StatePage, StoreError, Version};
use gix::objs::tree::EntryKind;
use gix::ObjectId;

use crate::errors::internal;
use crate::history::{blob_size, first_parent_commits, tree_of, version, Blobs};

/// The page `query` asks for of the files at `tip` in `repo` (every commit and tree of the
/// first-parent history present), with the last commit of that history that changed each; the
/// page's blobs come through `blobs`, for their sizes.
pub fn page(
    repo: &gix::Repository,
    tip: ObjectId,
    query: &ListQuery,
    blobs: Blobs<'_>,
) -> Result<StatePage, StoreError> {
    let root = tree_of(repo, tip)?;
    let mut files = Vec::new();
    let mut path = String::new();
    let more = walk(repo, root, &mut path, query, &mut files)?;
    let total = count_under(repo, tip, root, &query.prefix)?;
    let changes = last_changes(repo, tip, &files)?;
    let repo = &blobs(files.iter().map(|(_, blob)| *blob).collect())?;
    let mut versions: HashMap<ObjectId, Version> = HashMap::new();
    let mut states = Vec::with_capacity(files.len());
    for (path, blob) in files {
        let size = blob_size(repo, blob)?;
        let last_change = match changes.get(&path) {
            Some(commit) => {
                let known = match versions.entry(*commit) {
                    Entry::Occupied(known) => known.into_mut(),
                    Entry::Vacant(new) => new.insert(version(repo, *commit, None)?),
                };
                Some(Version {
                    size: Some(size),
                    ..known.clone()
                })
            }
            None => None,
        };
        states.push(StateListing {
            path,
            size,
            last_change,
        });
    }
    Ok(StatePage {
        states,
        total,
        more,
    })
}

/// The paths of the files at `tip` in `repo` that start with `prefix`, in path order: one walk
/// of the trees on the way, without counts, sizes or last changes.
pub fn paths(
    repo: &gix::Repository,
    tip: ObjectId,
    prefix: &str,
) -> Result<Vec<String>, StoreError> {
    let query = ListQuery {
        prefix: prefix.to_owned(),
        after: None,
        limit: usize::MAX,
    };
    let mut files = Vec::new();
    walk(
        repo,
        tree_of(repo, tip)?,
        &mut String::new(),
        &query,
        &mut files,
    )?;
    Ok(files.into_iter().map(|(path, _)| path).collect())
}

/// Adds the files of `tree` (at `path`, which ends in `/` or is empty) that `query` admits to
/// `out`, in path order, up to `query.limit`; `true` when one more file follows.
fn walk(
    repo: &gix::Repository,
    tree: ObjectId,
    path: &mut String,
    query: &ListQuery,
    out: &mut Vec<(String, ObjectId)>,
) -> Result<bool, StoreError> {
    let object = repo.find_tree(tree).map_err(internal("reading a tree"))?;
    let at = path.len();
    for entry in gix::objs::TreeRefIter::from_bytes(&object.data, repo.object_hash()) {
        let entry = entry.map_err(internal("decoding a tree"))?;
        let Ok(name) = std::str::from_utf8(entry.filename) else {
            continue; // not a state path
        };
        path.truncate(at);
        path.push_str(name);
        if entry.mode.is_tree() {
            path.push('/');
            if folder_may_hold(path, query) {
                let id = entry.oid.to_owned();
                if walk(repo, id, path, query, out)? {
                    return Ok(true);
                }
            }
        } else if entry.mode.is_blob() && query.admits(path) {
            if out.len() >= query.limit {
                return Ok(true);
            }
            out.push((path.clone(), entry.oid.to_owned()));
        }
    }
    path.truncate(at);
    Ok(false)
}

/// Whether the folder `folder` (ending in `/`: every path in it starts so) may hold a path that
/// `query` admits: under the prefix, and not wholly before the cursor.
fn folder_may_hold(folder: &str, query: &ListQuery) -> bool {
    let under = folder.starts_with(&query.prefix) || query.prefix.starts_with(folder);
    let after = match &query.after {
        None => true,
        // A path in the folder sorts after the cursor when the cursor is in the folder (some
        // may), or when the folder itself sorts after it (all do).
        Some(after) => after.starts_with(folder) || folder > after.as_str(),
    };
    under && after
}

/// Files under `prefix` at `tip` (whose tree is `root`): the entries of the prefix's folder
/// whose names start with the rest of it, each file counting one and each folder its files.
fn count_under(
    repo: &gix::Repository,
    tip: ObjectId,
    root: ObjectId,
    prefix: &str,
) -> Result<usize, StoreError> {
    let (folder, start) = match prefix.rfind('/') {
        Some(end) => (&prefix[..end], &prefix[end + 1..]),
        None => ("", prefix),
    };
    let tree = match folder {
        "" => root,
        folder => match crate::lookup::entry_at(repo, tip, folder)? {
            Some(entry) if entry.kind == EntryKind::Tree => entry.id,
            _ => return Ok(0),
        },
    };
    if start.is_empty() {
        return count_files(repo, tree);
    }
    let mut total = 0;
    for entry in entries(repo, tree, |name| name.starts_with(start))? {
        total += match entry.is_tree {
            true => count_files(repo, entry.id)?,
            false => 1,
        };
    }
    Ok(total)
}

/// An entry of a tree, as a listing needs it.
struct TreeEntry {
    is_tree: bool,
    is_blob: bool,
    id: ObjectId,
}

/// The entries of `tree` whose (UTF-8) names `keep` accepts.
fn entries(
    repo: &gix::Repository,
    tree: ObjectId,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<TreeEntry>, StoreError> {
    let object = repo.find_tree(tree).map_err(internal("reading a tree"))?;
    let mut kept = Vec::new();
    for entry in gix::objs::TreeRefIter::from_bytes(&object.data, repo.object_hash()) {
        let entry = entry.map_err(internal("decoding a tree"))?;
        match std::str::from_utf8(entry.filename) {
            Ok(name) if keep(name) => kept.push(TreeEntry {
                is_tree: entry.mode.is_tree(),
                is_blob: entry.mode.is_blob(),
                id: entry.oid.to_owned(),
            }),
            _ => {}
        }
    }
    Ok(kept)
}

/// Trees whose file counts are kept at most (a count is 40 bytes; beyond this, all are dropped).
const MAX_COUNTED_TREES: usize = 200_000;

fn counts() -> &'static Mutex<HashMap<ObjectId, usize>> {
    static COUNTS: OnceLock<Mutex<HashMap<ObjectId, usize>>> = OnceLock::new();
    COUNTS.get_or_init(Default::default)
}

/// The files in `tree` and all its folders, counted once per tree id in this process.
fn count_files(repo: &gix::Repository, tree: ObjectId) -> Result<usize, StoreError> {
    if let Some(count) = counts().lock().ok().and_then(|c| c.get(&tree).copied()) {
        return Ok(count);
    }
    let mut count = 0;
    for entry in entries(repo, tree, |_| true)? {
        if entry.is_tree {
            count += count_files(repo, entry.id)?;
        } else if entry.is_blob {
            count += 1;
        }
    }
    if let Ok(mut counts) = counts().lock() {
        if counts.len() >= MAX_COUNTED_TREES {
            counts.clear();
        }
        counts.insert(tree, count);
    }
    Ok(count)
}

/// The last commit of the first-parent history of `tip` that changed each of `files` (path and
/// blob at the tip), walking back only until every one of them is found.
fn last_changes(
    repo: &gix::Repository,
    tip: ObjectId,
    files: &[(String, ObjectId)],
) -> Result<HashMap<String, ObjectId>, StoreError> {
    let mut open: HashSet<&str> = files.iter().map(|(path, _)| path.as_str()).collect();
    let mut found = HashMap::new();
    let mut newer: Option<(ObjectId, ObjectId)> = None;
    for entry in first_parent_commits(repo, tip)? {
        if open.is_empty() {
            break;
        }
        let (commit, tree) = entry?;
        if let Some((newer_commit, newer_tree)) = newer {
            let changed = changes(repo, newer_commit, Some(tree), newer_tree)?;
            open.retain(|path| {
                let hit = changed.contains(*path);
                if hit {
                    found.insert((*path).to_owned(), newer_commit);
                }
                !hit
            });
        }
        newer = Some((commit, tree));
    }
    // What no commit changed since the oldest one reached was written by it.
    if let Some((oldest, _)) = newer {
        for path in open {
            found.insert(path.to_owned(), oldest);
        }
    }
    Ok(found)
}

/// Paths the commits' changes are kept for at most (each path about 100 bytes; beyond this,
/// all are dropped).
const MAX_KEPT_CHANGES: usize = 1_000_000;

#[derive(Default)]
struct Changes {
    by_commit: HashMap<ObjectId, Arc<HashSet<String>>>,
    paths: usize,
}

fn kept_changes() -> &'static Mutex<Changes> {
    static CHANGES: OnceLock<Mutex<Changes>> = OnceLock::new();
    CHANGES.get_or_init(Default::default)
}

/// The files `commit` (whose tree is `tree`) changed, added or removed against its first parent
/// (whose tree is `parent`): kept by commit id in this process, since a commit and its first
/// parent never change.
fn changes(
    repo: &gix::Repository,
    commit: ObjectId,
    parent: Option<ObjectId>,
    tree: ObjectId,
) -> Result<Arc<HashSet<String>>, StoreError> {
    if let Some(kept) = kept_changes()
        .lock()
        .ok()
        .and_then(|c| c.by_commit.get(&commit).cloned())
    {
        return Ok(kept);
    }
    let mut changed = HashSet::new();
    diff(repo, parent, Some(tree), &mut String::new(), &mut changed)?;
    let changed = Arc::new(changed);
    if let Ok(mut kept) = kept_changes().lock() {
        if kept.paths + changed.len() > MAX_KEPT_CHANGES {
            *kept = Changes::default();
        }
        kept.paths += changed.len();
        kept.by_commit.insert(commit, changed.clone());
    }
    Ok(changed)
}

/// Adds to `out` the files (under `path`, ending in `/` or empty) that differ between the trees
/// `old` and `new` (`None`: no tree), reading both trees' entries side by side in git's order
/// and going into a folder only when its tree id differs.
fn diff(
    repo: &gix::Repository,
    old: Option<ObjectId>,
    new: Option<ObjectId>,
    path: &mut String,
    out: &mut HashSet<String>,
) -> Result<(), StoreError> {
    if old == new {
        return Ok(());
    }
    let read = |tree: Option<ObjectId>| -> Result<Vec<u8>, StoreError> {
        match tree {
            Some(id) => Ok(repo
                .find_tree(id)
                .map_err(internal("reading a tree"))?
                .detach()
                .data),
            None => Ok(Vec::new()),
        }
    };
    let (old_data, new_data) = (read(old)?, read(new)?);
    let hash = repo.object_hash();
    let mut olds = gix::objs::TreeRefIter::from_bytes(&old_data, hash).peekable();
    let mut news = gix::objs::TreeRefIter::from_bytes(&new_data, hash).peekable();
    let at = path.len();
    loop {
        let order = match (olds.peek(), news.peek()) {
            (None, None) => break,
            (Some(Err(_)), _) | (_, Some(Err(_))) => {
                return Err(StoreError::Internal("decoding a tree".into()))
            }
            (Some(Ok(_)), None) => Ordering::Less,
            (None, Some(Ok(_))) => Ordering::Greater,
            (Some(Ok(a)), Some(Ok(b))) => git_order(a, b),
        };
        let (a, b) = match order {
            Ordering::Less => (olds.next(), None),
            Ordering::Greater => (None, news.next()),
            Ordering::Equal => (olds.next(), news.next()),
        };
        let (a, b) = (a.and_then(Result::ok), b.and_then(Result::ok));
        let Some(name) = a.as_ref().or(b.as_ref()).map(|e| e.filename) else {
            break;
        };
        let Ok(name) = std::str::from_utf8(name) else {
            continue; // not a state path
        };
        if a.as_ref().map(|e| e.oid) == b.as_ref().map(|e| e.oid)
            && a.as_ref().map(|e| e.mode) == b.as_ref().map(|e| e.mode)
        {
            continue;
        }
        path.truncate(at);
        path.push_str(name);
        let tree_of = |e: &Option<gix::objs::tree::EntryRef<'_>>| {
            e.as_ref()
                .filter(|e| e.mode.is_tree())
                .map(|e| e.oid.to_owned())
        };
        let is_file = |e: &Option<gix::objs::tree::EntryRef<'_>>| {
            e.as_ref().is_some_and(|e| e.mode.is_blob())
        };
        if is_file(&a) || is_file(&b) {
            out.insert(path.clone());
        }
        let (old_tree, new_tree) = (tree_of(&a), tree_of(&b));
        if old_tree.is_some() || new_tree.is_some() {
            path.push('/');
            diff(repo, old_tree, new_tree, path, out)?;
        }
    }
    path.truncate(at);
    Ok(())
}

/// How git orders two entries of a tree: by name, a folder's name as if it ended in `/`.
fn git_order(a: &gix::objs::tree::EntryRef<'_>, b: &gix::objs::tree::EntryRef<'_>) -> Ordering {
    let key = |e: &gix::objs::tree::EntryRef<'_>, i: usize| -> Option<u8> {
        match e.filename.get(i) {
            Some(byte) => Some(*byte),
            None if i == e.filename.len() && e.mode.is_tree() => Some(b'/'),
            None => None,
        }
    };
    let longest = a.filename.len().max(b.filename.len()) + 1;
    for i in 0..longest {
        match (key(a, i), key(b, i)) {
            (Some(x), Some(y)) if x == y => continue,
            (x, y) => return x.cmp(&y),
        }
    }
    Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;
    use gix::objs::tree::EntryKind;

    /// A repository whose history writes `paths` one per commit (each file's content names the
    /// commit), then rewrites every third, removes the second and writes it back; returns it
    /// with the tip.
    fn history(paths: &[&str]) -> (tempfile::TempDir, gix::Repository, ObjectId) {
        let dir = tempfile::tempdir().unwrap();
        let repo = gix::init_bare(dir.path()).unwrap();
        let mut tree = repo.empty_tree().id;
        let mut parent: Option<ObjectId> = None;
        let signature = gix::actor::Signature {
            name: "t".into(),
            email: "t@t".into(),
            time: gix::date::Time::new(1_700_000_000, 0),
        };
        // Each path written, every third again, the second removed and written back.
        let writes = paths
            .iter()
            .map(|p| (*p, true))
            .chain(paths.iter().step_by(3).map(|p| (*p, true)))
            .chain([(paths[1], false), (paths[1], true)]);
        for (i, (path, write)) in writes.enumerate() {
            let blob = repo.write_blob(format!("{path} {i}")).unwrap().detach();
            let mut editor = repo.edit_tree(tree).unwrap();
            if write {
                editor.upsert(path, EntryKind::Blob, blob).unwrap();
            } else {
                editor.remove(path).unwrap();
            }
            tree = editor.write().unwrap().detach();
            let commit = gix::objs::Commit {
                tree,
                parents: parent.into_iter().collect(),
                author: signature.clone(),
                committer: signature.clone(),
                encoding: None,
                message: format!("write {i}").into(),
                extra_headers: Vec::new(),
            };
            parent = Some(repo.write_object(&commit).unwrap().detach());
        }
        (dir, repo, parent.unwrap())
    }

    /// Every file with its last change, the slow way: each path's own history.
    fn full_listing(repo: &gix::Repository, tip: ObjectId) -> Vec<StateListing> {
        let held = crate::history::held(repo);
        let mut all = page(repo, tip, &ListQuery::all(), &held).unwrap().states;
        for listing in &mut all {
            let versions = crate::history::versions(repo, tip, &listing.path, 1, &held).unwrap();
            assert_eq!(
                listing.last_change.as_ref().map(|v| &v.commit),
                versions.first().map(|v| &v.commit),
                "{}",
                listing.path
            );
            listing.last_change = versions.into_iter().next();
        }
        all
    }

    #[test]
    fn every_page_is_the_slice_of_the_whole_listing_the_query_names() {
        let paths = [
            "a.tfstate",
            "a/x.tfstate",
            "a/y/z.tfstate",
            "a-b.tfstate",
            "b/one.tfstate",
            "b/two.tfstate",
            "b/sub/deep.tfstate",
            "ba.tfstate",
            "c.tfstate",
        ];
        let (_dir, repo, tip) = history(&paths);
        let all = full_listing(&repo, tip);
        assert_eq!(all.len(), paths.len());
        let sorted: Vec<&str> = all.iter().map(|s| s.path.as_str()).collect();
        let mut expected = sorted.clone();
        expected.sort();
        assert_eq!(sorted, expected, "the walk lists in path order");
        for prefix in [
            "",
            "a",
            "a/",
            "a/y",
            "b/",
            "b/s",
            "ba",
            "c.tfstate",
            "d",
            "b/sub/",
        ] {
            for limit in [1, 2, 3, 100] {
                let mut after: Option<String> = None;
                for _ in 0..20 {
                    let query = ListQuery {
                        prefix: prefix.into(),
                        after: after.clone(),
                        limit,
                    };
                    let got = page(&repo, tip, &query, &crate::history::held(&repo)).unwrap();
                    let want = StatePage::of_sorted(all.clone(), &query);
                    assert_eq!(
                        got, want,
                        "prefix {prefix:?}, after {after:?}, limit {limit}"
                    );
                    match got.next() {
                        Some(next) => after = Some(next.to_owned()),
                        None => break,
                    }
                }
            }
        }
    }
}
