//! Object plumbing shared by the stores: the one-file state commit, the lock commit, and reading a
//! file out of a commit. Works on any gix repository (on disk, or with in-memory objects).

use std::sync::Arc;

use bytes::Bytes;
use gitstate_core::Message;
use gitstate_core::{PathConflict, StateChange, StatePath, StoreError, TreeEntry};
use gix::bstr::BString;
use gix::objs::tree::EntryKind;
use gix::ObjectId;

use crate::signing::Signer;

/// Name and e-mail of every commit gitstate writes unless a repository names its own
/// [`Committer`].
pub const COMMITTER_NAME: &str = "gitstate";
/// See [`COMMITTER_NAME`].
pub const COMMITTER_EMAIL: &str = "gitstate@localhost";

/// Who writes the commits of a repository, as author and committer (`committer_name` and
/// `committer_email`, DESIGN §6): `gitstate <gitstate@localhost>` unless configured. The values
/// are checked where they are configured (no `<`, `>` or line break).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committer {
    /// The name.
    pub name: String,
    /// The e-mail address.
    pub email: String,
    /// The key that signs every commit (`signing_key`); unsigned when `None`.
    pub signer: Option<Arc<Signer>>,
}

impl Default for Committer {
    fn default() -> Self {
        Committer {
            name: COMMITTER_NAME.into(),
            email: COMMITTER_EMAIL.into(),
            signer: None,
        }
    }
}

impl Committer {
    /// This identity, now.
    pub(crate) fn signature(&self) -> gix::actor::Signature {
        self.signature_at(gix::date::Time::now_utc())
    }

    /// This identity, at `time`.
    fn signature_at(&self, time: gix::date::Time) -> gix::actor::Signature {
        gix::actor::Signature {
            name: self.name.as_str().into(),
            email: self.email.as_str().into(),
            time,
        }
    }

    /// Whether a commit this committer writes follows from its tree, parents, message and time
    /// alone: unsigned (a signature carries its own time).
    pub(crate) fn writes_predictable_commits(&self) -> bool {
        self.signer.is_none()
    }
}

pub(crate) use crate::errors::internal;

/// Parses a [`gitstate_core::Revision`] back into an object id.
pub(crate) fn parse_id(revision: &str) -> Result<ObjectId, StoreError> {
    ObjectId::from_hex(revision.as_bytes())
        .map_err(|e| StoreError::Internal(format!("'{revision}' is not an object id: {e}")))
}

/// Writes a commit of `tree` on `parent` (none: a root commit) with `committer` as author and
/// committer; returns its id.
pub(crate) fn commit_on(
    repo: &gix::Repository,
    tree: ObjectId,
    parent: Option<ObjectId>,
    message: &Message,
    committer: &Committer,
) -> Result<ObjectId, StoreError> {
    commit_at(
        repo,
        tree,
        parent,
        message,
        committer,
        gix::date::Time::now_utc(),
    )
}

/// [`commit_on`], dated `time`.
fn commit_at(
    repo: &gix::Repository,
    tree: ObjectId,
    parent: Option<ObjectId>,
    message: &Message,
    committer: &Committer,
    time: gix::date::Time,
) -> Result<ObjectId, StoreError> {
    let signature = committer.signature_at(time);
    let author = match &message.author {
        Some(author) => gix::actor::Signature {
            name: author.name.as_str().into(),
            email: author.email.as_str().into(),
            time: signature.time,
        },
        None => signature.clone(),
    };
    let mut commit = gix::objs::Commit {
        tree,
        parents: parent.into_iter().collect(),
        author,
        committer: signature,
        encoding: None,
        message: BString::from(message.text.as_str()),
        extra_headers: Vec::new(),
    };
    if let Some(signer) = &committer.signer {
        // What git verifies: the commit as written, without its `gpgsig` header (the only
        // extra header, so the payload is the unsigned commit's bytes).
        let mut payload = Vec::new();
        gix::objs::WriteTo::write_to(&commit, &mut payload)
            .map_err(internal("encoding a commit to sign"))?;
        let armored = signer.sign(&payload)?;
        commit
            .extra_headers
            .push((BString::from("gpgsig"), BString::from(armored)));
    }
    Ok(repo
        .write_object(&commit)
        .map_err(internal("writing a commit"))?
        .detach())
}

