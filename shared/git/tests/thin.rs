//! Bytes on the wire in a repository of thousands of states (issue 48, DESIGN §9.5), counted by a
//! proxy in front of a real server (lighttpd + `git http-backend`, `uploadpack.allowFilter` on):
//! - a tip another writer moved brings what changed (a thin pack: deltas against the trees of
//!   the tip the cache had), not every tree of the repository again; a changed folder this cache
//!   never read is left out and comes by id when something reads it;
//! - a write into a folder of thousands of states pushes the folder's tree as a delta against
//!   the one the server has, not whole; git itself reads back what was pushed.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{git, other_writer, seed_files, sp};
use gitstate_core::{Intent, Message, StateChange, StateStore};
use gitstate_git::{RemoteConfig, RemoteStore};
use gitstate_tests::proxy::CountingProxy;
use gitstate_tests::{bare_repo, GitHttpServer};
use gitstate_url::Credentials;

/// States in the folders test: `FOLDERS` folders of `PER_FOLDER`.
const FOLDERS: usize = 40;
const PER_FOLDER: usize = 100;
/// States in the one flat folder of the push test.
const FLAT: usize = 4000;

fn folder_path(i: usize) -> String {
    format!("f{:03}/s{i:06}.tfstate", i % FOLDERS)
}

fn content(i: usize, serial: u64) -> String {
    format!("{{\"serial\":{serial},\"lineage\":\"thin-{i:06}\"}}")
}

/// A store on `url` (through the proxy) with its own cache.
fn store(url: &str, cache: &Path) -> RemoteStore {
    RemoteStore::new(RemoteConfig {
        url: url.to_string(),
        git_ref: "main".into(),
        credentials: Some(Credentials {
            username: "alice".into(),
            password: "s3cret".into(),
        }),
        cache_dir: cache.to_path_buf(),
        timeout: Duration::from_secs(30),
    })
    .unwrap()
}

/// lighttpd + `git http-backend` serving the repositories in `repos`, a counting proxy in front
/// of it, and the URL of repository `name` through the proxy.
fn serve(repos: &Path, name: &str) -> (GitHttpServer, CountingProxy, String) {
    let http = GitHttpServer::start(repos, "alice", "s3cret");
    let proxy = CountingProxy::start(http.port());
    let url = http.url_through(name, proxy.port());
    (http, proxy, url)
}

