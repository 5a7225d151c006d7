//! The protocol rules of [`Backend`], each against the in-memory fakes of the ports
//! ([`crate::fakes`]): what a Terraform client sees (the answer) and what the repository holds
//! afterwards (the commits).

use std::time::Duration;

use super::*;
use crate::fakes::{MemoryOpener, MemorySealer, MemoryStore, FAKE_SEAL_PREFIX};
use crate::lock::{Unlock, Unlocked};
use crate::lock_token::LockToken;

const P: &str = "team/app.tfstate";

/// A POST as the HTTP layer makes it: the body's one check, then the write.
trait PostBody {
    async fn post_body(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        body: Bytes,
        lock_id: Option<&str>,
        caller: &Caller,
    ) -> Result<Option<Written>, BackendError>;
}

impl PostBody for Backend {
    async fn post_body(
        &self,
        store: &dyn StateStore,
        path: &StatePath,
        body: Bytes,
        lock_id: Option<&str>,
        caller: &Caller,
    ) -> Result<Option<Written>, BackendError> {
        let state = self.check(body, false)?;
        self.post(store, path, &state, lock_id, caller).await
    }
}

fn path() -> StatePath {
    StatePath::parse(P).expect("a valid path")
}

fn state(serial: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"version":4,"serial":{serial},"lineage":"l-1","outputs":{{}},"resources":[]}}"#
    ))
}

fn lock_info(id: &str, who: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"ID":"{id}","Operation":"OperationTypeApply","Info":"","Who":"{who}","Version":"1.11.4","Created":"2026-11-23T10:00:00Z","Path":""}}"#
    ))
}

/// Fast retries, so the contention tests take milliseconds.
fn backend() -> Backend {
    Backend {
        retry: RetryPolicy {
            attempts: 400,
            budget: Duration::from_secs(5),
            base_delay: Duration::from_micros(100),
            max_delay: Duration::from_millis(1),
        },
        ..Backend::default()
    }
}

fn sealing(sealer: Arc<MemorySealer>) -> Backend {
    Backend {
        sealer: Some(sealer),
        ..backend()
    }
}

/// An empty store, a sealer, and a backend sealing with it.
fn sealing_store() -> (Arc<MemoryStore>, Arc<MemorySealer>, Backend) {
    let sealer = MemorySealer::new();
    (MemoryStore::named("r"), sealer.clone(), sealing(sealer))
}

/// A store whose state is locked by `id-1` (bob@ci), and the backend that locked it.
async fn locked_by_bob() -> (Arc<MemoryStore>, Backend) {
    let store = MemoryStore::named("r");
    let b = backend();
    b.lock(&*store, &path(), lock_info("id-1", "bob@ci"), None)
        .await
        .expect("lock");
    (store, b)
}

/// An UNLOCK body as the protocol reads it.
fn unlock(body: impl AsRef<[u8]>) -> Unlock {
    Unlock::parse(body.as_ref()).expect("an UNLOCK body")
}

fn alice() -> Caller {
    Caller {
        name: "alice".into(),
        deadline: None,
        force: false,
        token: None,
        sealed_by: None,
    }
}

#[tokio::test]
async fn get_answers_what_was_posted_and_nothing_before() {
    let store = MemoryStore::named("r");
    let b = backend();
    assert_eq!(b.get(&*store, &path(), None).await, Ok(None));
    b.post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("post");
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(state(1))));
}

#[tokio::test]
async fn a_post_is_one_commit_naming_the_serial_and_the_caller() {
    let store = MemoryStore::named("r");
    let written = backend()
        .post_body(&*store, &path(), state(7), None, &alice())
        .await
        .expect("post")
        .expect("a commit");
    let commits = store.commits_of(P);
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].id, written.commit);
    assert_eq!(
        commits[0].message,
        format!("Update {P} (serial 7) by alice")
    );
    assert_eq!(commits[0].content, Some(state(7)));
    assert_eq!(
        commits[0].author.as_deref(),
        Some("alice"),
        "the author is the caller"
    );
    let anonymous = backend()
        .post_body(&*store, &path(), state(8), None, &Caller::default())
        .await
        .expect("post")
        .expect("a commit");
    assert_eq!(anonymous.who, "anonymous");
    assert_eq!(
        store.commits_of(P)[1].author,
        None,
        "without a caller the committer is the author"
    );
}

#[tokio::test]
async fn a_replayed_post_or_delete_makes_no_commit() {
    let store = MemoryStore::named("r");
    let b = backend();
    b.post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("post");
    assert_eq!(
        b.post_body(&*store, &path(), state(1), None, &alice())
            .await,
        Ok(None),
        "the same body again (a client retry) is a success without a commit"
    );
    b.delete(&*store, &path(), None, &alice())
        .await
        .expect("delete")
        .expect("a commit");
    assert_eq!(b.delete(&*store, &path(), None, &alice()).await, Ok(None));
    let messages: Vec<_> = store.commits_of(P).into_iter().map(|c| c.message).collect();
    assert_eq!(
        messages,
        [
            format!("Update {P} (serial 1) by alice"),
            format!("Delete {P} by alice")
        ]
    );
    assert_eq!(store.file(P), None);
}

#[tokio::test]
async fn bad_bodies_are_refused_and_write_nothing() {
    let store = MemoryStore::named("r");
    let small = Backend {
        max_state_bytes: 16,
        size_advice: Some("use the standalone server".into()),
        ..backend()
    };
    match small
        .post_body(&*store, &path(), state(1), None, &alice())
        .await
    {
        Err(e @ BackendError::TooLarge { .. }) => {
            assert!(
                e.to_string().ends_with("; use the standalone server"),
                "{e}"
            )
        }
        other => panic!("expected 413, got {other:?}"),
    }
    for body in ["", "[]", r#"{"serial":1}"#, "{\"version\":4"] {
        assert!(
            matches!(
                backend()
                    .post_body(&*store, &path(), Bytes::from(body), None, &alice())
                    .await,
                Err(BackendError::BadRequest(_))
            ),
            "{body:?}"
        );
    }
    assert!(store.commits().is_empty());
    assert_eq!(
        store.attempts(),
        0,
        "nothing reached the store's write path"
    );
}