/// The tree of `commit`, or the empty tree when there is none.
fn tree_of(repo: &gix::Repository, commit: Option<ObjectId>) -> Result<ObjectId, StoreError> {
    match commit {
        Some(id) => Ok(repo
            .find_commit(id)
            .map_err(internal("reading the base commit"))?
            .tree_id()
            .map_err(internal("reading the base tree"))?
            .detach()),
        None => Ok(ObjectId::empty_tree(repo.object_hash())),
    }
}

/// What keeps a state out of `path` at `commit` ([`PathConflict::in_tree`]: a folder of it is a
/// file, or it is a folder). Reads the trees on the path, which must be in `repo`; never a blob.
pub fn path_conflict(
    repo: &gix::Repository,
    commit: ObjectId,
    path: &StatePath,
) -> Result<Option<PathConflict>, StoreError> {
    PathConflict::in_tree(path, |at| {
        Ok(crate::lookup::entry_at(repo, commit, at)?.map(|entry| {
            if entry.kind == EntryKind::Tree {
                TreeEntry::Folder
            } else {
                TreeEntry::File
            }
        }))
    })
}

/// Refuses a write that git would turn into a file/directory swap: `a/b` when `a` is a state
/// file, or `a` when `a/…` holds states. Tree editing would silently replace the other side.
fn check_no_directory_conflict(
    repo: &gix::Repository,
    base: Option<ObjectId>,
    path: &str,
) -> Result<(), StoreError> {
    let Some(base) = base else { return Ok(()) };
    let path = StatePath::parse_stored(path)
        .map_err(|e| StoreError::Internal(format!("writing the path {path}: {e}")))?;
    match path_conflict(repo, base, &path)? {
        Some(conflict) => Err(StoreError::Conflict(conflict.to_string())),
        None => Ok(()),
    }
}

/// What a commit does to its one path.
#[derive(Debug, Clone, Copy)]
pub enum FileChange<'a> {
    /// Add or replace the file with these bytes (written into the repository's store).
    Content(&'a [u8]),
    /// Add or replace the file with a blob the remote already holds, by id; the cache need not
    /// hold it (a pending write's blob, DESIGN §9.4).
    Blob(ObjectId),
    /// Remove the file.
    Remove,
    /// Remove the file and these others ([`StateChange::DeleteWith`]).
    RemoveWith(&'a [StatePath]),
}

impl<'a> From<&'a StateChange> for FileChange<'a> {
    fn from(change: &'a StateChange) -> Self {
        match change {
            StateChange::Write(content) => FileChange::Content(content),
            StateChange::Delete => FileChange::Remove,
            StateChange::DeleteWith(also) => FileChange::RemoveWith(also),
        }
    }
}

/// Writes the commit on top of `base` whose only change is `change` to `path`; returns its id.
pub fn state_commit(
    repo: &gix::Repository,
    base: Option<ObjectId>,
    path: &str,
    change: &StateChange,
    message: &Message,
    committer: &Committer,
) -> Result<ObjectId, StoreError> {
    file_commit(repo, base, path, change.into(), message, committer)
}

