//! The cross-process write queue on the remote (DESIGN §9.4): refs under
//! `refs/gitstate/queue/<branch>/`.
//!
//! - `pending/<id>`: a write waiting to be folded into the branch. It points at a *root* commit
//!   whose tree holds only the written file (an empty tree for a delete) and whose message is the
//!   write's own message followed by trailers naming its path, the conditions it was read under
//!   (the file's blob and the lock branch's tip) and its deadline. Creating it is a push with the
//!   all-zero old id: it never conflicts, and it carries only the write's own objects.
//! - `done/<id>`: the pending write was folded; points at its commit on the branch.
//! - `rejected/<id>`: its conditions did not hold (or it expired) when a leader came to it;
//!   points at the pending commit.
//!
//! An id is `<unix milliseconds, 13 digits>-<16 hex digits>`: sorting ids sorts by age. This
//! module only names, encodes and decodes; `batch` drives the queue.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use gitstate_core::{Author, Message, StateChange, StatePath, StoreError};
use gix::bstr::ByteSlice;
use gix::objs::tree::EntryKind;
use gix::ObjectId;

use crate::objects::internal;

/// Test hook of the crash tests (tests/tests/crash.rs): when the environment variable
/// `GITSTATE_TEST_CRASH_AT` is `step` (or `step@n`: the n-th time the process reaches it), the
/// process aborts there, as a container killed at that moment would. Steps: `queue.listed`,
/// `queue.fetched`, `queue.pushed`, `queue.published`, `queue.answered`.
pub(crate) fn crash_point(step: &str) {
    static AT: std::sync::OnceLock<Option<(String, u32)>> = std::sync::OnceLock::new();
    static HITS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let at = AT.get_or_init(|| {
        let value = std::env::var("GITSTATE_TEST_CRASH_AT").ok()?;
        Some(match value.split_once('@') {
            Some((step, n)) => (step.to_owned(), n.parse().unwrap_or(1)),
            None => (value, 1),
        })
    });
    let Some((at, nth)) = at else { return };
    if at == step && HITS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 >= *nth {
        eprintln!("GITSTATE_TEST_CRASH_AT={step}: the process aborts here");
        std::process::abort();
    }
}

/// Where every queue lives.
pub(crate) const QUEUE_ROOT: &str = "refs/gitstate/queue/";

/// A pending write whose deadline passed this long ago is rejected rather than folded (its
/// writer has answered 503 or is gone; clocks of processes may differ by this much).
pub(crate) const EXPIRY_SLACK: Duration = Duration::from_secs(60);
/// `done/` and `rejected/` refs older than this are deleted by the next leader (their writer
/// has long read them, or is gone).
pub(crate) const ANSWER_KEPT: Duration = Duration::from_secs(120);

const TRAILER_ID: &str = "Gitstate-Pending";
const TRAILER_PATH: &str = "Gitstate-Path";
const TRAILER_BASE: &str = "Gitstate-Base";
const TRAILER_LOCK: &str = "Gitstate-Lock";
const TRAILER_CHANGE: &str = "Gitstate-Change";
/// The other files a `delete-with` removes, space-separated (a state path holds no space).
const TRAILER_ALSO: &str = "Gitstate-Also-Remove";
const TRAILER_DEADLINE: &str = "Gitstate-Deadline";

/// The ref names of the queue of one branch.
#[derive(Debug, Clone)]
pub(crate) struct QueueRefs {
    root: String,
}

/// What a `refs/gitstate/queue/<branch>/…` ref is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Pending,
    Done,
    Rejected,
}

impl Kind {
    fn dir(self) -> &'static str {
        match self {
            Kind::Pending => "pending",
            Kind::Done => "done",
            Kind::Rejected => "rejected",
        }
    }
}

/// The queue refs found in an advertisement, by kind and id.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Pending writes, oldest first.
    pub pending: BTreeMap<String, ObjectId>,
    pub done: BTreeMap<String, ObjectId>,
    pub rejected: BTreeMap<String, ObjectId>,
}

impl QueueRefs {
    /// The queue of `state_ref` (`refs/heads/<branch>`).
    pub(crate) fn new(state_ref: &str) -> QueueRefs {
        let branch = state_ref.strip_prefix("refs/heads/").unwrap_or(state_ref);
        QueueRefs {
            root: format!("{QUEUE_ROOT}{branch}/"),
        }
    }