/// Bytes of every tree at `main` of `bare`, uncompressed.
fn tree_bytes(bare: &Path) -> u64 {
    let trees = git(bare, &["ls-tree", "-r", "-t", "-d", "main"]);
    let mut ids: Vec<&str> = trees
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let root = git(bare, &["rev-parse", "main^{tree}"]);
    ids.push(root.trim());
    ids.iter()
        .map(|id| {
            git(bare, &["cat-file", "-s", id])
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_moved_tip_brings_what_changed_not_every_tree() {
    let repos = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "states");
    seed_files(
        &bare,
        (0..FOLDERS * PER_FOLDER).map(|i| (folder_path(i), content(i, 1))),
    );
    let (_http, proxy, url) = serve(repos.path(), "states");
    let cache = tempfile::tempdir().unwrap();
    let s = store(&url, cache.path());

    // State 0 lives in f000; state 1 in f001, which this store never reads before the end.
    let (a, b, a_neighbour) = (0, 1, FOLDERS);
    let snap = s.snapshot(&sp(&folder_path(a))).await.expect("cold read");
    assert_eq!(snap.state.as_deref(), Some(content(a, 1).as_bytes()));

    // Another writer changes a state in f001 and one beside state 0 in f000.
    other_writer(
        &bare,
        scratch.path(),
        &[
            (&folder_path(b), content(b, 2)),
            (&folder_path(a_neighbour), content(a_neighbour, 2)),
        ],
    );
    let every_tree = tree_bytes(&bare);
    let (up_before, down_before) = proxy.bytes();
    let snap = s
        .snapshot(&sp(&folder_path(a)))
        .await
        .expect("read after the move");
    assert_eq!(snap.state.as_deref(), Some(content(a, 1).as_bytes()));
    let (up, down) = proxy.bytes();
    let (up, down) = (up - up_before, down - down_before);
    // What changed: the commit, the root tree and two folder trees (deltas of a few dozen
    // bytes), inside HTTP answers; every tree weighs ~50 times more.
    assert!(
        every_tree > 100_000,
        "the repository's trees weigh {every_tree} bytes"
    );
    assert!(
        down < 12_000,
        "reading a state after another writer's push brought {down} bytes ({up} up); every tree of the repository is {every_tree} bytes"
    );

    // The changed folder this store never read comes when read, and is right.
    let snap = s.snapshot(&sp(&folder_path(b))).await.expect("read f001");
    assert_eq!(snap.state.as_deref(), Some(content(b, 2).as_bytes()));
    let snap = s
        .snapshot(&sp(&folder_path(a_neighbour)))
        .await
        .expect("read the neighbour");
    assert_eq!(
        snap.state.as_deref(),
        Some(content(a_neighbour, 2).as_bytes())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_into_a_folder_of_thousands_pushes_a_delta_of_its_tree() {
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "flat");
    seed_files(
        &bare,
        (0..FLAT).map(|i| (format!("states/s{i:06}.tfstate"), content(i, 1))),
    );
    let folder_tree: u64 = git(&bare, &["cat-file", "-s", "main:states"])
        .trim()
        .parse()
        .unwrap();
    let (_http, proxy, url) = serve(repos.path(), "flat");
    let cache = tempfile::tempdir().unwrap();
    let s = store(&url, cache.path());

    let path = sp("states/s001234.tfstate");
    // The write reads first (the folder's tree comes whole: a cold read's floor here).
    let attempt = s.begin(&path, Intent::Write).await.expect("begin");
    assert_eq!(
        attempt.snapshot().state.as_deref(),
        Some(content(1234, 1).as_bytes())
    );
    let (up_before, _) = proxy.bytes();
    let new = content(1234, 2);
    attempt
        .update_state(
            StateChange::Write(Bytes::from(new.clone())),
            &Message::from("Update states/s001234.tfstate (serial 2)"),
        )
        .await
        .expect("write");
    let up = proxy.bytes().0 - up_before;
    assert!(
        folder_tree > 150_000,
        "the folder's tree weighs {folder_tree} bytes"
    );
    assert!(
        up < 8_000,
        "a write into a folder of {FLAT} states sent {up} bytes; the folder's tree is {folder_tree} bytes"
    );
    // git reads back what was pushed: the new state, every other one as it was, a sound
    // repository.
    assert_eq!(git(&bare, &["show", "main:states/s001234.tfstate"]), new);
    assert_eq!(
        git(&bare, &["show", "main:states/s001233.tfstate"]),
        content(1233, 1)
    );
    let listed = git(&bare, &["ls-tree", "main:states"]);
    assert_eq!(listed.lines().count(), FLAT);
    git(&bare, &["fsck", "--no-progress", "--strict"]);

    // A second write of the same folder (its base now the tree this store pushed) and a
    // fresh store's read agree.
    let attempt = s.begin(&path, Intent::Write).await.expect("begin again");
    let newer = content(1234, 3);
    attempt
        .update_state(
            StateChange::Write(Bytes::from(newer.clone())),
            &Message::from("Update states/s001234.tfstate (serial 3)"),
        )
        .await
        .expect("second write");
    let other = tempfile::tempdir().unwrap();
    let fresh = store(&url, other.path());
    let snap = fresh.snapshot(&path).await.expect("fresh read");
    assert_eq!(snap.state.as_deref(), Some(newer.as_bytes()));
    git(&bare, &["fsck", "--no-progress", "--strict"]);
}

/// `git hash-object -w` of `data` in `bare`: the object id.
fn stored_blob(bare: &Path, data: &[u8]) -> gix::ObjectId {
    use std::io::Write;
    let mut child = std::process::Command::new("git")
        .args(["hash-object", "-w", "--stdin"])
        .current_dir(bare)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    gix::ObjectId::from_hex(String::from_utf8(out.stdout).unwrap().trim().as_bytes()).unwrap()
}

/// A push that loses the race to an identical one (two leaders folding the same writes in the
/// same second, DESIGN §9.4) carries objects the server already has; git's `index-pack
/// --fix-thin` then resolves a delta twice when it comes before its base in the pack ("REF_DELTA
/// at offset … already resolved (duplicate base …?)"), and the push fails to unpack instead of
/// losing its compare-and-swap. Every pack puts a base before the deltas made from it.
#[test]
fn a_pack_of_objects_the_server_already_has_unpacks() {
    use gitstate_wire::delta;
    use gitstate_wire::pack::{write_pack, Delta, Pack};
    use gix::objs::Kind;
    let repos = tempfile::tempdir().unwrap();
    let bare = bare_repo(repos.path(), "r");
    let filler: Vec<u8> = (0..4000u32).flat_map(|i| i.to_le_bytes()).collect();
    let version = |tag: &str| [filler.as_slice(), tag.as_bytes()].concat();
    let (y, x, d) = (version("y"), version("x"), version("d"));
    // The server has y and x already (x came with the push that won).
    let y_id = stored_blob(&bare, &y);
    let x_id = stored_blob(&bare, &x);
    let d_id = gix::objs::compute_hash(gix::hash::Kind::Sha1, Kind::Blob, &d).unwrap();
    let mut deltas = std::collections::HashMap::new();
    deltas.insert(
        x_id,
        Delta {
            base: y_id,
            data: delta::encode(&y, &x),
        },
    );
    deltas.insert(
        d_id,
        Delta {
            base: x_id,
            data: delta::encode(&x, &d),
        },
    );
    // The delta from x first, as a HashMap may list them.
    let pack = Pack {
        objects: vec![(d_id, Kind::Blob, d.clone()), (x_id, Kind::Blob, x)],
        deltas,
    };
    let bytes = write_pack(&pack, true).unwrap();
    let mut child = std::process::Command::new("git")
        .args(["index-pack", "--fix-thin", "--stdin"])
        .current_dir(&bare)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git index-pack: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = gitstate_tests::git_output(Some(&bare), &["cat-file", "blob", &d_id.to_string()]);
    assert!(
        stored.status.success() && stored.stdout == d,
        "git reads back the new object"
    );
}