#[tokio::test]
async fn a_locked_state_is_written_only_with_the_holders_id() {
    let (store, b) = locked_by_bob().await;
    for wrong in [None, Some("id-2"), Some("")] {
        assert_eq!(
            b.post_body(&*store, &path(), state(1), wrong, &alice())
                .await,
            Err(BackendError::Locked(lock_info("id-1", "bob@ci"))),
            "lock id {wrong:?}: 423 with the holder's LockInfo as stored"
        );
        assert_eq!(
            b.delete(&*store, &path(), wrong, &alice()).await,
            Err(BackendError::Locked(lock_info("id-1", "bob@ci")))
        );
    }
    assert!(store.commits().is_empty());
    let written = b
        .post_body(&*store, &path(), state(1), Some("id-1"), &alice())
        .await
        .expect("post")
        .expect("a commit");
    assert_eq!(written.who, "bob@ci", "the commit names the lock holder");
    assert_eq!(
        store.commits_of(P)[0].message,
        format!("Update {P} (serial 1) by bob@ci")
    );
    assert_eq!(
        store.commits_of(P)[0].author.as_deref(),
        Some("bob@ci"),
        "and is authored by the lock holder"
    );
}

#[tokio::test]
async fn a_lock_file_that_is_not_lockinfo_blocks_every_writer() {
    let store = MemoryStore::named("r");
    store.plant_lock(P, b"locked by hand");
    assert_eq!(
        backend()
            .post_body(&*store, &path(), state(1), Some("anything"), &alice())
            .await,
        Err(BackendError::Locked(Bytes::from("locked by hand")))
    );
    assert!(store.commits().is_empty());
}

