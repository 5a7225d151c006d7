//! The workspace rules against the in-memory fakes ([`crate::fakes`]): what the API answers and
//! what the repository holds afterwards (the commits, the lock branch).

use bytes::Bytes;

use super::*;
use crate::backend::{Backend, BackendError, Caller};
use crate::fakes::{fake_mark, MemoryStore};
use crate::lock::{LockInfo, Unlock};
use crate::lock_token::LockToken;
use crate::path::StatePath;
use crate::scope::{Admitted, Rights, Scope, Use};
use crate::store::StateStore;

fn name(raw: &str) -> WorkspaceName {
    WorkspaceName::parse(raw).unwrap()
}

fn holder(credential: &str, who: &str) -> Holder {
    Holder {
        name: who.to_owned(),
        token: LockToken {
            mark: fake_mark(credential),
            expired: false,
        },
    }
}

fn state(serial: u64) -> Bytes {
    of_lineage("l-1", serial)
}

fn of_lineage(lineage: &str, serial: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"version":4,"terraform_version":"1.11.4","serial":{serial},"lineage":"{lineage}","outputs":{{}},"resources":[]}}"#
    ))
}

/// A state that manages one resource (a `null_resource`).
fn managing_one(serial: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"version":4,"terraform_version":"1.11.4","serial":{serial},"lineage":"l-1","outputs":{{}},"resources":[{{"mode":"managed","type":"null_resource","name":"r","provider":"provider[\"registry.terraform.io/hashicorp/null\"]","instances":[{{"schema_version":0,"attributes":{{"id":"1"}}}}]}}]}}"#
    ))
}

fn caller(who: &str) -> Caller {
    Caller {
        name: who.to_owned(),
        ..Caller::default()
    }
}

const APP: &str = "workspaces/app-prod.tfstate";
const RECORD: &str = ".gitstate/workspaces/app-prod.json";

#[tokio::test]
async fn a_workspace_exists_by_its_state_or_its_record_and_create_writes_one_record_commit() {
    let (backend, store) = (Backend::default(), MemoryStore::named("default"));
    let spaces = Workspaces::on(&backend, store.as_ref());
    let app = name("app-prod");
    let missing = spaces.read(&app, None).await.unwrap_err();
    assert!(
        matches!(&missing, WorkspaceError::NotFound(s) if s.contains("does not exist in the organization default")),
        "{missing:?}"
    );
    let created = spaces.create(&app, Vec::new(), "alice").await.unwrap();
    assert_eq!(created.path.as_str(), APP);
    assert_eq!(created.id, WorkspaceId::new("default", &app));
    assert!(!created.has_state && created.lock.is_none());
    let commits = store.commits_of(RECORD);
    assert_eq!(commits.len(), 1, "one commit for the record");
    assert!(
        commits[0]
            .message
            .starts_with("Create workspace app-prod (workspaces/app-prod.tfstate) by alice"),
        "{}",
        commits[0].message
    );
    let read = spaces.read(&app, None).await.unwrap();
    assert_eq!(
        read.record.as_ref().map(|r| r.name.as_str()),
        Some("app-prod")
    );
    let again = spaces.create(&app, Vec::new(), "bob").await.unwrap_err();
    assert!(matches!(again, WorkspaceError::Taken(_)), "{again:?}");
    assert_eq!(store.commits_of(RECORD).len(), 1, "nothing written again");

    // A state written over the http protocol at the mapped path is a workspace too.
    let other = name("from-http");
    let path = StatePath::parse("workspaces/from-http.tfstate").unwrap();
    let checked = backend.check(state(1), false).unwrap();
    backend
        .post(store.as_ref(), &path, &checked, None, &caller("carol"))
        .await
        .unwrap();
    let read = spaces.read(&other, None).await.unwrap();
    assert!(read.has_state && read.record.is_none());
    assert!(matches!(
        spaces.create(&other, Vec::new(), "dave").await,
        Err(WorkspaceError::Taken(_))
    ));
}

