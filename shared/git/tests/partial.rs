//! Partial cold reads (issue 17, DESIGN §9): against real servers (lighttpd + `git http-backend`,
//! `git daemon`) whose upload-pack offers `filter`, a read brings the tip's commit and trees and
//! only the blob it reads, whatever the other states weigh; a write on such a cache lands whole;
//! a server without `filter` is read the old way (whole trees), and that is logged once; the ref
//! listing asks for the refs a read needs only.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use common::{dir_bytes, git, git_ok, sp};
use gitstate_core::{LockCreate, StateChange, StateStore};
use gitstate_git::{RemoteConfig, RemoteStore};
use gitstate_tests::{bare_repo, bare_repo_without_filter, GitDaemon, GitHttpServer};
use gitstate_url::Credentials;

/// The small state read, and the big ones next to it.
const SMALL: &str = "small.tfstate";
const BIG_BYTES: usize = 1024 * 1024;
const BIGS: usize = 6;

fn store(url: &str, cache: &Path, credentials: Option<Credentials>) -> RemoteStore {
    RemoteStore::new(RemoteConfig {
        url: url.to_string(),
        git_ref: "main".into(),
        credentials,
        cache_dir: cache.to_path_buf(),
        timeout: Duration::from_secs(20),
    })
    .unwrap()
}

/// Folders of small states beside them, in folders of folders.
const FOLDERS: [&str; 3] = ["teams/a", "teams/b", "other"];

fn big_name(i: usize) -> String {
    format!("big-{i}.tfstate")
}

/// Incompressible content: a compressed pack cannot hide a big blob.
fn noise(len: usize) -> Vec<u8> {
    (0..len).map(|_| rand::random::<u8>()).collect()
}

/// Puts a 2 KiB state and [`BIGS`] incompressible 1 MiB states on `main` of `bare` with the git
/// CLI; returns the contents by path.
fn seed(bare: &Path, scratch: &Path) -> Vec<(String, Vec<u8>)> {
    let work = scratch.join("seed");
    git(
        scratch,
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            work.to_str().unwrap(),
        ],
    );
    let mut files = vec![(SMALL.to_string(), vec![b'{'; 2048])];
    for i in 0..BIGS {
        files.push((big_name(i), noise(BIG_BYTES)));
    }
    for folder in FOLDERS {
        for i in 0..3 {
            let content = format!("{{\"state\":\"{folder}/{i}\"}}");
            files.push((format!("{folder}/s{i}.tfstate"), content.into_bytes()));
        }
    }
    for (path, content) in &files {
        let path = work.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "seed"]);
    git(&work, &["push", "-q", "origin", "HEAD:main"]);
    files
}

/// The id of the blob or tree at `path` on `main`.
fn object_id(bare: &Path, path: &str) -> String {
    git(bare, &["rev-parse", &format!("main:{path}")])
        .trim()
        .to_string()
}

/// The pack files in the cache repository.
fn packs(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("objects/pack"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "pack"))
        .count()
}

/// Whether the object is in the cache repository (read with the git CLI).
fn cached(cache: &Path, id: &str) -> bool {
    git_ok(cache, &["cat-file", "-e", id])
}