#[tokio::test]
async fn locking_is_idempotent_for_the_holder_and_reports_it_to_others() {
    let (store, b) = locked_by_bob().await;
    b.lock(&*store, &path(), lock_info("id-1", "bob@ci"), None)
        .await
        .expect("the holder locking again (a client retry) succeeds");
    assert_eq!(
        b.lock(&*store, &path(), lock_info("id-2", "eve@laptop"), None)
            .await,
        Err(BackendError::Locked(lock_info("id-1", "bob@ci")))
    );
    assert_eq!(store.lock_file(P), Some(lock_info("id-1", "bob@ci")));
    assert!(matches!(
        b.lock(&*store, &path(), Bytes::from(r#"{"Who":"x"}"#), None)
            .await,
        Err(BackendError::BadRequest(_))
    ));
}

/// A LOCK of a path where no state could ever be written is a 409 with the sentence naming what
/// is in the way, and takes no lock: a folder of the path is a state or locked, the path is a
/// folder of states or has locks under it. A path beside them (`prod-a` next to `prod`) locks.
/// A state written at a folder of a locked path after its LOCK is still refused at its POST.
#[tokio::test]
async fn a_lock_where_no_state_could_be_written_is_a_conflict_and_takes_nothing() {
    let store = MemoryStore::named("r");
    let b = backend();
    let at = |p: &str| StatePath::parse(p).expect("a valid path");
    store.plant("prod", &state(1));
    store.plant("other/x", &state(1));
    b.lock(&*store, &at("held"), lock_info("h", "bob@ci"), None)
        .await
        .expect("lock");
    let commits = store.commits().len();
    let cases = [
        ("prod/net", "prod is a state file"),
        ("other/x/y", "other/x is a state file"),
        ("other", "other is a directory of other states"),
        ("held/net", "held is locked"),
    ];
    for (path, why) in cases {
        match b
            .lock(&*store, &at(path), lock_info("id-2", "eve"), None)
            .await
        {
            Err(BackendError::Conflict(sentence)) => {
                assert!(sentence.contains(why), "{path}: {sentence}");
                assert!(
                    sentence.starts_with(&format!("the state path {path} ")),
                    "{sentence}"
                );
            }
            other => panic!("{path}: {other:?}"),
        }
        assert_eq!(store.lock_file(path), None, "{path}: no lock taken");
    }
    // The mirror image: a lock under the path.
    b.lock(&*store, &at("team/a/net"), lock_info("n", "bob@ci"), None)
        .await
        .expect("lock");
    assert_eq!(
        b.lock(&*store, &at("team/a"), lock_info("id-2", "eve"), None).await,
        Err(BackendError::Conflict(
            "the state path team/a cannot be created because team/a/net is locked, and its state would make team/a a directory".into()
        ))
    );
    assert_eq!(store.commits().len(), commits, "nothing written");
    for beside in ["prod-a", "other/y", "heldx"] {
        b.lock(&*store, &at(beside), lock_info("id-3", "eve"), None)
            .await
            .unwrap_or_else(|e| panic!("{beside}: {e}"));
    }

    // A state written at a folder of a held lock after it was taken: the POST is refused.
    b.lock(&*store, &at("late/net"), lock_info("id-4", "eve"), None)
        .await
        .expect("lock");
    store.plant("late", &state(1));
    let posted = b
        .post_body(&*store, &at("late/net"), state(1), Some("id-4"), &alice())
        .await;
    assert!(
        matches!(&posted, Err(BackendError::Store(StoreError::Conflict(s))) if s.contains("late is a state file")),
        "{posted:?}"
    );
}

/// `lock_ttl`: a lock older than the TTL (by its `Created`) is taken over by the next LOCK, which
/// says whose it was; a younger one, one whose `Created` cannot be read, or any lock on a
/// repository without a TTL, is a 423 as always.
#[tokio::test]
async fn a_lock_past_the_repositorys_ttl_is_taken_over_and_said_so() {
    let memory = MemoryStore::named("r");
    let b = backend();
    let store = crate::named_store::NamedStore::new("r", memory.clone())
        .with_lock_ttl(Some(Duration::from_secs(3600)));
    let at = |id: &str, who: &str, created: &str| {
        Bytes::from(format!(
            r#"{{"ID":"{id}","Operation":"OperationTypeApply","Who":"{who}","Created":"{created}"}}"#
        ))
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let rfc3339 = |secs: i64| crate::time::format_rfc3339(secs);

    // Younger than the TTL: 423 with the holder.
    let young = at("young", "bob@ci", &rfc3339(now - 60));
    b.lock(&store, &path(), young.clone(), None)
        .await
        .expect("lock");
    assert_eq!(
        b.lock(&store, &path(), lock_info("id-2", "eve@laptop"), None)
            .await,
        Err(BackendError::Locked(young.clone()))
    );
    // The same lock without a TTL is never taken over, however old.
    b.unlock(&store, &path(), &Unlock::Force, None)
        .await
        .expect("force-unlock");
    let old = at("old", "bob@ci", &rfc3339(now - 7200));
    b.lock(&store, &path(), old.clone(), None)
        .await
        .expect("lock");
    assert_eq!(
        b.lock(&*memory, &path(), lock_info("id-2", "eve@laptop"), None)
            .await,
        Err(BackendError::Locked(old.clone())),
        "no TTL: an old lock stays"
    );
    // Past the TTL: taken over.
    let acquired = b
        .lock(&store, &path(), lock_info("id-2", "eve@laptop"), None)
        .await
        .expect("an expired lock is taken over");
    let taken = acquired.took_over.expect("said so");
    assert_eq!((taken.id.as_str(), taken.who.as_str()), ("old", "bob@ci"));
    assert!((7200..7300).contains(&taken.age_secs), "{}", taken.age_secs);
    assert_eq!(memory.lock_file(P), Some(lock_info("id-2", "eve@laptop")));
    // Eve's retry of the same LOCK is the usual idempotent success, taking nothing over.
    let again = b
        .lock(&store, &path(), lock_info("id-2", "eve@laptop"), None)
        .await
        .expect("retry");
    assert_eq!(again.took_over, None);
    // A lock whose Created cannot be read never expires.
    b.unlock(&store, &path(), &Unlock::Force, None)
        .await
        .expect("force-unlock");
    let unreadable = at("hand", "ops", "sometime");
    b.lock(&store, &path(), unreadable.clone(), None)
        .await
        .expect("lock");
    assert_eq!(
        b.lock(&store, &path(), lock_info("id-3", "eve@laptop"), None)
            .await,
        Err(BackendError::Locked(unreadable))
    );
}

#[tokio::test]
async fn caller_chosen_lock_fields_stay_on_one_line_of_the_commit_message() {
    let store = MemoryStore::named("r");
    let b = backend();
    b.lock(
        &*store,
        &path(),
        lock_info("id\\n1", "bob\\nSigned-off-by: mallory"),
        None,
    )
    .await
    .expect("lock");
    let message = store.lock_message(P).expect("a lock commit");
    assert!(!message.contains('\n'), "{message:?}");
    assert!(message.starts_with(&format!("Lock {P}: OperationTypeApply by bob")));
    let written = b
        .post_body(&*store, &path(), state(1), Some("id\n1"), &alice())
        .await
        .expect("post")
        .expect("a commit");
    assert!(!written.who.contains('\n'), "{:?}", written.who);
    assert!(!store.commits_of(P)[0].message.contains('\n'));
}

#[tokio::test]
async fn unlock_needs_the_holders_id_unless_forced() {
    let store = MemoryStore::named("r");
    let b = backend();
    b.unlock(&*store, &path(), &unlock(lock_info("id-1", "bob@ci")), None)
        .await
        .expect("unlocking what is not locked succeeds");
    b.lock(&*store, &path(), lock_info("id-1", "bob@ci"), None)
        .await
        .expect("lock");
    assert_eq!(
        b.unlock(
            &*store,
            &path(),
            &unlock(lock_info("id-2", "eve@laptop")),
            None
        )
        .await,
        Err(BackendError::Locked(lock_info("id-1", "bob@ci")))
    );
    assert!(store.lock_file(P).is_some());
    let released = b
        .unlock(&*store, &path(), &unlock(lock_info("id-1", "bob@ci")), None)
        .await
        .expect("the holder unlocks");
    assert_eq!(store.lock_file(P), None);
    assert_eq!(
        released,
        Unlocked {
            force: false,
            who: Some("bob@ci".into()),
            released: true,
        }
    );

    // terraform force-unlock: an empty body; OpenTofu: LockInfo with only the ID.
    for force in [
        Bytes::new(),
        Bytes::from(" \n"),
        Bytes::from(r#"{"ID":"id-9"}"#),
    ] {
        b.lock(&*store, &path(), lock_info("id-1", "bob@ci"), None)
            .await
            .expect("lock");
        let released = b
            .unlock(&*store, &path(), &unlock(force.clone()), None)
            .await
            .unwrap_or_else(|e| panic!("force-unlock with {force:?}: {e}"));
        assert_eq!(store.lock_file(P), None, "{force:?}");
        assert!(released.force, "{force:?}");
    }
    assert!(Unlock::parse(b"not json").is_err());
}

/// A release may begin from what the store remembers of a lock it wrote (a cache); the answer
/// never rests on that memory when it disagrees: out of date (another process force-unlocked
/// and locked again), the old holder gets the 423 with the current LockInfo, the current holder
/// unlocks, and a memory of a lock already released is "not locked".
#[tokio::test]
async fn a_release_from_an_out_of_date_memory_is_decided_on_a_fresh_read() {
    let (store, b) = locked_by_bob().await;
    let bob = lock_info("id-1", "bob@ci");
    let alice = lock_info("id-2", "alice@laptop");
    store.remember_lock(P, "c-gone", &alice);
    assert_eq!(
        b.unlock(&*store, &path(), &unlock(alice.clone()), None)
            .await,
        Err(BackendError::Locked(bob.clone())),
        "alice's remembered lock is not the lock"
    );
    assert!(store.lock_file(P).is_some());
    store.remember_lock(P, "c-gone", &alice);
    b.unlock(&*store, &path(), &unlock(bob.clone()), None)
        .await
        .expect("bob, the holder, unlocks although the memory names alice");
    assert_eq!(store.lock_file(P), None);
    store.remember_lock(P, "c-gone", &bob);
    b.unlock(&*store, &path(), &unlock(bob.clone()), None)
        .await
        .expect("a remembered lock that is gone: not locked");
    // A memory that is right: the release deletes exactly that lock.
    b.lock(&*store, &path(), bob.clone(), None)
        .await
        .expect("lock");
    let tip = store.list_locks().await.expect("locks")[0].tip.clone();
    store.remember_lock(P, &tip, &bob);
    b.unlock(&*store, &path(), &unlock(bob), None)
        .await
        .expect("release");
    assert_eq!(store.lock_file(P), None);
}

/// A write by the lock's holder may begin from the store's memory ([`Intent::HeldWrite`]); when
/// that memory is out of date (another holder, a lock replaced by force, an older state tip, a
/// stored state the guard would refuse) the write is decided again on a fresh read: the right
/// holder writes, the replaced one gets the 423 with the current LockInfo, and nothing is
/// written from memory alone.
#[tokio::test]
async fn a_held_write_from_an_out_of_date_memory_is_decided_on_a_fresh_read() {
    let (store, b) = locked_by_bob().await;
    let alices = lock_info("id-2", "alice@laptop");
    let current = || async { store.snapshot(&path()).await.expect("snapshot") };
    // Bob (the holder) writes state(n) with his lock's ID, the store remembering `memory`.
    let (at, caller) = (path(), alice());
    let held_post = |memory, n| {
        store.remember_write(P, memory);
        b.post_body(&*store, &at, state(n), Some("id-1"), &caller)
    };
    b.post_body(&*store, &path(), state(1), Some("id-1"), &alice())
        .await
        .expect("bob writes")
        .expect("a commit");

    // The memory names another holder: bob, the holder, still writes.
    let mut memory = current().await;
    memory.lock = Some(alices.clone());
    held_post(memory, 2)
        .await
        .expect("bob writes although the memory names alice")
        .expect("a commit");
    assert_eq!(store.file(P), Some(state(2)));

    // The memory has an older state tip and a stored state the guard would refuse.
    let mut memory = current().await;
    memory.state_tip = Some("c-old".into());
    memory.state = Some(state(9));
    held_post(memory, 3)
        .await
        .expect("decided on the stored serial 2, not the remembered 9")
        .expect("a commit");
    assert_eq!(store.file(P), Some(state(3)));

    // The memory says the state already holds this body: a fresh read says it does not.
    let mut memory = current().await;
    memory.state = Some(state(4));
    let written = held_post(memory, 4).await.expect("written");
    assert!(written.is_some(), "a replay is not taken from memory");
    assert_eq!(store.file(P), Some(state(4)));

    // A memory that is right: one compare-and-swap, one commit.
    let (attempts, commits) = (store.attempts(), store.commits_of(P).len());
    held_post(current().await, 5)
        .await
        .expect("written from memory")
        .expect("a commit");
    assert_eq!(store.attempts(), attempts + 1);
    assert_eq!(store.commits_of(P).len(), commits + 1);

    // The lock was replaced by force (alice holds it now) while bob's memory still names his:
    // the push's lock check fails, the fresh read finds alice, bob gets the 423.
    let remembered = current().await;
    b.unlock(&*store, &path(), &unlock(Bytes::new()), None)
        .await
        .expect("terraform force-unlock");
    b.lock(&*store, &path(), alices.clone(), None)
        .await
        .expect("alice locks");
    assert_eq!(
        held_post(remembered, 6).await,
        Err(BackendError::Locked(alices.clone()))
    );
    assert_eq!(store.file(P), Some(state(5)), "nothing written");
    assert_eq!(store.lock_file(P), Some(alices));
}

#[tokio::test]
async fn a_write_that_loses_the_compare_and_swap_reads_again_and_commits_once() {
    let store = MemoryStore::named("r");
    store.lose_next(5);
    let written = backend()
        .post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("the write retries past the lost compare-and-swaps")
        .expect("a commit");
    assert_eq!(store.attempts(), 6);
    let mine = store.commits_of(P);
    assert_eq!(
        mine.len(),
        1,
        "one commit of this write, however many tries"
    );
    assert_eq!(mine[0].id, written.commit);
    assert_eq!(
        store.commits_of("other-writer.tfstate").len(),
        5,
        "the other writers' commits are kept"
    );
}

#[tokio::test]
async fn a_write_rereads_the_lock_after_losing_the_compare_and_swap() {
    // Another client takes the lock while this write retries: the retry must see it.
    let store = MemoryStore::named("r");
    store.lose_next_to_a_locker(1, &lock_info("id-2", "eve@laptop"));
    assert_eq!(
        backend()
            .post_body(&*store, &path(), state(1), None, &alice())
            .await,
        Err(BackendError::Locked(lock_info("id-2", "eve@laptop")))
    );
    assert!(store.commits_of(P).is_empty());
}

#[tokio::test]
async fn a_write_that_keeps_losing_is_a_busy_answer_and_writes_nothing() {
    let store = MemoryStore::named("r");
    store.lose_next(u32::MAX);
    let b = Backend {
        retry: RetryPolicy {
            budget: Duration::from_millis(50),
            ..backend().retry
        },
        ..backend()
    };
    match b
        .post_body(&*store, &path(), state(1), None, &alice())
        .await
    {
        Err(e @ BackendError::Busy { .. }) => {
            let text = e.to_string();
            assert!(text.contains("nothing was written"), "{text}");
            assert!(text.contains("Terraform retries this 503"), "{text}");
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert!(store.commits_of(P).is_empty());
    assert!(store.attempts() > 1, "it retried before giving up");
}

#[tokio::test]
async fn a_write_past_the_requests_deadline_is_not_made() {
    let store = MemoryStore::named("r");
    let late = Caller {
        name: "alice".into(),
        deadline: Some(Instant::now()),
        force: false,
        token: None,
        sealed_by: None,
    };
    assert!(matches!(
        backend()
            .post_body(&*store, &path(), state(1), None, &late)
            .await,
        Err(BackendError::Busy { .. })
    ));
    assert!(store.commits().is_empty());
    assert_eq!(store.attempts(), 0);
}

#[tokio::test]
async fn unlock_retries_when_the_lock_branch_moves_under_it() {
    let (store, b) = locked_by_bob().await;
    store.lose_next(3);
    b.unlock(&*store, &path(), &unlock(lock_info("id-1", "bob@ci")), None)
        .await
        .expect("unlock after retries");
    assert_eq!(store.lock_file(P), None);
    assert_eq!(store.attempts(), 4);
}

#[tokio::test]
async fn sealed_states_are_stored_sealed_and_served_open() {
    let (store, sealer, b) = sealing_store();
    b.post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("post");
    let stored = store.file(P).expect("stored");
    assert!(stored.starts_with(FAKE_SEAL_PREFIX.as_bytes()));
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(state(1))));
    assert_eq!(
        b.post_body(&*store, &path(), state(1), None, &alice())
            .await,
        Ok(None),
        "a replay under sealing makes no commit"
    );
    assert_eq!(sealer.seals(), 1, "and seals nothing");
    b.post_body(&*store, &path(), state(2), None, &alice())
        .await
        .expect("post")
        .expect("a commit");
    assert_eq!(store.commits_of(P).len(), 2);
}

#[tokio::test]
async fn a_state_sealed_for_another_place_is_never_served_and_is_replaced_by_a_write() {
    let (store, sealer, b) = sealing_store();
    let elsewhere = sealer
        .seal(
            &Place::new("r", &StatePath::parse("other.tfstate").expect("path")),
            &gitstate_statefile::check(state(1), false).expect("a state"),
        )
        .await
        .expect("seal");
    store.plant(P, &elsewhere);
    assert!(matches!(
        b.get(&*store, &path(), None).await,
        Err(BackendError::Seal(SealError::Misplaced(_)))
    ));
    b.post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("post")
        .expect("the copied document is replaced, not taken as a replay");
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(state(1))));
}

#[tokio::test]
async fn enforced_sealing_replaces_plaintext_and_never_serves_it() {
    let store = MemoryStore::named("r");
    store.plant(P, &state(1));
    let b = sealing(MemorySealer::enforced());
    assert!(matches!(
        b.get(&*store, &path(), None).await,
        Err(BackendError::Seal(SealError::NotSealedHere(_)))
    ));
    b.post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("post")
        .expect("plaintext equal to the body is not a replay: it gets sealed");
    assert!(store
        .file(P)
        .expect("stored")
        .starts_with(FAKE_SEAL_PREFIX.as_bytes()));
}

#[tokio::test]
async fn a_key_service_outage_is_an_error_and_writes_nothing() {
    let (store, sealer, b) = sealing_store();
    b.post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("post");
    sealer.set_outage(true);
    for result in [
        b.post_body(&*store, &path(), state(2), None, &alice())
            .await,
        b.post_body(&*store, &path(), state(1), None, &alice())
            .await,
    ] {
        assert!(
            matches!(
                result,
                Err(BackendError::Seal(SealError::Unavailable { .. }))
            ),
            "{result:?}"
        );
    }
    assert!(matches!(
        b.get(&*store, &path(), None).await,
        Err(BackendError::Seal(SealError::Unavailable { .. }))
    ));
    assert_eq!(store.commits_of(P).len(), 1);
}

fn state_of(lineage: &str, serial: u64, marker: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"version":4,"serial":{serial},"lineage":"{lineage}","outputs":{{"m":{{"value":"{marker}","type":"string"}}}},"resources":[]}}"#
    ))
}