#[tokio::test]
async fn only_the_caller_that_locked_writes_a_state_version_and_unlocks() {
    let (backend, store) = (Backend::default(), MemoryStore::named("default"));
    let spaces = Workspaces::on(&backend, store.as_ref());
    let app = name("app-prod");
    spaces.create(&app, Vec::new(), "alice").await.unwrap();
    let (alice, bob) = (holder("token-a", "alice"), holder("token-b", "bob"));
    let checked = backend.check(state(1), false).unwrap();

    let unlocked = spaces
        .write_state(&app, &checked, &alice, &caller("alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(unlocked, WorkspaceError::NotLocked(_)),
        "{unlocked:?}"
    );
    assert!(store.commits_of(APP).is_empty());

    let locked = spaces
        .lock(&app, &alice, "Locked by Terraform")
        .await
        .unwrap();
    assert!(locked.locked_by_caller);
    let info = LockInfo::stored(&store.lock_file(APP).expect("the lock branch"));
    assert_eq!(info.who, "alice");
    assert!(
        info.info.contains("through the workspace API"),
        "{}",
        info.info
    );
    assert!(!info.id.is_empty() && !info.created.is_empty());
    let message = store.lock_message(APP).unwrap();
    assert!(
        LockToken::recorded(&message).is_some(),
        "the lock is sealed by the caller's credential: {message}"
    );
    assert!(
        spaces
            .read(&app, Some(&alice))
            .await
            .unwrap()
            .locked_by_caller
    );
    assert!(
        !spaces
            .read(&app, Some(&bob))
            .await
            .unwrap()
            .locked_by_caller
    );

    for refused in [
        spaces.lock(&app, &bob, "").await.unwrap_err(),
        spaces.lock(&app, &alice, "").await.unwrap_err(),
        spaces
            .write_state(&app, &checked, &bob, &caller("bob"))
            .await
            .unwrap_err(),
        spaces.unlock(&app, &bob).await.unwrap_err(),
    ] {
        assert!(
            matches!(&refused, WorkspaceError::Locked { sentence, .. } if sentence.contains("is locked by User alice")),
            "{refused:?}"
        );
    }
    assert!(store.commits_of(APP).is_empty(), "bob wrote nothing");

    let written = spaces
        .write_state(&app, &checked, &alice, &caller("alice"))
        .await
        .unwrap()
        .expect("a commit");
    assert_eq!(written.who, "alice");
    assert_eq!(store.commits_of(APP).len(), 1);
    // The same body again is a replay: no commit.
    assert_eq!(
        spaces
            .write_state(&app, &checked, &alice, &caller("alice"))
            .await
            .unwrap(),
        None
    );
    // The state guard applies: an older serial is refused.
    let older = backend.check(state(0), false).unwrap();
    let guarded = spaces
        .write_state(&app, &older, &alice, &caller("alice"))
        .await
        .unwrap_err();
    assert!(
        matches!(guarded, WorkspaceError::Backend(BackendError::Conflict(_))),
        "{guarded:?}"
    );
    // Another lineage is `terraform state push -force` (the client checked it; its `cloud`
    // client sends `force: false`): it replaces the state, and the guard holds within it.
    let other = backend.check(of_lineage("l-2", 1), false).unwrap();
    assert!(spaces
        .write_state(&app, &other, &alice, &caller("alice"))
        .await
        .unwrap()
        .is_some());
    assert_eq!(spaces.current(&app, None).await.unwrap().lineage, "l-2");
    let older = backend.check(of_lineage("l-2", 0), false).unwrap();
    assert!(spaces
        .write_state(&app, &older, &alice, &caller("alice"))
        .await
        .is_err());
    let back = backend.check(state(1), false).unwrap();
    spaces
        .write_state(&app, &back, &alice, &caller("alice"))
        .await
        .unwrap()
        .expect("back to l-1");

    let current = spaces.current(&app, None).await.unwrap();
    assert_eq!(current.state, state(1));
    assert_eq!((current.serial, current.lineage.as_str()), (1, "l-1"));
    assert_eq!(current.digest.len(), 32);

    spaces.unlock(&app, &alice).await.unwrap();
    assert_eq!(store.lock_file(APP), None);
    assert!(matches!(
        spaces.unlock(&app, &alice).await,
        Err(WorkspaceError::NotLocked(_))
    ));
}

#[tokio::test]
async fn one_lock_for_both_protocols() {
    let (backend, store) = (Backend::default(), MemoryStore::named("default"));
    let spaces = Workspaces::on(&backend, store.as_ref());
    let app = name("app-prod");
    spaces.create(&app, Vec::new(), "alice").await.unwrap();
    let alice = holder("token-a", "alice");
    let path = StatePath::parse(APP).unwrap();

    // An http LOCK holds the workspace: the API shows it locked and refuses its own lock and a
    // state version, and writes nothing.
    let http_lock = Bytes::from_static(br#"{"ID":"http-1","Who":"ci@runner","Operation":"OperationTypeApply","Created":"2026-11-29T10:00:00Z"}"#);
    backend
        .lock(store.as_ref(), &path, http_lock.clone(), None)
        .await
        .unwrap();
    let read = spaces.read(&app, Some(&alice)).await.unwrap();
    assert_eq!(read.lock, Some(http_lock.clone()));
    assert!(!read.locked_by_caller);
    match spaces.lock(&app, &alice, "").await.unwrap_err() {
        WorkspaceError::Locked { sentence, holder } => {
            assert!(
                sentence.contains("ci@runner") && sentence.contains("http-1"),
                "{sentence}"
            );
            assert_eq!(holder, http_lock);
        }
        other => panic!("{other:?}"),
    }
    let checked = backend.check(state(1), false).unwrap();
    assert!(matches!(
        spaces
            .write_state(&app, &checked, &alice, &caller("alice"))
            .await,
        Err(WorkspaceError::Locked { .. })
    ));
    assert!(store.commits_of(APP).is_empty());

    // A force-unlock through the API removes it, whoever holds it.
    spaces.force_unlock(&app, None).await.unwrap();
    assert_eq!(store.lock_file(APP), None);
    assert!(matches!(
        spaces.force_unlock(&app, None).await,
        Err(WorkspaceError::NotLocked(_))
    ));

    // An API lock holds the http protocol: a LOCK is answered with its LockInfo, a POST without
    // its ID is refused.
    spaces
        .lock(&app, &alice, "Locked by Terraform")
        .await
        .unwrap();
    let held = backend
        .lock(
            store.as_ref(),
            &path,
            Bytes::from_static(br#"{"ID":"http-2"}"#),
            None,
        )
        .await
        .unwrap_err();
    let BackendError::Locked(info) = held else {
        panic!("{held:?}")
    };
    let info = LockInfo::stored(&info);
    assert_eq!(info.who, "alice");
    assert!(info.info.contains("workspace API"));
    assert!(matches!(
        backend
            .post(store.as_ref(), &path, &checked, None, &caller("x"))
            .await,
        Err(BackendError::Locked(_))
    ));
    // The http force-unlock removes it too.
    backend
        .unlock(store.as_ref(), &path, &Unlock::Force, None)
        .await
        .unwrap();
    assert!(matches!(
        spaces.unlock(&app, &alice).await,
        Err(WorkspaceError::NotLocked(_))
    ));
}

#[tokio::test]
async fn a_configured_workspace_path_maps_the_workspace_there() {
    let backend = Backend::default();
    let store = crate::named_store::NamedStore::new("prod", MemoryStore::named("prod"))
        .with_workspace_path(WorkspacePath::parse("envs/{name}/terraform.tfstate").unwrap());
    let spaces = Workspaces::on(&backend, &store);
    let app = name("app");
    let created = spaces.create(&app, Vec::new(), "alice").await.unwrap();
    assert_eq!(created.path.as_str(), "envs/app/terraform.tfstate");
    assert_eq!(created.id, WorkspaceId::new("prod", &app));
    assert!(store.snapshot(&created.path).await.unwrap().state.is_none());
}

#[test]
fn a_narrow_credential_sees_no_workspace_outside_its_paths_and_a_reader_only_reads() {
    let app = name("app-prod");
    let path = StatePath::parse(APP).unwrap();
    let team_b = Scope::new(Rights::ReadWrite, &["team-b/**".into()]).unwrap();
    let hidden = admit(&team_b, "default", &app, &path, Use::Read).unwrap_err();
    let WorkspaceError::NotFound(sentence) = hidden else {
        panic!("{hidden:?}")
    };
    assert_eq!(
        sentence,
        "the workspace app-prod does not exist in the organization default, or this credential may not use it",
        "the same sentence as a workspace that does not exist"
    );
    assert!(matches!(
        admit(&team_b, "default", &app, &path, Use::Write),
        Err(WorkspaceError::NotFound(_))
    ));
    let other_repo = Scope::new(Rights::ReadWrite, &["prod:workspaces/*".into()]).unwrap();
    assert!(matches!(
        admit(&other_repo, "default", &app, &path, Use::Read),
        Err(WorkspaceError::NotFound(_))
    ));
    let reader = Scope::new(Rights::ReadOnly, &["workspaces/*".into()]).unwrap();
    assert_eq!(
        admit(&reader, "default", &app, &path, Use::Read).unwrap(),
        Admitted::Whole
    );
    assert!(matches!(
        admit(&reader, "default", &app, &path, Use::Write),
        Err(WorkspaceError::Forbidden(_))
    ));
    let outputs = Scope::new(Rights::OutputsOnly, &[]).unwrap();
    assert_eq!(
        admit(&outputs, "default", &app, &path, Use::Read).unwrap(),
        Admitted::OutputsOnly
    );
    assert_eq!(
        admit(&Scope::full(), "default", &app, &path, Use::Write).unwrap(),
        Admitted::Whole
    );
}

#[tokio::test]
async fn a_lock_of_no_workspace_is_a_404_and_leaves_no_lock() {
    let (backend, store) = (Backend::default(), MemoryStore::named("default"));
    let spaces = Workspaces::on(&backend, store.as_ref());
    let ghost = name("app-prod");
    let refused = spaces
        .lock(&ghost, &holder("token-a", "alice"), "")
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, WorkspaceError::NotFound(s) if s.contains("does not exist")),
        "{refused:?}"
    );
    assert_eq!(
        store.lock_file(APP),
        None,
        "the lock taken to learn it is released"
    );
    assert!(store.commits_of(APP).is_empty() && store.commits_of(RECORD).is_empty());
}

#[tokio::test]
async fn the_list_finds_states_and_records_by_name_and_tags_one_page_at_a_time() {
    let (backend, store) = (Backend::default(), MemoryStore::named("default"));
    let spaces = Workspaces::on(&backend, store.as_ref());
    let tags = |t: &[&str]| parse_tags(t.iter().copied()).unwrap();
    spaces
        .create(&name("app-a"), tags(&["app", "blue"]), "alice")
        .await
        .unwrap();
    spaces
        .create(&name("app-b"), tags(&["app"]), "alice")
        .await
        .unwrap();
    // A state written over http is a workspace, listed once with its record once tagged.
    let path = StatePath::parse("workspaces/db.tfstate").unwrap();
    let checked = backend.check(state(1), false).unwrap();
    backend
        .post(store.as_ref(), &path, &checked, None, &caller("carol"))
        .await
        .unwrap();
    // Files of no workspace: another folder, and a state at no name of the pattern.
    let other = StatePath::parse("other/x.tfstate").unwrap();
    backend
        .post(store.as_ref(), &other, &checked, None, &caller("carol"))
        .await
        .unwrap();
    let all = Scope::full();
    let names = |listed: &Listed| {
        listed
            .workspaces
            .iter()
            .map(|w| w.name().as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let listed = spaces
        .list(&all, &Search::default(), PageRequest::default())
        .await
        .unwrap();
    assert_eq!(names(&listed), ["app-a", "app-b", "db"]);
    assert_eq!(listed.total, 3);
    assert!(listed.workspaces[2].has_state && listed.workspaces[2].record.is_none());
    assert_eq!(
        listed.workspaces[0].record.as_ref().unwrap().tags,
        ["app", "blue"]
    );

    let search = |name: Option<&str>, tags: &[&str]| Search {
        name: name.map(str::to_owned),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        exclude_tags: Vec::new(),
    };
    let found = spaces
        .list(&all, &search(Some("APP-"), &[]), PageRequest::default())
        .await
        .unwrap();
    assert_eq!(names(&found), ["app-a", "app-b"]);
    let found = spaces
        .list(
            &all,
            &search(None, &["app", "blue"]),
            PageRequest::default(),
        )
        .await
        .unwrap();
    assert_eq!(names(&found), ["app-a"], "every tag must match");

    // Tagging a workspace that has only a state gives it a record: one commit.
    let db = name("db");
    let tagged = spaces.tag(&db, &tags(&["app"]), &[], "bob").await.unwrap();
    assert_eq!(tagged.record.unwrap().tags, ["app"]);
    let commits = store.commits_of(".gitstate/workspaces/db.json");
    assert_eq!(commits.len(), 1);
    assert!(
        commits[0]
            .message
            .starts_with("Tag workspace db (workspaces/db.tfstate): app by bob"),
        "{}",
        commits[0].message
    );
    spaces.tag(&db, &tags(&["app"]), &[], "bob").await.unwrap();
    assert_eq!(
        store.commits_of(".gitstate/workspaces/db.json").len(),
        1,
        "a tag it has writes nothing"
    );
    let found = spaces
        .list(&all, &search(None, &["app"]), PageRequest::default())
        .await
        .unwrap();
    assert_eq!(names(&found), ["app-a", "app-b", "db"]);

    // Pages of one.
    let second = spaces
        .list(&all, &Search::default(), PageRequest { number: 2, size: 1 })
        .await
        .unwrap();
    assert_eq!(names(&second), ["app-b"]);
    assert_eq!((second.total_pages(), second.next_page()), (3, Some(3)));

    // A narrow credential lists only what it may read.
    let narrow = Scope::new(Rights::ReadWrite, &["workspaces/app-a.tfstate".into()]).unwrap();
    let seen = spaces
        .list(&narrow, &Search::default(), PageRequest::default())
        .await
        .unwrap();
    assert_eq!(names(&seen), ["app-a"]);
    assert_eq!(seen.total, 1);
}

#[tokio::test]
async fn a_delete_removes_the_state_and_the_record_in_one_commit_never_when_locked() {
    let (backend, store) = (Backend::default(), MemoryStore::named("default"));
    let spaces = Workspaces::on(&backend, store.as_ref());
    let app = name("app-prod");
    spaces.create(&app, Vec::new(), "alice").await.unwrap();
    let alice = holder("token-a", "alice");
    spaces.lock(&app, &alice, "apply").await.unwrap();
    let checked = backend.check(managing_one(1), false).unwrap();
    spaces
        .write_state(&app, &checked, &alice, &caller("alice"))
        .await
        .unwrap();
    let before = store.commits().len();

    // Locked: refused, even with force.
    let locked = spaces.delete(&app, true, "bob").await.unwrap_err();
    assert!(
        matches!(&locked, WorkspaceError::Locked { sentence, .. } if sentence.contains("cannot be deleted while locked")),
        "{locked:?}"
    );
    spaces.unlock(&app, &alice).await.unwrap();
    // A state that manages a resource: refused without force.
    let kept = spaces.delete(&app, false, "bob").await.unwrap_err();
    assert!(
        matches!(&kept, WorkspaceError::HasState(s) if s.contains("-force") && s.contains("manages 1 resource")),
        "{kept:?}"
    );
    assert_eq!(store.commits().len(), before, "nothing was written");

    spaces.delete(&app, true, "bob").await.unwrap();
    let commits = store.commits();
    assert_eq!(commits.len(), before + 1, "one commit");
    let last = commits.last().unwrap();
    assert_eq!(last.path, APP);
    assert_eq!(last.content, None);
    assert_eq!(last.also_removed, [RECORD]);
    assert!(
        last.message
            .starts_with("Delete workspace app-prod (workspaces/app-prod.tfstate) by bob"),
        "{}",
        last.message
    );
    assert!(store.file(APP).is_none() && store.file(RECORD).is_none());
    assert!(matches!(
        spaces.read(&app, None).await,
        Err(WorkspaceError::NotFound(_))
    ));
    assert!(matches!(
        spaces.delete(&app, true, "bob").await,
        Err(WorkspaceError::NotFound(_))
    ));

    // A workspace with only a record is deleted without force.
    let empty = name("empty");
    spaces.create(&empty, Vec::new(), "alice").await.unwrap();
    spaces.delete(&empty, false, "alice").await.unwrap();
    assert!(store.file(".gitstate/workspaces/empty.json").is_none());
}

#[tokio::test]
async fn an_emptied_state_is_deleted_without_force_as_hcp_terraform_does() {
    let (backend, store) = (Backend::default(), MemoryStore::named("default"));
    let spaces = Workspaces::on(&backend, store.as_ref());
    let app = name("app-prod");
    spaces.create(&app, Vec::new(), "alice").await.unwrap();
    let alice = holder("token-a", "alice");
    for (serial, body) in [(1, managing_one(1)), (2, state(2))] {
        spaces.lock(&app, &alice, "apply").await.unwrap();
        let checked = backend.check(body, false).unwrap();
        spaces
            .write_state(&app, &checked, &alice, &caller("alice"))
            .await
            .unwrap();
        spaces.unlock(&app, &alice).await.unwrap();
        assert_eq!(store.commits_of(APP).len(), serial);
    }
    // `terraform destroy` left a state without resources: the safe delete takes it.
    spaces.delete(&app, false, "alice").await.unwrap();
    assert_eq!(store.file(APP), None);
    assert_eq!(store.file(RECORD), None);
    assert_eq!(
        store.commits_of(APP).len(),
        3,
        "the history stays: two versions and the delete"
    );
}