/// The cold read, the second read and the write, on one remote.
async fn partial_reads_and_a_write(url: &str, credentials: Option<Credentials>, bare: &Path) {
    let scratch = tempfile::tempdir().unwrap();
    let files = seed(bare, scratch.path());
    let cache = tempfile::tempdir().unwrap();
    let s = store(url, cache.path(), credentials.clone());

    // Cold read of the small state: its blob and the trees, none of the big blobs.
    let snap = s.snapshot(&sp(SMALL)).await.expect("cold read");
    assert_eq!(snap.state.as_deref(), Some(&files[0].1[..]));
    let dir = s.cache_dir();
    let after_cold = dir_bytes(&dir);
    assert!(
        after_cold < (BIG_BYTES / 4) as u64,
        "a cold read of a 2 KiB state left {after_cold} bytes in the cache, next to {BIGS} states of {BIG_BYTES} bytes"
    );
    assert!(cached(&dir, &object_id(bare, SMALL)));
    for i in 0..BIGS {
        assert!(
            !cached(&dir, &object_id(bare, &big_name(i))),
            "{} was fetched by a read of {SMALL}",
            big_name(i)
        );
    }
    // The cache stays shallow: one commit, the boundary recorded.
    assert!(dir.join("shallow").exists());
    // Only the trees on the path read: the root tree, no folder's.
    assert!(cached(&dir, &object_id(bare, "")));
    for folder in ["teams", "teams/a", "other"] {
        assert!(
            !cached(&dir, &object_id(bare, folder)),
            "the tree of {folder} was fetched by a read of {SMALL}"
        );
    }
    // A state two folders down brings the trees on its path, not its neighbours.
    let nested = "teams/a/s1.tfstate";
    let snap = s.snapshot(&sp(nested)).await.expect("nested read");
    assert_eq!(
        snap.state.as_deref(),
        Some(&b"{\"state\":\"teams/a/1\"}"[..])
    );
    for (folder, fetched) in [
        ("teams", true),
        ("teams/a", true),
        ("teams/b", false),
        ("other", false),
    ] {
        assert_eq!(
            cached(&dir, &object_id(bare, folder)),
            fetched,
            "the tree of {folder} after reading {nested}"
        );
    }
    assert!(!cached(&dir, &object_id(bare, "teams/a/s0.tfstate")));
    // The trees and blobs fetched by id landed loose: the one pack is the tip's.
    assert_eq!(packs(&dir), 1, "packs in the cache after two reads");
    let after_first = dir_bytes(&dir);

    // Reading a second state adds its blob only.
    let big0 = big_name(0);
    let snap = s.snapshot(&sp(&big0)).await.expect("second read");
    assert_eq!(snap.state.as_deref(), Some(&files[1].1[..]));
    let after_second = dir_bytes(&dir);
    assert!(
        after_second - after_first < (BIG_BYTES + BIG_BYTES / 4) as u64,
        "reading one more state of {BIG_BYTES} bytes added {} bytes",
        after_second - after_first
    );
    assert!(cached(&dir, &object_id(bare, &big0)));
    for i in 1..BIGS {
        assert!(!cached(&dir, &object_id(bare, &big_name(i))));
    }
    // A warm read fetches nothing.
    s.snapshot(&sp(SMALL)).await.expect("warm read");
    assert_eq!(dir_bytes(&dir), after_second);

    // A write attempt on a state whose blob the cache lacks (the tips are cached): its read
    // fetches that blob by id, and its write lands.
    let big2 = big_name(2);
    let attempt = s
        .begin(&sp(&big2), gitstate_core::Intent::Write)
        .await
        .expect("begin");
    assert_eq!(attempt.snapshot().state.as_deref(), Some(&files[3].1[..]));
    attempt
        .update_state(
            StateChange::Write(Bytes::from_static(b"{\"serial\":3}")),
            &gitstate_core::Message::from("Update big-2 by test"),
        )
        .await
        .expect("write in an attempt");
    assert_eq!(
        git(bare, &["show", &format!("main:{big2}")]),
        "{\"serial\":3}"
    );
    let files: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .map(|(path, content)| {
            if path == big2 {
                (path, b"{\"serial\":3}".to_vec())
            } else {
                (path, content)
            }
        })
        .collect();

    // A write on the partial cache: the new tree keeps the blobs of the states it lacks.
    s.snapshot(&sp(SMALL)).await.unwrap();
    common::write(
        &s,
        &sp(SMALL),
        StateChange::Write(Bytes::from_static(b"{\"serial\":2}")),
        "Update small by test",
    )
    .await
    .expect("write on a partial cache");
    // A nested state too (a new subtree next to trees whose blobs are absent).
    common::write(
        &s,
        &sp("team/nested.tfstate"),
        StateChange::Write(Bytes::from_static(b"nested")),
        "Update nested by test",
    )
    .await
    .expect("nested write on a partial cache");
    // And a state in a folder whose tree the cache lacks: the trees on its path come first.
    let unread = "teams/b/s2.tfstate";
    assert!(!cached(&dir, &object_id(bare, "teams/b")));
    common::write(
        &s,
        &sp(unread),
        StateChange::Write(Bytes::from_static(b"unread")),
        "Update unread by test",
    )
    .await
    .expect("a write in a folder the cache lacks");
    let files: Vec<(String, Vec<u8>)> = files
        .into_iter()
        .map(|(path, content)| match path == unread {
            true => (path, b"unread".to_vec()),
            false => (path, content),
        })
        .collect();
    git(bare, &["fsck", "--strict", "--no-dangling"]);
    let clone = scratch.path().join("check");
    git(
        scratch.path(),
        &[
            "clone",
            "-q",
            bare.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(clone.join(SMALL)).unwrap(), b"{\"serial\":2}");
    assert_eq!(
        std::fs::read(clone.join("team/nested.tfstate")).unwrap(),
        b"nested"
    );
    for (path, content) in &files[1..] {
        assert_eq!(&std::fs::read(clone.join(path)).unwrap(), content, "{path}");
    }
    // The writes did not fetch the big blobs either.
    for i in [1, 3, 4, 5] {
        assert!(!cached(&dir, &object_id(bare, &big_name(i))));
    }

    // Another cache (another process) reads what was written, partially too.
    let other = tempfile::tempdir().unwrap();
    let s2 = store(url, other.path(), credentials);
    let snap = s2.snapshot(&sp(SMALL)).await.unwrap();
    assert_eq!(snap.state.as_deref(), Some(&b"{\"serial\":2}"[..]));
    assert!(dir_bytes(&s2.cache_dir()) < (BIG_BYTES / 4) as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_daemon_cold_read_brings_only_the_state_it_reads() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    partial_reads_and_a_write(&daemon.url("states"), None, &bare).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smart_http_cold_read_brings_only_the_state_it_reads() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret");
    let credentials = Credentials {
        username: "alice".into(),
        password: "s3cret".into(),
    };
    partial_reads_and_a_write(&http.url("states"), Some(credentials), &bare).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_url_cold_read_brings_only_the_state_it_reads() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let url = format!("file://{}", bare.display());
    partial_reads_and_a_write(&url, None, &bare).await;
}

/// Log lines at info and above of this test process.
fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(data);
                Ok(data.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = buffer.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .init();
        buffer
    })
    .clone()
}