fn forcing() -> Caller {
    Caller {
        force: true,
        ..alice()
    }
}

#[tokio::test]
async fn the_state_guard_refuses_another_lineage_or_an_older_serial_unless_forced() {
    let store = MemoryStore::named("r");
    let b = backend();
    b.post_body(&*store, &path(), state_of("l-1", 5, "a"), None, &alice())
        .await
        .expect("post");
    for (body, names) in [
        (state_of("l-2", 6, "b"), ["l-1", "l-2"]),
        (state_of("l-1", 4, "b"), ["5", "4"]),
        (state_of("l-1", 5, "b"), ["5", "other content"]),
    ] {
        match b
            .post_body(&*store, &path(), body.clone(), None, &alice())
            .await
        {
            Err(BackendError::Conflict(sentence)) => {
                for name in names {
                    assert!(sentence.contains(name), "{sentence}");
                }
                assert!(sentence.contains("?force=true"), "{sentence}");
            }
            other => panic!("expected 409 for {body:?}, got {other:?}"),
        }
    }
    assert_eq!(store.commits_of(P).len(), 1, "nothing was written");
    b.post_body(&*store, &path(), state_of("l-1", 6, "b"), None, &alice())
        .await
        .expect("the next serial continues the state")
        .expect("a commit");
    b.post_body(&*store, &path(), state_of("l-2", 1, "c"), None, &forcing())
        .await
        .expect("forced")
        .expect("a commit");
    assert_eq!(store.file(P), Some(state_of("l-2", 1, "c")));
}