/// [`state_commit`] for any [`FileChange`].
pub fn file_commit(
    repo: &gix::Repository,
    base: Option<ObjectId>,
    path: &str,
    change: FileChange<'_>,
    message: &Message,
    committer: &Committer,
) -> Result<ObjectId, StoreError> {
    let base_tree = tree_of(repo, base)?;
    let root: gix::objs::Tree = repo
        .find_tree(base_tree)
        .map_err(internal("reading the base tree"))?
        .decode()
        .map_err(internal("decoding the base tree"))?
        .into();
    // gix's own tree editor (`Repository::edit_tree`) insists that every entry of every tree
    // it writes is in the object database. A partial cache (DESIGN §9) has the trees of its
    // tips but not the blobs of states nobody read here, and a commit that changes one file
    // needs none of them: edit with the object-level editor, which reads only the trees on the
    // changed path.
    let mut editor = gix::objs::tree::Editor::new(root, &repo.objects, repo.object_hash());
    let components = path.split('/');
    // A path that would swap a file and a directory is refused before anything is written.
    if !matches!(change, FileChange::Remove | FileChange::RemoveWith(_)) {
        check_no_directory_conflict(repo, base, path)?;
    }
    let blob = match change {
        FileChange::Content(content) => Some(
            repo.write_blob(content)
                .map_err(internal("writing the state blob"))?
                .detach(),
        ),
        FileChange::Blob(blob) => Some(blob),
        FileChange::Remove | FileChange::RemoveWith(_) => None,
    };
    if let FileChange::RemoveWith(also) = change {
        for other in also {
            editor
                .remove(other.as_str().split('/'))
                .map_err(internal("editing the tree"))?;
        }
    }
    match blob {
        Some(blob) => editor.upsert(components, EntryKind::Blob, blob),
        None => editor.remove(components),
    }
    .map_err(internal("editing the tree"))?;
    let tree = editor
        .write(|tree| repo.write_object(tree).map(gix::Id::detach))
        .map_err(internal("writing the tree"))?;
    commit_on(repo, tree, base, message, committer)
}

/// Writes a root commit holding only `{lock_file}` = `content`, dated its LockInfo's `Created`
/// (the epoch when that is no time); returns its id. Unsigned, the commit follows from the path,
/// the content, the message and the committer alone, so that the holder's UNLOCK can name it
/// without reading it (DESIGN §3, [`gitstate_core::Intent::ReleaseExpecting`]).
pub fn lock_commit(
    repo: &gix::Repository,
    lock_file: &str,
    content: &[u8],
    message: &Message,
    committer: &Committer,
) -> Result<ObjectId, StoreError> {
    let blob = repo
        .write_blob(content)
        .map_err(internal("writing the lock blob"))?
        .detach();
    let mut editor = repo
        .edit_tree(ObjectId::empty_tree(repo.object_hash()))
        .map_err(internal("editing the tree"))?;
    editor
        .upsert(lock_file, EntryKind::Blob, blob)
        .map_err(internal("editing the tree"))?;
    let tree = editor
        .write()
        .map_err(internal("writing the tree"))?
        .detach();
    let created = gitstate_core::LockInfo::stored(content).created;
    let time = gix::date::Time {
        seconds: gitstate_core::time::parse_rfc3339(&created).unwrap_or(0),
        offset: 0,
    };
    commit_at(repo, tree, None, message, committer, time)
}

/// The id of the entry at `path` in `commit`'s tree (a file, or a directory), or `None` when
/// there is none.
pub fn entry_id(
    repo: &gix::Repository,
    commit: ObjectId,
    path: &str,
) -> Result<Option<ObjectId>, StoreError> {
    Ok(crate::lookup::entry_at(repo, commit, path)?.map(|entry| entry.id))
}

/// The id of the file (blob) at `path` in `commit`, or `None` when the path holds no file. Reads
/// only the commit and the trees on the path, never the blob.
pub fn file_id(
    repo: &gix::Repository,
    commit: ObjectId,
    path: &str,
) -> Result<Option<ObjectId>, StoreError> {
    let entry = crate::lookup::entry_at(repo, commit, path)?;
    Ok(entry
        .filter(|e| matches!(e.kind, EntryKind::Blob | EntryKind::BlobExecutable))
        .map(|e| e.id))
}

/// The seal the lock commit `commit` records, as written ([`gitstate_core::LockToken`]); `None`
/// when it records none or the commit is not at hand.
pub fn lock_token_at(repo: &gix::Repository, commit: ObjectId) -> Option<String> {
    let commit = repo.find_commit(commit).ok()?;
    let message = commit.message_raw_sloppy();
    gitstate_core::LockToken::recorded(&String::from_utf8_lossy(message))
}

/// The blob at `path` in `commit`, or `None` when the path holds no file.
pub fn read_file(
    repo: &gix::Repository,
    commit: ObjectId,
    path: &str,
) -> Result<Option<Bytes>, StoreError> {
    let Some(id) = file_id(repo, commit, path)? else {
        return Ok(None);
    };
    let object = repo.find_object(id).map_err(internal("reading a blob"))?;
    Ok(Some(Bytes::from(object.detach().data)))
}