/// How often the fallback was logged for `url`.
fn fallback_logged(url: &str) -> usize {
    let logs = logs();
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| l.contains("offers no partial fetch") && l.contains(url))
        .count()
}

/// Without `uploadpack.allowFilter` the read fetches whole trees (today's behaviour), says so
/// once per remote, and everything still works.
async fn falls_back_without_filter(url: &str, credentials: Option<Credentials>, bare: &Path) {
    logs();
    let scratch = tempfile::tempdir().unwrap();
    let files = seed(bare, scratch.path());
    let cache = tempfile::tempdir().unwrap();
    let s = store(url, cache.path(), credentials.clone());
    let snap = s.snapshot(&sp(SMALL)).await.expect("read");
    assert_eq!(snap.state.as_deref(), Some(&files[0].1[..]));
    let dir = s.cache_dir();
    // Whole trees: the big blobs came too.
    assert!(cached(&dir, &object_id(bare, &big_name(0))));
    assert!(dir.join("shallow").exists());
    assert_eq!(fallback_logged(url), 1, "the fallback is logged once");
    // A second store (another request) on the same remote: not logged again.
    let other = tempfile::tempdir().unwrap();
    let s2 = store(url, other.path(), credentials);
    let snap = s2.snapshot(&sp(&big_name(1))).await.expect("read");
    assert_eq!(snap.state.as_deref(), Some(&files[2].1[..]));
    common::write(
        &s2,
        &sp(SMALL),
        StateChange::Write(Bytes::from_static(b"2")),
        "Update small by test",
    )
    .await
    .expect("write");
    assert_eq!(git(bare, &["show", &format!("main:{SMALL}")]), "2");
    assert_eq!(fallback_logged(url), 1, "the fallback is logged once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_daemon_without_filter_falls_back_to_whole_trees() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo_without_filter(repos.path(), "plain");
    let daemon = GitDaemon::start(repos.path());
    falls_back_without_filter(&daemon.url("plain"), None, &bare).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smart_http_without_filter_falls_back_to_whole_trees() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo_without_filter(repos.path(), "plain");
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret");
    let credentials = Credentials {
        username: "alice".into(),
        password: "s3cret".into(),
    };
    falls_back_without_filter(&http.url("plain"), Some(credentials), &bare).await;
}

/// How often the tree filter's refusal was logged for `url`.
fn tree_filter_refusal_logged(url: &str) -> usize {
    let logs = logs();
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| l.contains("refuses the tree filter") && l.contains(url))
        .count()
}