#[tokio::test]
async fn the_same_serial_with_the_same_value_is_not_a_conflict() {
    let store = MemoryStore::named("r");
    let b = backend();
    b.post_body(&*store, &path(), state_of("l-1", 5, "a"), None, &alice())
        .await
        .expect("post");
    let reformatted = Bytes::from(
        serde_json::to_vec_pretty(
            &serde_json::from_slice::<serde_json::Value>(&state_of("l-1", 5, "a")).expect("json"),
        )
        .expect("json"),
    );
    b.post_body(&*store, &path(), reformatted, None, &alice())
        .await
        .expect("the same state, formatted otherwise, is accepted");
}

/// One pass (issue 49): a POST over a sealed state opens it once per attempt, for the replay
/// check and the state guard together; a replay and a refusal open it once too.
#[tokio::test]
async fn a_write_opens_the_stored_state_once() {
    let (store, sealer, b) = sealing_store();
    b.post_body(&*store, &path(), state_of("l-1", 5, "a"), None, &alice())
        .await
        .expect("post");
    let opens = |before: u32| sealer.opens() - before;
    let before = sealer.opens();
    b.post_body(&*store, &path(), state_of("l-1", 6, "b"), None, &alice())
        .await
        .expect("post")
        .expect("a commit");
    assert_eq!(opens(before), 1, "a write");
    let before = sealer.opens();
    let replay = b
        .post_body(&*store, &path(), state_of("l-1", 6, "b"), None, &alice())
        .await
        .expect("post");
    assert!(replay.is_none(), "a replay makes no commit");
    assert_eq!(opens(before), 1, "a replay");
    let before = sealer.opens();
    assert!(matches!(
        b.post_body(&*store, &path(), state_of("l-1", 2, "c"), None, &alice())
            .await,
        Err(BackendError::Conflict(_))
    ));
    assert_eq!(opens(before), 1, "a refusal");
}

#[tokio::test]
async fn the_guard_reads_sealed_states_and_stays_out_of_what_it_cannot_read() {
    let (store, _sealer, b) = sealing_store();
    b.post_body(&*store, &path(), state_of("l-1", 5, "a"), None, &alice())
        .await
        .expect("post");
    assert!(matches!(
        b.post_body(&*store, &path(), state_of("l-1", 3, "b"), None, &alice())
            .await,
        Err(BackendError::Conflict(_))
    ));
    // A stored file that is not a state (written by hand) guards nothing: it is replaced.
    store.plant(P, b"not a state");
    b.post_body(&*store, &path(), state_of("l-9", 1, "c"), None, &alice())
        .await
        .expect("post")
        .expect("a commit");
}

#[tokio::test]
async fn the_guard_can_be_turned_off_for_a_deployment_or_a_repository() {
    let store = MemoryStore::named("r");
    let b = backend();
    b.post_body(&*store, &path(), state_of("l-1", 5, "a"), None, &alice())
        .await
        .expect("post");
    let off = Backend {
        state_guard: false,
        ..backend()
    };
    off.post_body(&*store, &path(), state_of("l-2", 1, "b"), None, &alice())
        .await
        .expect("the deployment turned the guard off")
        .expect("a commit");
    let unguarded = crate::NamedStore::new("r", store.clone()).with_state_guard(false);
    b.post_body(&unguarded, &path(), state_of("l-3", 1, "c"), None, &alice())
        .await
        .expect("the repository turned the guard off")
        .expect("a commit");
    assert_eq!(store.file(P), Some(state_of("l-3", 1, "c")));
}