    /// The prefix of every ref of this queue.
    pub(crate) fn prefix(&self) -> &str {
        &self.root
    }

    /// The full name of `id` of `kind`.
    pub(crate) fn name(&self, kind: Kind, id: &str) -> String {
        format!("{}{}/{id}", self.root, kind.dir())
    }

    /// Sorts advertised refs of this queue by kind; names that are not exactly
    /// `<prefix><kind>/<id>` with a well-formed id (e.g. a longer branch name's queue) are
    /// ignored.
    pub(crate) fn classify<'a>(
        &self,
        refs: impl IntoIterator<Item = (&'a str, ObjectId)>,
    ) -> Listing {
        let mut listing = Listing::default();
        for (name, id) in refs {
            let Some(rest) = name.strip_prefix(&self.root) else {
                continue;
            };
            let Some((dir, write_id)) = rest.split_once('/') else {
                continue;
            };
            if parse_id_millis(write_id).is_none() {
                continue;
            }
            let map = match dir {
                "pending" => &mut listing.pending,
                "done" => &mut listing.done,
                "rejected" => &mut listing.rejected,
                _ => continue,
            };
            map.insert(write_id.to_owned(), id);
        }
        listing
    }
}

/// A new id: now, and 64 random bits.
pub(crate) fn new_id() -> String {
    use rand::Rng;
    let millis = unix_millis(SystemTime::now());
    format!("{millis:013}-{:016x}", rand::rng().random::<u64>())
}

/// The time an id was made (milliseconds since the epoch), or `None` when `id` is malformed.
pub(crate) fn parse_id_millis(id: &str) -> Option<u64> {
    let (millis, random) = id.split_once('-')?;
    if millis.len() != 13
        || random.len() != 16
        || !millis.bytes().all(|b| b.is_ascii_digit())
        || !random
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    millis.parse().ok()
}

/// Whether the id was made more than `age` ago (a malformed id counts as old).
pub(crate) fn older_than(id: &str, age: Duration) -> bool {
    let now = unix_millis(SystemTime::now());
    parse_id_millis(id).is_none_or(|made| now.saturating_sub(made) > age.as_millis() as u64)
}

pub(crate) fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A write as carried by a pending ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PendingWrite {
    pub id: String,
    pub path: StatePath,
    /// The blob at `path` the write read (`None`: absent).
    pub base_file: Option<ObjectId>,
    /// The lock branch tip the write read (`None`: unlocked).
    pub lock_tip: Option<ObjectId>,
    /// `Some(blob)`: write that blob; `None`: delete the file.
    pub blob: Option<ObjectId>,
    /// Other files the delete removes in the same commit ([`StateChange::DeleteWith`]).
    pub also_remove: Vec<StatePath>,
    /// The write's commit message (without the trailers) and author (the pending commit's).
    pub message: Message,
    /// Past it (plus [`EXPIRY_SLACK`]) the write is not folded any more.
    pub deadline_millis: u64,
}

/// What a pending commit says about its write.
pub(crate) struct Publication<'a> {
    pub id: &'a str,
    pub path: &'a StatePath,
    pub base_file: Option<ObjectId>,
    pub lock_tip: Option<ObjectId>,
    pub change: &'a StateChange,
    pub message: &'a Message,
    pub deadline: SystemTime,
}

fn optional_id(id: Option<ObjectId>) -> String {
    id.map_or_else(|| "none".to_owned(), |id| id.to_string())
}

