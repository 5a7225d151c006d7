//! A server's states checked with plain git, and the Terraform lock scenario.

use std::fs;
use std::path::PathBuf;

use crate::*;

/// A running gitstate and the bare repository on this machine where its states land (whatever the
/// transport between them), for plain-git checks.
pub struct StateRepo {
    pub server: Gitstate,
    /// The bare repository holding the states (on this machine, whatever the transport).
    pub git_dir: PathBuf,
    /// A URL plain git can ls-remote (credentials included), for remotes.
    pub remote_url: Option<String>,
    /// Commits on main before any state was written (the seed commit).
    pub base_commits: usize,
    /// Other logs shown with every failure (the git server's): name, file.
    pub logs: Vec<(String, PathBuf)>,
}

impl StateRepo {
    pub fn state_url(&self, path: &str) -> String {
        self.server.state_url("default", path)
    }

    /// Context appended to every assertion: the server's log, then each of `logs`.
    pub fn ctx(&self) -> String {
        let mut ctx = format!("\n--- gitstate log\n{}", self.server.log());
        for (name, file) in &self.logs {
            ctx.push_str(&format!(
                "\n--- {name}\n{}",
                fs::read_to_string(file).unwrap_or_default()
            ));
        }
        ctx
    }

    /// Lock branches, seen both in the repository and (for remotes) through `git ls-remote`.
    pub fn lock_refs(&self) -> Vec<String> {
        let mut refs = if self.git_dir.exists() {
            refs_under(&self.git_dir, "refs/heads/locks")
        } else {
            Vec::new()
        };
        if let Some(url) = &self.remote_url {
            let remote: Vec<String> = ls_remote(url)
                .into_iter()
                .map(|(_, r)| r)
                .filter(|r| r.starts_with("refs/heads/locks/"))
                .collect();
            assert_eq!(
                refs, remote,
                "the repository and ls-remote disagree about locks"
            );
            refs = remote;
        }
        refs
    }

    /// The subjects of the commits touching `path` on main, newest first.
    pub fn history(&self, path: &str) -> Vec<String> {
        git_log_subjects(&self.git_dir, "main", path)
    }

    pub fn commits_on_main(&self) -> usize {
        git(
            None,
            &[
                &format!("--git-dir={}", self.git_dir.display()),
                "rev-list",
                "--count",
                "main",
            ],
        )
        .trim()
        .parse()
        .unwrap()
    }
}

/// GET the state: (serial, lineage, raw body, resources count).
pub fn get_state(url: &str, ctx: &str) -> (u64, String, String, usize) {
    let (status, body) =
        http("GET", url, None, None).unwrap_or_else(|e| panic!("GET {url}: {e}{ctx}"));
    assert_eq!(status, 200, "GET {url} after apply: {body}{ctx}");
    let v: serde_json::Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("GET body is not JSON ({e}): {body}{ctx}"));
    let serial = v["serial"]
        .as_u64()
        .unwrap_or_else(|| panic!("no serial in {body}"));
    let lineage = v["lineage"].as_str().unwrap_or_default().to_string();
    let resources = v["resources"].as_array().map(|a| a.len()).unwrap_or(0);
    (serial, lineage, body, resources)
}

/// Parses `Update prod.tfstate (serial N) by WHO` → (N, WHO).
pub fn parse_update(subject: &str, path: &str) -> Option<(u64, String)> {
    let rest = subject.strip_prefix(&format!("Update {path} (serial "))?;
    let (n, rest) = rest.split_once(") by ")?;
    let who = rest.trim();
    if who.is_empty() {
        return None;
    }
    Some((n.parse().ok()?, who.to_string()))
}

/// Every commit touching `path` on main is an `Update … (serial N) by …` commit by gitstate that
/// changes only `path`, with serials increasing; the newest holds `latest_serial` and its file is
/// byte-identical to what GET returned.
pub fn check_history(s: &StateRepo, path: &str, latest_serial: u64, get_body: &str) -> usize {
    let ctx = s.ctx();
    let subjects = s.history(path);
    assert!(
        !subjects.is_empty(),
        "no commit touches {path} on main{ctx}"
    );
    let mut serials = Vec::new();
    for subject in &subjects {
        let (serial, who) = parse_update(subject, path)
            .unwrap_or_else(|| panic!("commit subject {subject:?} is not `Update {path} (serial N) by WHO`; all: {subjects:#?}{ctx}"));
        // Terraform writes while holding its own lock, whose Who is user@hostname.
        assert_eq!(
            who,
            terraform_who(),
            "commit {subject:?}: WHO must be the lock holder's Who{ctx}"
        );
        serials.push(serial);
    }
    assert_eq!(
        serials[0], latest_serial,
        "newest commit's serial vs GET's serial; subjects {subjects:#?}{ctx}"
    );
    assert!(
        serials.windows(2).all(|w| w[0] > w[1]),
        "serials must increase from commit to commit (newest first here): {serials:?}{ctx}"
    );
    let gd = format!("--git-dir={}", s.git_dir.display());
    for commit in git(None, &[&gd, "rev-list", "main", "--", path]).lines() {
        let changed = git(
            None,
            &[
                &gd,
                "diff-tree",
                "--root",
                "--no-commit-id",
                "--name-only",
                "-r",
                commit,
            ],
        );
        assert_eq!(
            changed.trim(),
            path,
            "commit {commit} must change only {path}{ctx}"
        );
        let committer = git(None, &[&gd, "log", "-1", "--format=%cn", commit]);
        assert_eq!(committer.trim(), "gitstate", "committer of {commit}{ctx}");
    }
    let stored =
        git_show(&s.git_dir, "main", path).unwrap_or_else(|| panic!("main:{path} missing{ctx}"));
    assert_eq!(
        String::from_utf8_lossy(&stored),
        get_body,
        "main:{path} must be exactly what GET returns{ctx}"
    );
    subjects.len()
}