/// A sops document as real sops 3.11 writes it (all leaves encrypted), values shortened.
const SOPS_DOCUMENT: &str = r#"{
	"version": "ENC[AES256_GCM,data:Ng==,iv:aaaa,tag:bbbb,type:float]",
	"serial": "ENC[AES256_GCM,data:Mg==,iv:cccc,tag:dddd,type:float]",
	"sops": {
		"kms": [{"arn": "arn:aws:kms:eu-west-1:111122223333:key/team-a", "enc": "AQI="}],
		"age": [{"recipient": "age1qqqqteam", "enc": "-----BEGIN AGE ENCRYPTED FILE-----"}],
		"lastmodified": "2026-01-01T00:00:00Z",
		"mac": "ENC[AES256_GCM,data:eA==,iv:eeee,tag:ffff,type:str]",
		"version": "3.11.0"
	}
}"#;

#[tokio::test]
async fn ciphertext_is_never_served_as_a_state() {
    let store = MemoryStore::named("r");
    let b = backend();
    store.plant(P, SOPS_DOCUMENT.as_bytes());
    match b.get(&*store, &path(), None).await {
        Err(BackendError::Seal(SealError::NoKey { sentence, .. })) => {
            assert!(
                sentence.contains("kms:arn:aws:kms:eu-west-1:111122223333:key/team-a")
                    && sentence.contains("age:age1qqqqteam"),
                "{sentence}"
            );
        }
        other => panic!("a sops document was served: {other:?}"),
    }
    // terraform-backend-git's legacy aes: nonce + ciphertext, binary.
    store.plant(P, &[0x9c, 0x01, 0xfe, 0x7b, 0x00, 0x42]);
    assert!(matches!(
        b.get(&*store, &path(), None).await,
        Err(BackendError::Seal(SealError::NoKey { .. }))
    ));
    // A sealer that passes plaintext through does not pass these through either.
    let (sealed_store, _sealer, sealing_backend) = sealing_store();
    sealed_store.plant(P, SOPS_DOCUMENT.as_bytes());
    assert!(sealing_backend
        .get(&*sealed_store, &path(), None)
        .await
        .is_err());
    // Plain states, and a state that merely mentions sops, are served.
    let mentions = Bytes::from(
        r#"{"version":4,"serial":1,"lineage":"l","outputs":{"sops":{"value":"ENC[x]","type":"string"}}}"#,
    );
    store.plant(P, &mentions);
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(mentions)));
    // The next full write replaces what could not be served.
    store.plant(P, SOPS_DOCUMENT.as_bytes());
    b.post_body(&*store, &path(), state(1), None, &alice())
        .await
        .expect("post")
        .expect("a commit");
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(state(1))));
}

/// A backend that reads the fake legacy format under `key`, sealing with `sealer` when given.
fn legacy(key: &str, sealer: Option<Arc<MemorySealer>>) -> Backend {
    Backend {
        legacy: Some(MemoryOpener::new(key)),
        sealer: sealer.map(|s| s as Arc<dyn Sealer>),
        ..backend()
    }
}

#[tokio::test]
async fn a_legacy_aes_state_is_served_open_and_resealed_by_the_next_write() {
    let store = MemoryStore::named("r");
    store.plant(P, &MemoryOpener::seal("pass", &state(3)));
    let sealer = MemorySealer::new();
    let b = legacy("pass", Some(sealer.clone()));
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(state(3))));
    // The guard reads the opened state: an older serial is refused.
    assert!(matches!(
        b.post_body(&*store, &path(), state(2), None, &alice())
            .await,
        Err(BackendError::Conflict(_))
    ));
    // Even the same state is written once more: sealed with the configured keys.
    b.post_body(&*store, &path(), state(3), None, &alice())
        .await
        .expect("post")
        .expect("a commit re-sealing the legacy state");
    assert!(store
        .file(P)
        .expect("stored")
        .starts_with(FAKE_SEAL_PREFIX.as_bytes()));
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(state(3))));

    // Without sealing keys the next write stores plaintext.
    let plain = MemoryStore::named("r");
    plain.plant(P, &MemoryOpener::seal("pass", &state(3)));
    let b = legacy("pass", None);
    b.post_body(&*plain, &path(), state(4), None, &alice())
        .await
        .expect("post")
        .expect("a commit");
    assert_eq!(plain.file(P), Some(state(4)));
}

#[tokio::test]
async fn a_legacy_aes_state_without_its_passphrase_is_never_served() {
    let store = MemoryStore::named("r");
    let sealed = MemoryOpener::seal("pass", &state(3));
    store.plant(P, &sealed);
    for b in [
        legacy("another", None),
        backend(),
        sealing(MemorySealer::new()),
    ] {
        match b.get(&*store, &path(), None).await {
            Err(BackendError::Seal(SealError::NoKey { sentence, .. })) => {
                assert!(sentence.contains("passphrase"), "{sentence}");
                assert!(!sentence.contains("fake-aes"), "{sentence}");
            }
            other => panic!("a legacy file was served without its passphrase: {other:?}"),
        }
    }
    match legacy("another", None).get(&*store, &path(), None).await {
        Err(e) => assert!(
            e.to_string()
                .contains("does not open as fake legacy aes with the configured fake passphrase"),
            "{e}"
        ),
        Ok(served) => panic!("served {served:?}"),
    }
    // Plaintext still passes, as terraform-backend-git passed it through.
    store.plant(P, &state(5));
    assert_eq!(
        legacy("another", None).get(&*store, &path(), None).await,
        Ok(Some(state(5)))
    );
    // A binary file that happens to start with `{` is not JSON either.
    store.plant(P, b"{\x9c\x01\xfe\x7b\x00\x42");
    assert!(matches!(
        backend().get(&*store, &path(), None).await,
        Err(BackendError::Seal(SealError::NoKey { .. }))
    ));
}

fn operator() -> Caller {
    Caller {
        name: "op@host".into(),
        deadline: None,
        force: false,
        token: None,
        sealed_by: None,
    }
}