/// A server that offers `filter` but refuses tree filters (`uploadpackfilter.tree.allow`
/// off, as a forge may): reads stay partial with `blob:none` (every tree, only the blobs read),
/// the refusal is logged once per remote, and reads and writes work.
async fn falls_back_without_tree_filter(url: &str, credentials: Option<Credentials>, bare: &Path) {
    logs();
    git(bare, &["config", "uploadpackfilter.tree.allow", "false"]);
    let scratch = tempfile::tempdir().unwrap();
    let files = seed(bare, scratch.path());
    let cache = tempfile::tempdir().unwrap();
    let s = store(url, cache.path(), credentials.clone());
    let snap = s.snapshot(&sp("teams/a/s0.tfstate")).await.expect("read");
    assert_eq!(
        snap.state.as_deref(),
        Some(&b"{\"state\":\"teams/a/0\"}"[..])
    );
    let dir = s.cache_dir();
    // Every tree came (blob:none), but no blob the read did not need.
    for folder in ["teams/b", "other"] {
        assert!(cached(&dir, &object_id(bare, folder)), "{folder}");
    }
    assert!(!cached(&dir, &object_id(bare, &big_name(0))));
    assert!(!cached(&dir, &object_id(bare, "teams/b/s0.tfstate")));
    assert_eq!(
        tree_filter_refusal_logged(url),
        1,
        "the refusal is logged once"
    );
    // Another cache of the same remote reads and writes, and nothing is logged again.
    let other = tempfile::tempdir().unwrap();
    let s2 = store(url, other.path(), credentials);
    let snap = s2.snapshot(&sp(SMALL)).await.expect("read");
    assert_eq!(snap.state.as_deref(), Some(&files[0].1[..]));
    common::write(
        &s2,
        &sp("other/s1.tfstate"),
        StateChange::Write(Bytes::from_static(b"2")),
        "Update other by test",
    )
    .await
    .expect("write");
    assert_eq!(git(bare, &["show", "main:other/s1.tfstate"]), "2");
    assert_eq!(
        tree_filter_refusal_logged(url),
        1,
        "the refusal is logged once"
    );
    assert_eq!(
        fallback_logged(url),
        0,
        "the remote still fetches partially"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn git_daemon_without_tree_filter_fetches_every_tree_and_only_the_blobs_read() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "no-trees");
    let daemon = GitDaemon::start(repos.path());
    falls_back_without_tree_filter(&daemon.url("no-trees"), None, &bare).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smart_http_without_tree_filter_fetches_every_tree_and_only_the_blobs_read() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "no-trees");
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret");
    let credentials = Credentials {
        username: "alice".into(),
        password: "s3cret".into(),
    };
    falls_back_without_tree_filter(&http.url("no-trees"), Some(credentials), &bare).await;
}