/// How the Terraform configuration addresses the lock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LockStyle {
    /// `lock_address = unlock_address = /state/…` with the LOCK and UNLOCK verbs (the default).
    WebDav,
    /// `/lock/…` with `lock_method = "POST"`, `unlock_method = "DELETE"`, for gateways that
    /// refuse WebDAV verbs.
    PostDelete,
}

/// The Terraform scenario every end-to-end remote goes through, on `prod.tfstate` of repository
/// `default` of `s` (`target` names the remote in messages): init → apply → plan shows no changes
/// → commits `Update prod.tfstate (serial N) by …` on main and no `locks/` branch left → a replayed
/// POST commits nothing → someone else takes the lock (`ID=other-holder`, a request sent directly)
/// → apply fails with "Error acquiring the state lock" naming the holder, and changes nothing →
/// `terraform force-unlock -force other-holder` → apply succeeds with a new serial and the same
/// lineage → plan shows no changes. Every step is checked with plain git.
pub fn terraform_lock_scenario(tf: &Terraform, s: &StateRepo, target: &str, style: LockStyle) {
    const STATE: &str = "prod.tfstate";
    const OTHER_ID: &str = "other-holder";
    const OTHER_WHO: &str = "someone@else";
    println!("Terraform {} against {target}, locks {style:?}", tf.version);
    let url = s.state_url(STATE);
    let lock_url = match style {
        LockStyle::WebDav => url.clone(),
        LockStyle::PostDelete => format!("{}/lock/default/{STATE}", s.server.base_url()),
    };
    let work = tempfile::Builder::new()
        .prefix("gitstate-tf")
        .tempdir()
        .unwrap();
    let dir = work.path();
    let mut backend = HttpBackend::new(&url);
    if style == LockStyle::PostDelete {
        backend.lock_address = Some(lock_url.clone());
        backend.unlock_address = Some(lock_url.clone());
        backend.extra = vec![
            ("lock_method".into(), "\"POST\"".into()),
            ("unlock_method".into(), "\"DELETE\"".into()),
        ];
    }
    write_main_tf(dir, &backend, 2, "g1");
    let tag = format!("Terraform {} / {target} / {style:?}", tf.version);

    // 1. init, apply, plan.
    let out = tf.init(dir);
    out.expect_code(0, &format!("{tag}: init{}", s.ctx()));
    let out = tf.apply(dir);
    out.expect_code(0, &format!("{tag}: first apply{}", s.ctx()));
    assert!(
        out.stdout
            .contains("Apply complete! Resources: 2 added, 0 changed, 0 destroyed."),
        "{tag}: {}",
        out.stdout
    );

    let (serial1, lineage, body1, resources) = get_state(&url, &s.ctx());
    assert_eq!(
        resources, 2,
        "{tag}: state after apply has 2 resources: {body1}"
    );
    let commits_after_apply = check_history(s, STATE, serial1, &body1);
    assert_eq!(
        s.commits_on_main(),
        s.base_commits + commits_after_apply,
        "{tag}: only state commits on main{}",
        s.ctx()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: no lock left after apply{}",
        s.ctx()
    );

    let out = tf.plan(dir);
    out.expect_code(
        0,
        &format!("{tag}: plan after apply must show no changes{}", s.ctx()),
    );
    assert!(out.stdout.contains("No changes."), "{tag}: {}", out.stdout);
    let main_commits = s.commits_on_main();
    assert_eq!(
        main_commits,
        s.base_commits + commits_after_apply,
        "{tag}: plan must not commit{}",
        s.ctx()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: no lock left after plan{}",
        s.ctx()
    );

    // A replayed POST of the stored body (Terraform retries 5xx) is a 200 without a new commit.
    let (status, body) = http("POST", &url, Some(&body1), None).unwrap();
    assert_eq!(
        status,
        200,
        "{tag}: replayed POST of the same state: {body}{}",
        s.ctx()
    );
    // (git log -- PATH hides a commit that leaves the file as it was: count every commit on main.)
    assert_eq!(
        s.commits_on_main(),
        main_commits,
        "{tag}: a replayed POST must not commit{}",
        s.ctx()
    );

    // 2. Someone else holds the lock.
    let lock_method = match style {
        LockStyle::WebDav => "LOCK",
        LockStyle::PostDelete => "POST",
    };
    let (status, body) = http(
        lock_method,
        &lock_url,
        Some(&lock_info(OTHER_ID, OTHER_WHO, "OperationTypeApply")),
        None,
    )
    .unwrap();
    assert_eq!(status, 200, "{tag}: direct LOCK: {body}{}", s.ctx());
    let lock_ref = format!("refs/heads/locks/{STATE}");
    assert_eq!(
        s.lock_refs(),
        vec![lock_ref.clone()],
        "{tag}: the lock is a branch{}",
        s.ctx()
    );
    let lock_file = git_show(&s.git_dir, &lock_ref, &format!("{STATE}.lock"))
        .unwrap_or_else(|| panic!("{tag}: {lock_ref}:{STATE}.lock missing{}", s.ctx()));
    let lock_json: serde_json::Value =
        serde_json::from_slice(&lock_file).expect("lock file is JSON");
    assert_eq!(lock_json["ID"], OTHER_ID, "{tag}: lock file {lock_json}");
    assert_eq!(lock_json["Who"], OTHER_WHO, "{tag}: lock file {lock_json}");
    let lock_subject = git(
        None,
        &[
            &format!("--git-dir={}", s.git_dir.display()),
            "log",
            "-1",
            "--format=%s",
            &lock_ref,
        ],
    );
    assert_eq!(
        lock_subject.trim(),
        format!("Lock {STATE}: OperationTypeApply by {OTHER_WHO} ({OTHER_ID})"),
        "{tag}: lock commit message"
    );

    write_main_tf(dir, &backend, 2, "g2");
    let out = tf.apply(dir);
    assert_ne!(
        out.code,
        Some(0),
        "{tag}: apply must fail while another ID holds the lock:\n{}{}",
        out.combined(),
        s.ctx()
    );
    let text = out.combined();
    assert!(
        text.contains("Error acquiring the state lock"),
        "{tag}: lock error expected:\n{text}{}",
        s.ctx()
    );
    // The http client reads the holder's LockInfo from the 423 body: "…already locked: ID=<holder>".
    // (Terraform 1.0 to 1.11 then print their own LockInfo below it, so the holder's Who is not shown.)
    assert!(
        text.contains(&format!("ID={OTHER_ID}")),
        "{tag}: the output names the holder's ID (from the 423 body):\n{text}"
    );
    let (serial_locked, _, body_locked, _) = get_state(&url, &s.ctx());
    assert_eq!(
        (serial_locked, &body_locked),
        (serial1, &body1),
        "{tag}: a refused apply must not change the state"
    );
    assert_eq!(
        s.commits_on_main(),
        main_commits,
        "{tag}: a refused apply must not commit"
    );
    assert_eq!(
        s.lock_refs(),
        vec![lock_ref.clone()],
        "{tag}: the other holder keeps its lock{}",
        s.ctx()
    );

    // 3. force-unlock, then apply works again.
    let out = tf.force_unlock(dir, OTHER_ID);
    out.expect_code(0, &format!("{tag}: force-unlock{}", s.ctx()));
    assert!(
        out.combined().contains("successfully unlocked"),
        "{tag}: {}",
        out.combined()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: force-unlock removes the lock branch{}",
        s.ctx()
    );

    let out = tf.apply(dir);
    out.expect_code(0, &format!("{tag}: apply after force-unlock{}", s.ctx()));
    assert!(
        out.stdout
            .contains("Apply complete! Resources: 2 added, 0 changed, 2 destroyed."),
        "{tag}: {}",
        out.stdout
    );
    let (serial2, lineage2, body2, _) = get_state(&url, &s.ctx());
    assert!(
        serial2 > serial1,
        "{tag}: serial must grow ({serial1} → {serial2})"
    );
    assert_eq!(lineage2, lineage, "{tag}: lineage is kept");
    assert!(
        body2.contains("\"g2\""),
        "{tag}: the new state holds the new triggers"
    );
    let commits_after_second = check_history(s, STATE, serial2, &body2);
    assert!(
        commits_after_second > commits_after_apply,
        "{tag}: the second apply committed"
    );
    assert_eq!(
        s.commits_on_main(),
        s.base_commits + commits_after_second,
        "{tag}: only state commits on main{}",
        s.ctx()
    );
    assert_eq!(
        s.lock_refs(),
        Vec::<String>::new(),
        "{tag}: no lock left after the second apply{}",
        s.ctx()
    );

    tf.plan(dir)
        .expect_code(0, &format!("{tag}: final plan shows no changes{}", s.ctx()));
    println!("{tag}: ok; history:\n  {}", s.history(STATE).join("\n  "));
}