#[tokio::test]
async fn migrate_reseals_legacy_and_plaintext_states_in_one_commit_each() {
    let store = MemoryStore::named("r");
    let paths = ["a.tfstate", "b.tfstate", "c.tfstate", "README.md"];
    store.plant(paths[0], &MemoryOpener::seal("pass", &state(3)));
    store.plant(paths[1], &state(7));
    store.plant(paths[3], b"# states\n");
    let sealer = MemorySealer::new();
    let b = legacy("pass", Some(sealer.clone()));
    let at = |p: &str| StatePath::parse(p).expect("path");
    let commits = store.commits().len();

    let planned = b
        .migrate(&*store, &at(paths[0]), true, &operator())
        .await
        .expect("dry run");
    assert_eq!(
        (planned.from, planned.to, planned.serial, planned.commit),
        (
            StoredForm::LegacyAes,
            Some(StoredForm::Sealed),
            Some(3),
            None
        )
    );
    let planned = b
        .migrate(&*store, &at(paths[1]), true, &operator())
        .await
        .expect("dry run");
    assert_eq!(
        (planned.from, planned.to),
        (StoredForm::Plaintext, Some(StoredForm::Sealed))
    );
    assert_eq!(store.commits().len(), commits, "a dry run writes nothing");
    assert_eq!(sealer.seals(), 0, "and seals nothing");

    let done = b
        .migrate(&*store, &at(paths[0]), false, &operator())
        .await
        .expect("migrate");
    assert!(done.commit.is_some());
    let facts = done
        .facts
        .clone()
        .expect("the catalog's facts of the state written");
    assert_eq!((facts.serial, &facts.commit), (Some(3), &done.commit));
    let messages: Vec<String> = store
        .commits_of(paths[0])
        .into_iter()
        .map(|c| c.message)
        .collect();
    assert_eq!(
        messages.last().map(String::as_str),
        Some("Migrate a.tfstate (serial 3) from legacy aes to sealed by op@host")
    );
    b.migrate(&*store, &at(paths[1]), false, &operator())
        .await
        .expect("migrate")
        .commit
        .expect("a commit");
    assert_eq!(store.commits().len(), commits + 2, "one commit per state");
    for p in &paths[..2] {
        assert!(store
            .file(p)
            .expect("stored")
            .starts_with(FAKE_SEAL_PREFIX.as_bytes()));
    }
    assert_eq!(
        b.get(&*store, &at(paths[0]), None).await,
        Ok(Some(state(3)))
    );
    assert_eq!(
        b.get(&*store, &at(paths[1]), None).await,
        Ok(Some(state(7)))
    );

    // Again: everything is sealed, absent or not a state; nothing is written.
    for (p, form) in [
        (paths[0], StoredForm::Sealed),
        (paths[1], StoredForm::Sealed),
        (paths[2], StoredForm::Absent),
        (paths[3], StoredForm::NotAState),
    ] {
        let again = b
            .migrate(&*store, &at(p), false, &operator())
            .await
            .expect("again");
        assert_eq!(
            (again.from, again.to, again.commit),
            (form, None, None),
            "{p}"
        );
    }
    assert_eq!(store.commits().len(), commits + 2);

    // Without keys, legacy aes becomes plaintext and plaintext stays as it is.
    let plain = MemoryStore::named("r");
    plain.plant(paths[0], &MemoryOpener::seal("pass", &state(3)));
    plain.plant(paths[1], &state(7));
    let b = legacy("pass", None);
    let done = b
        .migrate(&*plain, &at(paths[0]), false, &operator())
        .await
        .expect("migrate");
    assert_eq!(
        (done.from, done.to),
        (StoredForm::LegacyAes, Some(StoredForm::Plaintext))
    );
    assert_eq!(plain.file(paths[0]), Some(state(3)));
    let left = b
        .migrate(&*plain, &at(paths[1]), false, &operator())
        .await
        .expect("migrate");
    assert_eq!(
        (left.from, left.to, left.commit),
        (StoredForm::Plaintext, None, None)
    );
}

