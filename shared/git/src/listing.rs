//! One page of the files on a state branch at its tip (issue 34, DESIGN §9.5), out of a full
//! repository (the local store's, the remote store's history cache).
//!
//! A page costs what the page holds, not what the repository holds:
//! - its files come from one walk of the trees in path order (git orders a tree's entries as
//!   their paths sort), skipping whole folders outside the prefix or before the cursor, and
//!   stopping one file past the page;
//! - the count under the prefix adds up per-tree counts kept by tree id (a tree never changes, so
//!   a count is never stale): after a write, only the trees on its path are counted again;
//! - the last change of each file of the page comes from the first-parent history, looking at
//!   the page's folders only, and stopping once every file of the page has its commit.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use gitstate_core::{ListQuery, StateListing, StatePage, StoreError, Version};
use gix::ObjectId;

use crate::errors::internal;
use crate::history::{blob_size, first_parent_commits, tree_of, version};

/// The page `query` asks for of the files at `tip` in `repo` (every object of the tip's trees
/// present), with the last commit of the first-parent history that changed each.
pub fn page(
    repo: &gix::Repository,
    tip: ObjectId,
    query: &ListQuery,
) -> Result<StatePage, StoreError> {
    let root = tree_of(repo, tip)?;
    let mut files = Vec::new();
    let mut path = String::new();
    let more = walk(repo, root, &mut path, query, &mut files)?;
    let total = count_under(repo, root, &query.prefix)?;
    let changes = last_changes(repo, tip, &files)?;
    let mut versions: HashMap<ObjectId, Version> = HashMap::new();
    let mut states = Vec::with_capacity(files.len());
    for (path, blob) in files {
        let size = blob_size(repo, blob)?;
        let last_change = match changes.get(&path) {
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

/// Files under `prefix` at the tree `root`: the entries of the prefix's folder whose names
/// start with the rest of it, each file counting one and each folder its files.
fn count_under(repo: &gix::Repository, root: ObjectId, prefix: &str) -> Result<usize, StoreError> {
    let (folder, start) = match prefix.rfind('/') {
        Some(end) => (&prefix[..end], &prefix[end + 1..]),
        None => ("", prefix),
    };
    let mut tree = root;
    for segment in folder.split('/').filter(|s| !s.is_empty()) {
        match entries(repo, tree, |name| name == segment)?
            .into_iter()
            .find(|e| e.is_tree)
        {
            Some(entry) => tree = entry.id,
            None => return Ok(0),
        }
    }
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
struct Entry {
    is_tree: bool,
    is_blob: bool,
    id: ObjectId,
}

/// The entries of `tree` whose (UTF-8) names `keep` accepts.
fn entries(
    repo: &gix::Repository,
    tree: ObjectId,
    keep: impl Fn(&str) -> bool,
) -> Result<Vec<Entry>, StoreError> {
    let object = repo.find_tree(tree).map_err(internal("reading a tree"))?;
    let mut kept = Vec::new();
    for entry in gix::objs::TreeRefIter::from_bytes(&object.data, repo.object_hash()) {
        let entry = entry.map_err(internal("decoding a tree"))?;
        match std::str::from_utf8(entry.filename) {
            Ok(name) if keep(name) => kept.push(Entry {
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
/// blob at the tip), looking only at the folders that hold them.
fn last_changes(
    repo: &gix::Repository,
    tip: ObjectId,
    files: &[(String, ObjectId)],
) -> Result<HashMap<String, ObjectId>, StoreError> {
    // Folder → (file name → blob at the newer commit), for the files still looked for.
    let mut open: BTreeMap<&str, BTreeMap<&str, ObjectId>> = BTreeMap::new();
    for (path, blob) in files {
        let (folder, name) = path.rsplit_once('/').unwrap_or(("", path));
        open.entry(folder).or_default().insert(name, *blob);
    }
    let mut found = HashMap::new();
    let mut newer: Option<(ObjectId, HashMap<&str, Option<ObjectId>>)> = None;
    for entry in first_parent_commits(repo, tip)? {
        if open.is_empty() {
            break;
        }
        let (commit, root) = entry?;
        let folders = folder_trees(repo, root, open.keys().copied())?;
        if let Some((newer_commit, newer_folders)) = &newer {
            for (folder, names) in open.iter_mut() {
                let tree = folders.get(folder).copied().flatten();
                if tree == newer_folders.get(folder).copied().flatten() {
                    continue; // the folder did not change
                }
                let blobs = match tree {
                    Some(tree) => blobs_named(repo, tree, names)?,
                    None => HashMap::new(),
                };
                names.retain(|name, blob| {
                    let changed = blobs.get(name) != Some(blob);
                    if changed {
                        let path = match folder.is_empty() {
                            true => (*name).to_owned(),
                            false => format!("{folder}/{name}"),
                        };
                        found.insert(path, *newer_commit);
                    }
                    !changed
                });
            }
            open.retain(|_, names| !names.is_empty());
        }
        newer = Some((commit, folders));
    }
    // What no commit changed since the oldest one reached was written by it.
    if let Some((oldest, _)) = newer {
        for (folder, names) in open {
            for name in names.keys() {
                let path = match folder.is_empty() {
                    true => (*name).to_owned(),
                    false => format!("{folder}/{name}"),
                };
                found.insert(path, oldest);
            }
        }
    }
    Ok(found)
}

/// The tree of each of `folders` (paths without a trailing `/`, `""` for the root) under
/// `root`, `None` where there is none.
fn folder_trees<'f>(
    repo: &gix::Repository,
    root: ObjectId,
    folders: impl Iterator<Item = &'f str>,
) -> Result<HashMap<&'f str, Option<ObjectId>>, StoreError> {
    let mut trees = HashMap::new();
    for folder in folders {
        let mut tree = Some(root);
        for segment in folder.split('/').filter(|s| !s.is_empty()) {
            let Some(parent) = tree else { break };
            tree = entries(repo, parent, |name| name == segment)?
                .into_iter()
                .find(|e| e.is_tree)
                .map(|e| e.id);
        }
        trees.insert(folder, tree);
    }
    Ok(trees)
}

/// The blobs of the files `names` in the folder `tree`, reading its entries only as far as the
/// last name (entries are sorted).
fn blobs_named<'n>(
    repo: &gix::Repository,
    tree: ObjectId,
    names: &BTreeMap<&'n str, ObjectId>,
) -> Result<HashMap<&'n str, ObjectId>, StoreError> {
    let Some(last) = names.keys().next_back() else {
        return Ok(HashMap::new());
    };
    let object = repo.find_tree(tree).map_err(internal("reading a tree"))?;
    let mut blobs = HashMap::new();
    for entry in gix::objs::TreeRefIter::from_bytes(&object.data, repo.object_hash()) {
        let entry = entry.map_err(internal("decoding a tree"))?;
        // An entry sorts by its name, a folder's with a `/` after it: past the last name, no
        // file of the page can follow.
        if entry.filename > last.as_bytes() {
            break;
        }
        if !entry.mode.is_blob() {
            continue;
        }
        if let Ok(name) = std::str::from_utf8(entry.filename) {
            if let Some((kept, _)) = names.get_key_value(name) {
                blobs.insert(*kept, entry.oid.to_owned());
            }
        }
    }
    Ok(blobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gix::objs::tree::EntryKind;

    /// A repository whose history writes `paths` one per commit (each file's content names the
    /// commit), then rewrites every third; returns it with the tip.
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
        let writes = paths.iter().chain(paths.iter().step_by(3));
        for (i, path) in writes.enumerate() {
            let blob = repo.write_blob(format!("{path} {i}")).unwrap().detach();
            let mut editor = repo.edit_tree(tree).unwrap();
            editor.upsert(*path, EntryKind::Blob, blob).unwrap();
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
        let mut all = page(repo, tip, &ListQuery::all()).unwrap().states;
        for listing in &mut all {
            let versions = crate::history::versions(repo, tip, &listing.path, 1).unwrap();
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
                    let got = page(&repo, tip, &query).unwrap();
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