/// The packet lines upload-pack sent or received, from the server's `GIT_TRACE_PACKET`.
fn upload_pack_trace(trace: &PathBuf, direction: &str) -> Vec<String> {
    let text = std::fs::read_to_string(trace).unwrap_or_default();
    let marker = format!("upload-pack{direction} ");
    text.lines()
        .filter_map(|l| l.split_once(&marker).map(|(_, rest)| rest.to_string()))
        .collect()
}

/// With many lock branches, a read lists only the branch and that state's lock (`ls-refs` with
/// `ref-prefix`), and reads the lock; listing locks from a fresh cache reads every lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ls_refs_asks_only_for_the_refs_a_read_needs() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let trace = repos.path().join("packets.trace");
    let daemon = GitDaemon::start_with_env(
        repos.path(),
        &[("GIT_TRACE_PACKET", trace.to_str().unwrap())],
    );
    let url = daemon.url("states");
    let scratch = tempfile::tempdir().unwrap();
    let files = seed(&bare, scratch.path());
    // 200 locks of other states, made by another gitstate.
    let writer_cache = tempfile::tempdir().unwrap();
    let writer = store(&url, writer_cache.path(), None);
    let others: Vec<String> = (0..200).map(|i| format!("other-{i}.tfstate")).collect();
    for other in others.iter().take(3) {
        let created = writer
            .create_lock(
                &sp(other),
                Bytes::from(format!("{{\"ID\":\"{other}\"}}")),
                &gitstate_core::Message::from("Lock"),
            )
            .await
            .unwrap();
        assert_eq!(created, LockCreate::Created);
    }
    let lock_tip = git(&bare, &["rev-parse", "refs/heads/locks/other-0.tfstate"]);
    for other in others.iter().skip(3) {
        git(
            &bare,
            &[
                "update-ref",
                &format!("refs/heads/locks/{other}"),
                lock_tip.trim(),
            ],
        );
    }
    let info = Bytes::from_static(b"{\"ID\":\"mine\"}");
    assert_eq!(
        writer
            .create_lock(
                &sp(SMALL),
                info.clone(),
                &gitstate_core::Message::from("Lock")
            )
            .await,
        Ok(LockCreate::Created)
    );
    std::fs::write(&trace, "").unwrap();

    let cache = tempfile::tempdir().unwrap();
    let s = store(&url, cache.path(), None);
    let snap = s.snapshot(&sp(SMALL)).await.expect("read");
    assert_eq!(snap.state.as_deref(), Some(&files[0].1[..]));
    assert_eq!(snap.lock, Some(info.clone()));
    assert_eq!(
        snap.lock_tip.as_deref(),
        Some(git(&bare, &["rev-parse", &format!("refs/heads/locks/{SMALL}")]).trim())
    );

    let asked = upload_pack_trace(&trace, "<");
    let sent = upload_pack_trace(&trace, ">");
    assert!(asked.iter().any(|l| l == "command=ls-refs"), "{asked:?}");
    assert!(
        asked.iter().any(|l| l == "ref-prefix refs/heads/main"),
        "{asked:?}"
    );
    assert!(
        asked
            .iter()
            .any(|l| l == &format!("ref-prefix refs/heads/locks/{SMALL}")),
        "{asked:?}"
    );
    // A cold cache asks for the tips with their root trees only.
    assert!(asked.iter().any(|l| l == "filter tree:1"), "{asked:?}");
    assert!(
        asked
            .iter()
            .any(|l| l == &format!("want {}", object_id(&bare, SMALL))),
        "the state's blob is asked for by id: {asked:?}"
    );
    let listed_others = sent.iter().filter(|l| l.contains("locks/other-")).count();
    assert_eq!(listed_others, 0, "the server listed other locks: {sent:?}");

    // Listing locks from a fresh cache lists (and reads) them all.
    let cache = tempfile::tempdir().unwrap();
    let s = store(&url, cache.path(), None);
    let locks = s.list_locks().await.expect("list locks");
    assert_eq!(locks.len(), others.len() + 1);
    let mine = locks.iter().find(|l| l.path == SMALL).expect("my lock");
    assert_eq!(mine.content, info);
    let first = locks
        .iter()
        .find(|l| l.path == "other-1.tfstate")
        .expect("a lock of another state");
    assert_eq!(first.content, Bytes::from("{\"ID\":\"other-1.tfstate\"}"));
}