#[tokio::test]
async fn migrate_leaves_locked_states_and_files_it_cannot_open_untouched() {
    let store = MemoryStore::named("r");
    store.plant(P, &MemoryOpener::seal("pass", &state(3)));
    let b = legacy("pass", Some(MemorySealer::new()));
    b.lock(&*store, &path(), lock_info("id-1", "bob@ci"), None)
        .await
        .expect("lock");
    let commits = store.commits().len();
    for dry_run in [true, false] {
        assert!(matches!(
            b.migrate(&*store, &path(), dry_run, &operator()).await,
            Err(BackendError::Locked(_))
        ));
    }
    let other = legacy("another", Some(MemorySealer::new()));
    b.unlock(&*store, &path(), &unlock(Bytes::new()), None)
        .await
        .expect("unlock");
    match other.migrate(&*store, &path(), false, &operator()).await {
        Err(BackendError::Seal(SealError::NoKey { sentence, .. })) => {
            assert!(sentence.contains("passphrase"), "{sentence}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.commits().len(), commits, "nothing was written");
    assert!(store
        .file(P)
        .expect("stored")
        .starts_with(b"\xfffake-aes pass "));
}

#[tokio::test]
async fn enforced_sealing_does_not_serve_an_opened_legacy_aes_state_but_migrate_seals_it() {
    let store = MemoryStore::named("r");
    store.plant(P, &MemoryOpener::seal("pass", &state(3)));
    let b = Backend {
        legacy: Some(MemoryOpener::new("pass")),
        ..sealing(MemorySealer::enforced())
    };
    assert!(matches!(
        b.get(&*store, &path(), None).await,
        Err(BackendError::Seal(SealError::NotSealedHere(_)))
    ));
    let done = b
        .migrate(&*store, &path(), false, &operator())
        .await
        .expect("migrate");
    assert_eq!(
        (done.from, done.to),
        (StoredForm::LegacyAes, Some(StoredForm::Sealed))
    );
    assert_eq!(b.get(&*store, &path(), None).await, Ok(Some(state(3))));
}

/// An OIDC token as the app hands it over: its mark (here made up) and whether it has expired.
fn oidc_token(mark: u8, expired: bool) -> LockToken {
    LockToken {
        mark: crate::lock_token::Mark::new([mark; 32]),
        expired,
    }
}

/// A run outlives its OIDC token (issue 50): the lock it takes is sealed with the token's mark;
/// once expired, the same token may still write under that lock's ID, read, and release it, and
/// nothing else. Another expired token with the lock's ID, or the expired token without the
/// lock, is a 401 that writes nothing.
#[tokio::test]
async fn an_expired_token_finishes_only_the_run_whose_lock_it_took() {
    let store = MemoryStore::named("r");
    let b = backend();
    let valid = oidc_token(1, false);
    let expired = oidc_token(1, true);
    let stranger = oidc_token(2, true);
    assert!(
        matches!(
            b.lock(
                &*store,
                &path(),
                lock_info("id-1", "ci@runner"),
                Some(&expired)
            )
            .await,
            Err(BackendError::Unauthenticated(_))
        ),
        "an expired token takes no lock"
    );
    b.lock(
        &*store,
        &path(),
        lock_info("id-1", "ci@runner"),
        Some(&valid),
    )
    .await
    .expect("lock");
    post_as(&b, &store, Some("id-1"), 1, &expired)
        .await
        .expect("the same token, expired, under its lock")
        .expect("a commit");
    assert_eq!(
        b.get(&*store, &path(), Some(&expired)).await,
        Ok(Some(state(1))),
        "and it reads the state back while its lock is held"
    );
    assert!(unauthenticated(
        &b.get(&*store, &path(), Some(&stranger)).await
    ));
    let commits = store.commits().len();
    assert!(unauthenticated(
        &post_as(&b, &store, Some("id-1"), 2, &stranger).await
    ));
    assert!(unauthenticated(
        &post_as(&b, &store, None, 2, &expired).await
    ));
    assert_eq!(store.commits().len(), commits, "a refused write wrote");
    assert!(unauthenticated(&release(&b, &store, &stranger).await));
    assert!(
        matches!(
            b.unlock(&*store, &path(), &Unlock::Force, Some(&expired))
                .await,
            Err(BackendError::Unauthenticated(_))
        ),
        "an expired token does not force-unlock"
    );
    release(&b, &store, &expired)
        .await
        .expect("the token releases the lock it took");
    assert!(
        unauthenticated(&post_as(&b, &store, Some("id-1"), 2, &expired).await),
        "without its lock an expired token is refused"
    );
    assert!(
        unauthenticated(&release(&b, &store, &expired).await),
        "nor may it unlock what is not locked"
    );
    // A lock taken without a token records none: an expired token never acts on it.
    b.lock(&*store, &path(), lock_info("id-2", "bob@ci"), None)
        .await
        .expect("lock");
    assert!(unauthenticated(
        &post_as(&b, &store, Some("id-2"), 3, &expired).await
    ));
}

/// The seal of a lock taken by an OIDC token (issue 55): the lock commit's trailer is an HMAC
/// keyed by the token's mark, over the lock's repository, path and ID, so it counts only where
/// gitstate wrote it. Someone with push access who holds the stolen token can rewrite a held
/// lock's commit; with the token's old `sha256:` trailer, a seal copied from the same token's
/// lock of another path or another lock ID, or another token's seal, the expired token's POST,
/// DELETE, GET and UNLOCK are 401s that write nothing. Put back, the genuine seal still admits it.
#[tokio::test]
async fn a_lock_seal_counts_only_for_its_token_repository_path_and_id() {
    let store = MemoryStore::named("r");
    let b = backend();
    let (valid, expired) = (oidc_token(1, false), oidc_token(1, true));
    let other = StatePath::parse("team/other.tfstate").unwrap();
    for (at, id) in [(&path(), "id-1"), (&other, "id-2")] {
        b.lock(&*store, at, lock_info(id, "ci@runner"), Some(&valid))
            .await
            .expect("lock");
    }
    let genuine = store.lock_message(P).expect("the lock commit");
    let sealed = |message: &str| {
        LockToken::recorded(message)
            .map(|seal| format!("{}: {seal}", crate::lock_token::LOCK_TOKEN_TRAILER))
            .expect("a trailer")
    };
    assert!(sealed(&genuine).contains(": hmac-sha256:"), "{genuine}");
    let in_other_repository = MemoryStore::named("s");
    b.lock(
        &*in_other_repository,
        &path(),
        lock_info("id-1", "ci@runner"),
        Some(&valid),
    )
    .await
    .expect("lock");
    let forged = [
        (
            "the token's sha256, as earlier versions wrote it",
            format!(
                "{}: sha256:{}",
                crate::lock_token::LOCK_TOKEN_TRAILER,
                "ab".repeat(32)
            ),
        ),
        (
            "the same token's seal of another path",
            sealed(&store.lock_message(other.as_str()).expect("the other lock")),
        ),
        (
            "the same token's seal of the same path and ID in another repository",
            sealed(&in_other_repository.lock_message(P).expect("its lock")),
        ),
        (
            "another token's seal of this very lock",
            oidc_token(2, false).trailer(&Place::new("r", &path()), "id-1"),
        ),
        ("no seal at all", "Lock by hand".to_owned()),
    ];
    let held = store.lock_file(P).expect("held");
    for (what, trailer) in forged {
        store.plant_lock_commit(P, &held, &format!("Lock {P}: rewritten\n\n{trailer}"));
        let commits = store.commits().len();
        for written in [
            post_as(&b, &store, Some("id-1"), 1, &expired).await,
            b.delete(&*store, &path(), Some("id-1"), &with_token(&expired))
                .await,
        ] {
            assert!(
                matches!(written, Err(BackendError::Unauthenticated(_))),
                "{what}: {written:?}"
            );
        }
        assert!(
            unauthenticated(&b.get(&*store, &path(), Some(&expired)).await),
            "{what}"
        );
        assert!(
            unauthenticated(&release(&b, &store, &expired).await),
            "{what}"
        );
        assert_eq!(
            store.commits().len(),
            commits,
            "{what}: a refused write wrote"
        );
        assert!(
            store.lock_file(P).is_some(),
            "{what}: the lock was released"
        );
    }
    // The same seal on a lock file naming another ID (the lock rewritten to another run's).
    store.plant_lock_commit(
        P,
        &lock_info("id-3", "ci@runner"),
        &format!("Lock {P}: rewritten\n\n{}", sealed(&genuine)),
    );
    assert!(matches!(
        post_as(&b, &store, Some("id-3"), 1, &expired).await,
        Err(BackendError::Unauthenticated(_))
    ));
    // The genuine lock commit put back: the run finishes.
    store.plant_lock_commit(P, &held, &genuine);
    post_as(&b, &store, Some("id-1"), 1, &expired)
        .await
        .expect("the genuine seal admits the expired token")
        .expect("a commit");
    release(&b, &store, &expired)
        .await
        .expect("and it releases its lock");
}

/// A caller with `token`.
fn with_token(token: &LockToken) -> Caller {
    Caller {
        token: Some(token.clone()),
        sealed_by: None,
        ..alice()
    }
}

/// Whether `answer` is the 401 of an expired token.
fn unauthenticated<T>(answer: &Result<T, BackendError>) -> bool {
    matches!(answer, Err(BackendError::Unauthenticated(m)) if m.contains("expired"))
}

/// The holder's UNLOCK of the lock `id-1` at [`P`] by a caller with `token`.
async fn release(
    b: &Backend,
    store: &MemoryStore,
    token: &LockToken,
) -> Result<Unlocked, BackendError> {
    let request = unlock(lock_info("id-1", "x"));
    b.unlock(store, &path(), &request, Some(token)).await
}

/// A POST of `state(serial)` at [`P`] naming `lock_id`, by a caller with `token`.
async fn post_as(
    b: &Backend,
    store: &MemoryStore,
    lock_id: Option<&str>,
    serial: u64,
    token: &LockToken,
) -> Result<Option<Written>, BackendError> {
    b.post_body(store, &path(), state(serial), lock_id, &with_token(token))
        .await
}