/// Writes the pending (root) commit of `write` into `repo`; returns its id.
pub(crate) fn pending_commit(
    repo: &gix::Repository,
    write: &Publication<'_>,
    committer: &crate::objects::Committer,
) -> Result<ObjectId, StoreError> {
    let empty = gix::objs::Tree::empty();
    let mut editor = gix::objs::tree::Editor::new(empty, &repo.objects, repo.object_hash());
    let change = match write.change {
        StateChange::Write(content) => {
            let blob = repo
                .write_blob(content)
                .map_err(internal("writing the state blob"))?
                .detach();
            editor
                .upsert(write.path.as_str().split('/'), EntryKind::Blob, blob)
                .map_err(internal("editing the tree"))?;
            "write"
        }
        StateChange::Delete => "delete",
        // An older process does not know this change and rejects the write rather than fold
        // half of it.
        StateChange::DeleteWith(_) => "delete-with",
    };
    let also = match write.change {
        StateChange::DeleteWith(also) => format!(
            "{TRAILER_ALSO}: {}\n",
            also.iter()
                .map(StatePath::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        ),
        _ => String::new(),
    };
    let tree = editor
        .write(|tree| repo.write_object(tree).map(gix::Id::detach))
        .map_err(internal("writing the tree"))?;
    let text = format!(
        "{}\n\n{TRAILER_ID}: {}\n{TRAILER_PATH}: {}\n{TRAILER_BASE}: {}\n{TRAILER_LOCK}: {}\n{TRAILER_CHANGE}: {change}\n{also}{TRAILER_DEADLINE}: {}\n",
        write.message.text.trim_end(),
        write.id,
        write.path,
        optional_id(write.base_file),
        optional_id(write.lock_tip),
        unix_millis(write.deadline),
    );
    let message = Message {
        text,
        author: write.message.author.clone(),
    };
    crate::objects::commit_on(repo, tree, None, &message, committer)
}

/// Reads the pending commit `commit` (in `repo`) advertised as `id`. `Err` with a sentence when
/// it is not a well-formed pending write of that id: such a ref is rejected, never folded.
pub(crate) fn read_pending(
    repo: &gix::Repository,
    id: &str,
    commit: ObjectId,
) -> Result<PendingWrite, String> {
    let object = repo
        .find_commit(commit)
        .map_err(|e| format!("the pending commit {commit} cannot be read: {e}"))?;
    let decoded = object
        .decode()
        .map_err(|e| format!("the pending commit {commit} cannot be decoded: {e}"))?;
    if decoded.parents().next().is_some() {
        return Err(format!("the pending commit {commit} is not a root commit"));
    }
    let tree = decoded.tree();
    // Folded as it was published: the pending commit's author is the write's.
    let author = decoded
        .author()
        .map_err(|e| format!("the pending commit {commit} has a malformed author: {e}"))?;
    let text = decoded
        .message
        .to_str()
        .map_err(|_| format!("the message of the pending commit {commit} is not UTF-8"))?;
    let (message, trailers) = text
        .trim_end()
        .rsplit_once("\n\n")
        .ok_or_else(|| format!("the pending commit {commit} has no trailers"))?;
    let fields = trailer_fields(trailers, commit)?;
    let field = |key: &str| {
        fields
            .get(key)
            .copied()
            .ok_or_else(|| format!("the pending commit {commit} lacks the trailer {key}"))
    };
    let object_id = |key: &str| -> Result<Option<ObjectId>, String> {
        match field(key)? {
            "none" => Ok(None),
            hex => ObjectId::from_hex(hex.as_bytes()).map(Some).map_err(|_| {
                format!("the trailer {key} of the pending commit {commit} is not an object id")
            }),
        }
    };
    if field(TRAILER_ID)? != id {
        return Err(format!(
            "the pending commit {commit} names another write than its ref"
        ));
    }
    let path = StatePath::parse_stored(field(TRAILER_PATH)?)
        .map_err(|e| format!("the pending commit {commit} names a bad path: {e}"))?;
    let deadline_millis = field(TRAILER_DEADLINE)?
        .parse::<u64>()
        .map_err(|_| format!("the pending commit {commit} has a malformed deadline"))?;
    let mut also_remove = Vec::new();
    let blob = match field(TRAILER_CHANGE)? {
        "write" => Some(file_in(repo, tree, &path, commit)?),
        "delete" => None,
        "delete-with" => {
            for other in field(TRAILER_ALSO)?.split(' ') {
                also_remove.push(StatePath::parse_stored(other).map_err(|e| {
                    format!("the pending commit {commit} names a bad path to remove: {e}")
                })?);
            }
            None
        }
        _ => {
            return Err(format!(
                "the pending commit {commit} names an unknown change"
            ))
        }
    };
    Ok(PendingWrite {
        id: id.to_owned(),
        path,
        base_file: object_id(TRAILER_BASE)?,
        lock_tip: object_id(TRAILER_LOCK)?,
        blob,
        also_remove,
        message: Message {
            text: message.to_owned(),
            author: Some(Author {
                name: author.name.to_string(),
                email: author.email.to_string(),
            }),
        },
        deadline_millis,
    })
}

/// The trailers of a pending commit's message, each key once.
fn trailer_fields(trailers: &str, commit: ObjectId) -> Result<BTreeMap<&str, &str>, String> {
    let mut fields = BTreeMap::new();
    for line in trailers.lines() {
        let (key, value) = line
            .split_once(": ")
            .ok_or_else(|| format!("the pending commit {commit} has a malformed trailer"))?;
        if fields.insert(key, value).is_some() {
            return Err(format!(
                "the pending commit {commit} repeats the trailer {key}"
            ));
        }
    }
    Ok(fields)
}

/// The blob at `path` in the pending commit `commit`'s `tree`.
fn file_in(
    repo: &gix::Repository,
    tree: ObjectId,
    path: &StatePath,
    commit: ObjectId,
) -> Result<ObjectId, String> {
    let unreadable = |e: &dyn std::fmt::Display| {
        format!("the tree of the pending commit {commit} cannot be read: {e}")
    };
    repo.find_tree(tree)
        .map_err(|e| unreadable(&e))?
        .lookup_entry_by_path(path.as_str())
        .map_err(|e| unreadable(&e))?
        .filter(|e| e.mode().is_blob())
        .map(|e| e.object_id())
        .ok_or_else(|| format!("the pending commit {commit} holds no file at its path"))
}

/// Whether `write` expired (its deadline plus [`EXPIRY_SLACK`] is past).
pub(crate) fn expired(write: &PendingWrite) -> bool {
    unix_millis(SystemTime::now()) > write.deadline_millis + EXPIRY_SLACK.as_millis() as u64
}

/// The message bytes of a commit, for tests.
#[cfg(test)]
fn message_of(repo: &gix::Repository, commit: ObjectId) -> gix::bstr::BString {
    repo.find_commit(commit)
        .unwrap()
        .message_raw_sloppy()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, gix::Repository) {
        let dir = tempfile::tempdir().unwrap();
        let repo = gix::init_bare(dir.path()).unwrap();
        (dir, repo)
    }

    #[test]
    fn ids_sort_by_age_and_parse_back() {
        let a = new_id();
        std::thread::sleep(Duration::from_millis(2));
        let b = new_id();
        assert!(a < b, "{a} < {b}");
        assert!(parse_id_millis(&a).is_some());
        for bad in [
            "",
            "1-2",
            "123456789012-0123456789abcdef",
            "1234567890123-0123456789ABCDEF",
            "1234567890123-0123456789abcdef/x",
        ] {
            assert_eq!(parse_id_millis(bad), None, "{bad}");
        }
        assert!(!older_than(&a, Duration::from_secs(10)));
        assert!(older_than(
            "0000000000001-0123456789abcdef",
            Duration::from_secs(10)
        ));
    }

    #[test]
    fn classify_keeps_only_this_branchs_well_formed_refs() {
        let refs = QueueRefs::new("refs/heads/main");
        let id = ObjectId::null(gix::hash::Kind::Sha1);
        let good = "1700000000000-0123456789abcdef";
        let names = [
            format!("refs/gitstate/queue/main/pending/{good}"),
            format!("refs/gitstate/queue/main/done/{good}"),
            format!("refs/gitstate/queue/main/rejected/{good}"),
            format!("refs/gitstate/queue/main/pending/x/{good}"),
            format!("refs/gitstate/queue/main2/pending/{good}"),
            "refs/gitstate/queue/main/pending/nope".to_owned(),
            format!("refs/gitstate/queue/main/other/{good}"),
        ];
        let listing = refs.classify(names.iter().map(|n| (n.as_str(), id)));
        assert_eq!(listing.pending.len(), 1);
        assert_eq!(listing.done.len(), 1);
        assert_eq!(listing.rejected.len(), 1);
        assert_eq!(refs.name(Kind::Pending, good), names[0]);
    }

    #[test]
    fn a_pending_commit_round_trips() {
        let (_dir, repo) = repo();
        let path = StatePath::parse("team/a/terraform.tfstate").unwrap();
        let base = ObjectId::from_hex(b"0123456789abcdef0123456789abcdef01234567").unwrap();
        let id = new_id();
        let change = StateChange::Write(bytes::Bytes::from_static(b"{\"serial\":2}"));
        let commit = pending_commit(
            &repo,
            &Publication {
                id: &id,
                path: &path,
                base_file: Some(base),
                lock_tip: None,
                change: &change,
                message: &Message::by(
                    "Update team/a/terraform.tfstate (serial 2) by x".into(),
                    "x@ci",
                ),
                deadline: SystemTime::now(),
            },
            &Default::default(),
        )
        .unwrap();
        let read = read_pending(&repo, &id, commit).unwrap();
        assert_eq!(read.path, path);
        assert_eq!(read.base_file, Some(base));
        assert_eq!(read.lock_tip, None);
        assert_eq!(
            read.message.text,
            "Update team/a/terraform.tfstate (serial 2) by x"
        );
        let author = read
            .message
            .author
            .clone()
            .expect("the pending commit's author");
        assert_eq!(
            (author.name.as_str(), author.email.as_str()),
            ("x@ci", "x@ci")
        );
        let blob = repo.find_object(read.blob.unwrap()).unwrap();
        assert_eq!(&blob.data[..], b"{\"serial\":2}");
        assert!(!expired(&read));
        assert!(
            read_pending(&repo, "1700000000000-0123456789abcdef", commit)
                .unwrap_err()
                .contains("another write")
        );

        let deleted = pending_commit(
            &repo,
            &Publication {
                id: &id,
                path: &path,
                base_file: Some(base),
                lock_tip: Some(base),
                change: &StateChange::Delete,
                message: &"Delete".into(),
                deadline: UNIX_EPOCH + Duration::from_secs(1),
            },
            &Default::default(),
        )
        .unwrap();
        let read = read_pending(&repo, &id, deleted).unwrap();
        assert_eq!(read.blob, None);
        assert!(read.also_remove.is_empty());
        let record = StatePath::parse_stored(".gitstate/workspaces/a.json").unwrap();
        let with_record = pending_commit(
            &repo,
            &Publication {
                id: &id,
                path: &path,
                base_file: Some(base),
                lock_tip: None,
                change: &StateChange::DeleteWith(vec![record.clone()]),
                message: &"Delete workspace a".into(),
                deadline: SystemTime::now(),
            },
            &Default::default(),
        )
        .unwrap();
        let with = read_pending(&repo, &id, with_record).unwrap();
        assert_eq!((with.blob, with.also_remove), (None, vec![record]));
        assert_eq!(read.lock_tip, Some(base));
        assert!(expired(&read));
        assert!(message_of(&repo, deleted).contains_str("Gitstate-Change: delete"));
    }

    #[test]
    fn a_forged_pending_commit_is_refused() {
        let (_dir, repo) = repo();
        let id = new_id();
        let tree = ObjectId::empty_tree(gix::hash::Kind::Sha1);
        for message in [
            "no trailers".to_owned(),
            format!("m\n\nGitstate-Pending: {id}\nGitstate-Path: ../x\nGitstate-Base: none\nGitstate-Lock: none\nGitstate-Change: delete\nGitstate-Deadline: 1"),
            format!("m\n\nGitstate-Pending: {id}\nGitstate-Path: a\nGitstate-Base: zz\nGitstate-Lock: none\nGitstate-Change: delete\nGitstate-Deadline: 1"),
            format!("m\n\nGitstate-Pending: {id}\nGitstate-Path: a\nGitstate-Base: none\nGitstate-Lock: none\nGitstate-Change: write\nGitstate-Deadline: 1"),
            format!("m\n\nGitstate-Pending: {id}\nGitstate-Path: a\nGitstate-Path: b\nGitstate-Base: none\nGitstate-Lock: none\nGitstate-Change: delete\nGitstate-Deadline: 1"),
        ] {
            let commit =
                crate::objects::commit_on(&repo, tree, None, &gitstate_core::Message::from(message.as_str()), &Default::default())
                    .unwrap();
            assert!(read_pending(&repo, &id, commit).is_err(), "{message}");
        }
    }
}