/// The blob fetch reads through the answer limit: a state larger than `max_answer_bytes` is
/// refused with the limit named, while a small one next to it still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blob_fetches_stay_within_the_answer_limit() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let daemon = GitDaemon::start(repos.path());
    let scratch = tempfile::tempdir().unwrap();
    let files = seed(&bare, scratch.path());
    let cache = tempfile::tempdir().unwrap();
    let s = store(&daemon.url("states"), cache.path(), None).with_answer_limit(256 * 1024);
    let snap = s
        .snapshot(&sp(SMALL))
        .await
        .expect("a small state within the limit");
    assert_eq!(snap.state.as_deref(), Some(&files[0].1[..]));
    match s.snapshot(&sp(&big_name(0))).await {
        Err(gitstate_core::StoreError::Remote(message)) => {
            assert!(message.contains("max_answer_bytes"), "{message}")
        }
        other => panic!("a 1 MiB blob over a 256 KiB limit: {other:?}"),
    }
}

/// A `want` the server cannot serve ends with the server's own sentence, as a remote error.
#[test]
fn a_want_the_server_lacks_is_a_remote_error_with_its_sentence() {
    use gitstate_wire::fetchpack::{FetchRequest, UploadPack};
    use gitstate_wire::transport::Endpoint;
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    let scratch = tempfile::tempdir().unwrap();
    seed(&bare, scratch.path());
    let daemon = GitDaemon::start(repos.path());
    let endpoint = Endpoint::parse(&daemon.url("states"), None, Duration::from_secs(10)).unwrap();
    let mut session = UploadPack::connect(&endpoint)
        .unwrap()
        .expect("git daemon speaks protocol v2");
    assert!(session.offers("filter") && session.offers("shallow"));
    let refs = session.ls_refs(&["refs/heads/main"]).unwrap();
    assert_eq!(refs.len(), 1);
    assert_eq!(
        refs[0].1.to_string(),
        git(&bare, &["rev-parse", "main"]).trim()
    );
    let objects = tempfile::tempdir().unwrap();
    let missing = gix::ObjectId::from_hex(b"1111111111111111111111111111111111111111").unwrap();
    let error = session
        .fetch(
            &FetchRequest {
                wants: vec![missing],
                ..Default::default()
            },
            objects.path(),
            None,
        )
        .expect_err("the server has no such object");
    match error {
        gitstate_wire::WireError::Remote(message) => {
            assert!(message.contains("not our ref"), "{message}");
            assert!(message.contains(&missing.to_string()), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// A read whose fetch goes out on a connection the git server closes before answering (its
/// keep-alive timeout crossing the request; here on a kept session whose `ls-refs` just worked)
/// is read again on a new session, not answered 503 (issue 48: 1 write in 1,280 at one cold
/// process, 50,000 states, through a rate-limited link).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fetch_closed_before_any_answer_is_read_again() {
    use gitstate_tests::proxy::CuttingProxy;
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "cut");
    let file = |serial: u32| format!("{{\"serial\":{serial}}}");
    common::seed_files(&bare, [("a/s.tfstate".to_string(), file(1))].into_iter());
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret");
    let proxy = CuttingProxy::start(http.port());
    let url = http.url_through("cut", proxy.port());
    let credentials = Credentials {
        username: "alice".into(),
        password: "s3cret".into(),
    };
    let cache = tempfile::tempdir().unwrap();
    let s = store(&url, cache.path(), Some(credentials));
    let snap = s.snapshot(&sp("a/s.tfstate")).await.expect("first read");
    assert_eq!(snap.state.as_deref(), Some(file(1).as_bytes()));
    // Another writer moves the tip, so the next read fetches over its kept session.
    let scratch = tempfile::tempdir().unwrap();
    common::other_writer(&bare, scratch.path(), &[("a/s.tfstate", file(2))]);
    proxy.arm(b"command=fetch");
    let snap = s
        .snapshot(&sp("a/s.tfstate"))
        .await
        .expect("read after the cut");
    assert_eq!(snap.state.as_deref(), Some(file(2).as_bytes()));
    assert_eq!(
        proxy.cut(),
        1,
        "the proxy cut the fetch: the test made its case"
    );
}

/// An UNLOCK that reaches a process other than the one that took the lock (Lambda routes each
/// request anywhere, issue 58) reads the lock branch fresh: its commit, which holds one small
/// file, comes whole in one fetch, not its root tree first and then each level of the path and
/// the file (4 fetches for a lock two folders deep).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unlock_elsewhere_fetches_the_lock_commit_in_one_request() {
    use gitstate_core::Intent;
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "locks");
    let file = |serial: u32| format!("{{\"serial\":{serial}}}");
    let path = "c/p8/w001.tfstate";
    common::seed_files(&bare, [(path.to_string(), file(1))].into_iter());
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret");
    let credentials = || {
        Some(Credentials {
            username: "alice".into(),
            password: "s3cret".into(),
        })
    };
    let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = store(&http.url("locks"), cache_a.path(), credentials());
    let b = store(&http.url("locks"), cache_b.path(), credentials());
    // b has read the state before (a warm process), then a takes the lock.
    b.snapshot(&sp(path)).await.expect("b reads");
    let info = Bytes::from_static(b"{\"ID\":\"elsewhere\"}");
    let created = a
        .create_lock(
            &sp(path),
            info.clone(),
            &gitstate_core::Message::from("Lock"),
        )
        .await;
    assert_eq!(created, Ok(LockCreate::Created));

    let before = http.requests().len();
    let attempt = b.begin(&sp(path), Intent::Release).await.expect("begin");
    assert_eq!(attempt.snapshot().lock.as_ref(), Some(&info));
    attempt
        .delete_lock()
        .await
        .expect("b releases the lock a took");
    let requests = http.requests()[before..].to_vec();
    let fetches = requests
        .iter()
        .filter(|r| r.starts_with("POST") && r.ends_with("git-upload-pack"))
        .count();
    assert_eq!(fetches, 1, "{requests:#?}");
    assert_eq!(git(&bare, &["for-each-ref", "refs/heads/locks/"]), "");
}

