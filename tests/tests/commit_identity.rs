//! Commit identity (issue 35, DESIGN §6 `committer_name`/`committer_email`): a git server whose
//! pre-receive hook admits only commits committed by a named bot (what a protected branch with a
//! push rule does) accepts gitstate's writes when gitstate is configured with that identity, and
//! refuses them otherwise: the refusal is a 502 whose body quotes the hook's own sentence, and
//! nothing is written. The author of each commit is the caller (the lock holder's `Who`).
//!
//! Real Terraform 1.15.5 through `gitstate serve` on lighttpd + `git http-backend`, whose
//! repository runs the hook on every push (state branch, lock branches, the write queue's refs).

use std::fs;
use std::path::Path;

use gitstate_tests::*;

const STATE: &str = "prod.tfstate";
const USER: &str = "tfstate-bot";
const PASSWORD: &str = "commit-identity-pw";
const BOT: &str = "tfstate-bot <bot@acme.test>";
/// The flags that make gitstate commit as [`BOT`].
const BOT_FLAGS: [&str; 4] = [
    "--committer-name",
    "tfstate-bot",
    "--committer-email",
    "bot@acme.test",
];

/// Installs a pre-receive hook that runs `check` (shell) for every new commit `$c` pushed to
/// `$ref`; a failing check refuses the push with what it printed.
fn pre_receive(git_dir: &Path, check: &str) {
    let hook = git_dir.join("hooks/pre-receive");
    fs::create_dir_all(hook.parent().unwrap()).unwrap();
    fs::write(
        &hook,
        format!(
            r#"#!/bin/sh
zero=0000000000000000000000000000000000000000
while read old new ref; do
  [ "$new" = "$zero" ] && continue
  for c in $(git rev-list "$new" --not --all); do
{check}
  done
done
"#
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A push rule that refuses any pushed commit whose committer is not [`BOT`], saying which.
fn only_the_bot_may_push(git_dir: &Path) {
    pre_receive(
        git_dir,
        &format!(
            r#"    who=$(git log -1 --format='%cn <%ce>' "$c")
    if [ "$who" != "{BOT}" ]; then
      echo "push rule: commit $c on $ref is by $who; only {BOT} may push here" >&2
      exit 1
    fi"#
        ),
    );
}

/// Terraform `init` and `apply` of two resources through `server` succeed (`what` names the
/// case in a failure).
fn apply_through(tf: &Terraform, server: &Gitstate, what: &str) {
    let work = tempfile::tempdir().unwrap();
    write_main_tf(
        work.path(),
        &HttpBackend::new(&server.state_url("default", STATE)),
        2,
        "admitted",
    );
    tf.init(work.path()).expect_code(0, &format!("init {what}"));
    tf.apply(work.path()).expect_code(
        0,
        &format!("apply {what}\n--- gitstate log\n{}", server.log()),
    );
}

/// A LOCK through `server` is answered 502, the server's log quoting the hook's sentence `quote`
/// under the answer's request id (the answer itself holds no word of the git server), and nothing
/// is written to `git_dir`.
fn a_lock_is_refused_quoting_the_hook(server: &Gitstate, git_dir: &Path, quote: &str) {
    let (status, body) = http(
        "LOCK",
        &server.state_url("default", STATE),
        Some(&lock_info("direct", "ops@laptop", "OperationTypeApply")),
        None,
    )
    .unwrap();
    assert_eq!(status, 502, "{body}");
    assert!(
        !body.contains(quote),
        "the answer quotes the git server: {body}"
    );
    assert!(
        server.logged(&request_id_of(&body), quote),
        "the log quotes the hook under the request id: {body}\n--- gitstate log\n{}",
        server.log()
    );
    assert!(
        refs_under(git_dir, "refs/").is_empty(),
        "nothing was written: {:?}",
        refs_under(git_dir, "refs/")
    );
}

#[test]
fn a_push_rule_for_a_named_bot_admits_gitstate_configured_as_that_bot() {
    let tf = Terraform::installed("1.15.5");
    let repos = tempfile::tempdir().unwrap();
    let git_dir = bare_repo(repos.path(), "states");
    only_the_bot_may_push(&git_dir);
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let repository = format!("default={}", git_server.url("states"));
    let git_env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];

    // gitstate's own identity: the hook refuses the lock's push, Terraform shows its sentence.
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&["--repository", &repository], &git_env, cwd.path());
    let work = tempfile::tempdir().unwrap();
    write_main_tf(
        work.path(),
        &HttpBackend::new(&server.state_url("default", STATE)),
        1,
        "refused",
    );
    tf.init(work.path()).expect_code(0, "init");
    let refused = tf.apply(work.path());
    assert_ne!(
        refused.code,
        Some(0),
        "the push rule let gitstate's own identity through"
    );
    // Terraform retries a 502 and then says only that it gave up; the answer itself (and the
    // log) carry the hook's sentence.
    a_lock_is_refused_quoting_the_hook(
        &server,
        &git_dir,
        "only tfstate-bot <bot@acme.test> may push here",
    );
    drop(server);

    // The same, as the bot (flags here; GITSTATE_COMMITTER_NAME/_EMAIL or the file's
    // committer_name/committer_email alike).
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &[&["--repository", repository.as_str()][..], &BOT_FLAGS[..]].concat(),
        &git_env,
        cwd.path(),
    );
    apply_through(&tf, &server, "as the bot");
    let identities = git(
        Some(&git_dir),
        &["log", "--format=%cn <%ce>|%an <%ae>", "main"],
    );
    assert!(!identities.trim().is_empty());
    // Committed by the bot, authored by the caller: Terraform's `Who` (user@host), which holds
    // the lock during the apply.
    let who = terraform_who();
    for line in identities.lines() {
        assert_eq!(line, format!("{BOT}|{who} <{who}>"), "{identities}");
    }
    assert!(
        refs_under(&git_dir, "refs/heads/locks/").is_empty(),
        "the lock was released"
    );

    // A write without a lock is authored by the caller's user name (a team's writer in team
    // mode, the git user in pass-through); the message is unchanged.
    let (status, body) = http(
        "POST",
        &server.state_url("default", "other.tfstate"),
        Some(r#"{"version":4,"serial":1,"lineage":"l-1","outputs":{},"resources":[]}"#),
        Some(("payments", "unused-in-server-mode")),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let other = git(
        Some(&git_dir),
        &[
            "log",
            "-1",
            "--format=%an <%ae>|%cn <%ce>|%s",
            "main",
            "--",
            "other.tfstate",
        ],
    );
    assert_eq!(
        other.trim(),
        format!("payments <>|{BOT}|Update other.tfstate (serial 1) by payments")
    );
}

/// How a "require signed commits" rule checks a commit: git's `-c` settings and environment
/// for `git verify-commit`, and what git says for a good signature.
struct Verifier {
    config: Vec<String>,
    env: Vec<(String, String)>,
    good: &'static str,
}

impl Verifier {
    /// `git verify-commit -v commit` in `git_dir`.
    fn verify(&self, git_dir: &Path, commit: &str) -> (bool, String) {
        let mut command = std::process::Command::new("git");
        command.arg("-C").arg(git_dir);
        for setting in &self.config {
            command.args(["-c", setting]);
        }
        let out = command
            .args(["verify-commit", "-v", commit])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// A "require signed commits" rule: refuses any pushed commit `verifier` does not accept,
/// saying which.
fn only_signed_commits_may_push(git_dir: &Path, verifier: &Verifier) {
    let env: String = verifier
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v} "))
        .collect();
    let config: String = verifier.config.iter().map(|c| format!("-c {c} ")).collect();
    pre_receive(
        git_dir,
        &format!(
            r#"    if ! {env}git {config}verify-commit "$c" 2>/dev/null; then
      echo "signing rule: commit $c on $ref has no signature by a trusted key" >&2
      exit 1
    fi"#
        ),
    );
}

/// Signed commits (issue 35), with an SSH key: a git server that admits only commits signed by
/// the bot's key (`allowed_signers`) refuses gitstate's unsigned writes (a 502 quoting the hook,
/// nothing written) and accepts them with `--signing-key`; every commit on the branch then
/// verifies with `git verify-commit`, as GitHub and GitLab verify SSH signatures.
#[test]
fn a_require_signed_commits_rule_admits_gitstate_with_an_ssh_signing_key() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("bot_ed25519");
    ssh_keygen(&key);
    let public = fs::read_to_string(keys.path().join("bot_ed25519.pub")).unwrap();
    let allowed = keys.path().join("allowed_signers");
    fs::write(&allowed, format!("bot@acme.test {public}")).unwrap();
    signed_commits_are_admitted(
        &key,
        &Verifier {
            config: vec![format!("gpg.ssh.allowedSignersFile={}", allowed.display())],
            env: Vec::new(),
            good: "Good \"git\" signature for bot@acme.test",
        },
    );
}

/// The same with an armored OpenPGP secret key (signed through gpg; the rule checks with the
/// bot's public key in its keyring).
#[test]
fn a_require_signed_commits_rule_admits_gitstate_with_an_openpgp_signing_key() {
    let gnupg = gitstate_tests::keys::GnuPg::new("bot");
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("bot.asc");
    fs::write(&key, gnupg.export_secret_key()).unwrap();
    signed_commits_are_admitted(
        &key,
        &Verifier {
            config: Vec::new(),
            env: vec![("GNUPGHOME".into(), gnupg.home_str().into())],
            good: "Good signature",
        },
    );
}

/// Unsigned writes are refused by the rule `verifier` checks; writes signed with `key` land,
/// and every commit verifies.
fn signed_commits_are_admitted(key: &Path, verifier: &Verifier) {
    let tf = Terraform::installed("1.15.5");
    let repos = tempfile::tempdir().unwrap();
    let git_dir = bare_repo(repos.path(), "states");
    only_signed_commits_may_push(&git_dir, verifier);
    let git_server = GitHttpServer::start(repos.path(), USER, PASSWORD);
    let repository = format!("default={}", git_server.url("states"));
    let git_env = [("GIT_USERNAME", USER), ("GIT_PASSWORD", PASSWORD)];
    let identity = [&["--repository", repository.as_str()][..], &BOT_FLAGS[..]].concat();

    // Unsigned: the hook refuses the lock's push; the answer quotes it and nothing is written.
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&identity, &git_env, cwd.path());
    a_lock_is_refused_quoting_the_hook(&server, &git_dir, "has no signature by a trusted key");
    drop(server);

    // Signed with the bot's key (GITSTATE_SIGNING_KEY or the file's signing_key alike).
    let key_arg = key.display().to_string();
    let mut args = identity.to_vec();
    args.extend(["--signing-key", key_arg.as_str()]);
    let cwd = tempfile::tempdir().unwrap();
    let server = Gitstate::start(&args, &git_env, cwd.path());
    apply_through(&tf, &server, "with a signing key");
    let commits = git(Some(&git_dir), &["rev-list", "main"]);
    assert!(!commits.trim().is_empty());
    for commit in commits.lines() {
        let (verified, said) = verifier.verify(&git_dir, commit);
        assert!(verified, "{commit}: {said}");
        assert!(said.contains(verifier.good), "{said}");
    }
    let log = server.log();
    assert!(!log.contains("PRIVATE KEY"), "the key reached the log");
    assert!(log.contains("commits are signed with this key"), "{log}");
}