/// The holder's UNLOCK knows the lock commit its LOCK wrote without reading it (DESIGN §3: a
/// lock commit follows from the path, the LockInfo, the message and the committer): in a process
/// that did not take the lock, the advertisement that shows that commit is enough, and the
/// release is the advertisement and the push, no fetch, whichever store wrote the lock. An
/// expectation that is not the lock (another message, so another commit) reads the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holders_unlock_knows_the_lock_commit_without_fetching_it() {
    use gitstate_core::{ExpectedLock, Intent, Message};
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "expected");
    let path = "c/p8/w001.tfstate";
    common::seed_files(
        &bare,
        [(path.to_string(), "{\"serial\":1}".to_string())].into_iter(),
    );
    let http = GitHttpServer::start(repos.path(), "alice", "s3cret");
    let credentials = || {
        Some(Credentials {
            username: "alice".into(),
            password: "s3cret".into(),
        })
    };
    let info = Bytes::from_static(
        b"{\"ID\":\"held\",\"Operation\":\"OperationTypeApply\",\"Who\":\"bob@ci\",\"Created\":\"2026-11-29T10:00:00.123456789Z\"}",
    );
    let message = || {
        Message::by(
            "Lock c/p8/w001.tfstate: OperationTypeApply by bob@ci (held)".into(),
            "bob@ci",
        )
    };
    let expecting = |message: Message| {
        Intent::ReleaseExpecting(Arc::new(ExpectedLock {
            content: info.clone(),
            message,
        }))
    };
    let (cache_a, cache_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = store(&http.url("expected"), cache_a.path(), credentials());
    let b = store(&http.url("expected"), cache_b.path(), credentials());
    let local = gitstate_git::LocalStore::open_or_init(&bare, "main").unwrap();
    let upload_packs = |requests: &[String]| {
        requests
            .iter()
            .filter(|r| r.contains("git-upload-pack"))
            .count()
    };

    // b, the holder, releases the lock `info` with the advertisement and the push: no fetch.
    let b_releases = |why: &'static str| {
        let (b, http, bare, info) = (&b, &http, &bare, &info);
        let (expecting, upload_packs) = (&expecting, &upload_packs);
        async move {
            let before = http.requests().len();
            let attempt = b
                .begin(&sp(path), expecting(message()))
                .await
                .expect("begin");
            assert_eq!(attempt.snapshot().lock.as_ref(), Some(info));
            attempt.delete_lock().await.expect("b releases the lock");
            let requests = http.requests()[before..].to_vec();
            assert_eq!(
                (upload_packs(&requests), requests.len()),
                (0, 2),
                "{why}: the advertisement and the push, no fetch: {requests:#?}"
            );
            assert_eq!(git(bare, &["for-each-ref", "refs/heads/locks/"]), "");
        }
    };

    // The lock taken through another process (a), then on the repository itself (the local
    // store's rules).
    for (taker, why) in [
        (&a as &dyn StateStore, "taken by another process"),
        (&local, "taken on the repository itself"),
    ] {
        let created = taker.create_lock(&sp(path), info.clone(), &message()).await;
        assert_eq!(created, Ok(LockCreate::Created));
        b_releases(why).await;
    }

    // b recalls a lock it took itself, which another process released since: the holder's
    // UNLOCK of the next lock (another LockInfo) does not try to delete the recalled one, it is
    // still the advertisement and the push.
    let earlier = Bytes::from_static(
        b"{\"ID\":\"earlier\",\"Operation\":\"OperationTypeApply\",\"Who\":\"bob@ci\",\"Created\":\"2026-11-29T09:00:00.5Z\"}",
    );
    let created = b.create_lock(&sp(path), earlier, &message()).await;
    assert_eq!(created, Ok(LockCreate::Created));
    let attempt = a.begin(&sp(path), Intent::Unlock).await.expect("begin");
    attempt.delete_lock().await.expect("a releases b's lock");
    let created = a.create_lock(&sp(path), info.clone(), &message()).await;
    assert_eq!(created, Ok(LockCreate::Created));
    b_releases("after a stale recalled lock").await;

    // Another message is another commit: the lock is read.
    let created = a.create_lock(&sp(path), info.clone(), &message()).await;
    assert_eq!(created, Ok(LockCreate::Created));
    let before = http.requests().len();
    let wrong = Message::by("Lock by someone else".into(), "eve@ci");
    let attempt = b.begin(&sp(path), expecting(wrong)).await.expect("begin");
    assert_eq!(attempt.snapshot().lock.as_ref(), Some(&info));
    let requests = http.requests()[before..].to_vec();
    assert!(
        upload_packs(&requests) > 0,
        "the lock was not read: {requests:#?}"
    );
    attempt
        .delete_lock()
        .await
        .expect("released after reading it");
    assert_eq!(git(&bare, &["for-each-ref", "refs/heads/locks/"]), "");
}
