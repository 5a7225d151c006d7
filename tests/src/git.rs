//! Plain git, to make repositories and to check what is stored.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::*;

/// Runs `git ARGS` in `dir` (None: the current directory) and returns stdout; panics with the
/// output when git fails. Global/system git config is ignored so a developer's config can't leak in.
pub fn git(dir: Option<&Path>, args: &[&str]) -> String {
    let out = git_output(dir, args);
    if !out.status.success() {
        panic!(
            "git {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `git ARGS` and returns the raw output, whatever the exit code.
pub fn git_output(dir: Option<&Path>, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(require_tool("git"));
    cmd.args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_AUTHOR_NAME", "gitstate-tests")
        .env("GIT_AUTHOR_EMAIL", "tests@gitstate.invalid")
        .env("GIT_COMMITTER_NAME", "gitstate-tests")
        .env("GIT_COMMITTER_EMAIL", "tests@gitstate.invalid")
        .stdin(Stdio::null());
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    cmd.output().expect("run git")
}

/// `git init --bare --initial-branch=main DIR/NAME.git`, with `http.receivepack` enabled and
/// `uploadpack.allowFilter` on (as GitHub and GitLab offer it: reads fetch partially, DESIGN
/// §9); returns the repository's path.
pub fn bare_repo(dir: &Path, name: &str) -> PathBuf {
    let path = bare_repo_without_filter(dir, name);
    git(Some(&path), &["config", "uploadpack.allowFilter", "true"]);
    path
}

/// [`bare_repo`] without `uploadpack.allowFilter` (git's default): reads fall back to fetching
/// whole trees.
pub fn bare_repo_without_filter(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.git"));
    git(
        None,
        &[
            "init",
            "--quiet",
            "--bare",
            "--initial-branch=main",
            path.to_str().unwrap(),
        ],
    );
    git(Some(&path), &["config", "http.receivepack", "true"]);
    path
}

/// Pushes a new root commit holding exactly `files` (path, content) to `branch` of the bare
/// repository `repository`, with plain git, as another tool would leave them there (the push is
/// a create: it fails when the branch exists).
pub fn push_root_commit(repository: &Path, branch: &str, files: &[(&str, &[u8])], message: &str) {
    let work = tempfile::tempdir().expect("tempdir");
    git(
        Some(work.path()),
        &["init", "--quiet", "--initial-branch=work"],
    );
    for (path, content) in files {
        let file = work.path().join(path);
        fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
        fs::write(file, content).expect("write");
    }
    git(Some(work.path()), &["add", "."]);
    git(Some(work.path()), &["commit", "--quiet", "-m", message]);
    git(
        Some(work.path()),
        &[
            "push",
            "--quiet",
            repository.to_str().expect("utf-8"),
            &format!("work:refs/heads/{branch}"),
        ],
    );
}

/// Puts one commit (a README) on `main` of the bare repository `repo`, like a repository created
/// on a forge with "initialize with README". Returns the commit id.
pub fn seed_commit(repo: &Path) -> String {
    let work = tempfile::tempdir().expect("tempdir");
    git(
        Some(work.path()),
        &["init", "--quiet", "--initial-branch=main"],
    );
    fs::write(
        work.path().join("README.md"),
        "Terraform states, kept by gitstate.\n",
    )
    .unwrap();
    git(Some(work.path()), &["add", "README.md"]);
    git(
        Some(work.path()),
        &["commit", "--quiet", "-m", "Initial commit"],
    );
    git(
        Some(work.path()),
        &[
            "push",
            "--quiet",
            repo.to_str().unwrap(),
            "main:refs/heads/main",
        ],
    );
    git(Some(work.path()), &["rev-parse", "HEAD"])
        .trim()
        .to_string()
}

/// Subjects of the commits touching `path` on `rev` of the repository at `git_dir`, newest first.
pub fn git_log_subjects(git_dir: &Path, rev: &str, path: &str) -> Vec<String> {
    let out = git(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "log",
            "--format=%s",
            rev,
            "--",
            path,
        ],
    );
    out.lines().map(str::to_string).collect()
}

/// `git for-each-ref --format=%(refname) PREFIX` in `git_dir`.
pub fn refs_under(git_dir: &Path, prefix: &str) -> Vec<String> {
    let out = git(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "for-each-ref",
            "--format=%(refname)",
            prefix,
        ],
    );
    out.lines().map(str::to_string).collect()
}

/// `git ls-remote URL` as (object id, ref name) pairs.
pub fn ls_remote(url: &str) -> Vec<(String, String)> {
    let out = git(None, &["ls-remote", url]);
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(id, name)| (id.to_string(), name.to_string()))
        .collect()
}

/// `len` characters drawn from `alphabet` by a xorshift generator seeded with `seed`: noise that
/// compresses poorly (hex to about half, base64's alphabet hardly at all), the same for a seed.
pub fn noise(seed: u64, len: usize, alphabet: &[u8]) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(alphabet[(x >> 32) as usize % alphabet.len()])
        })
        .collect()
}

/// `git --git-dir=GIT_DIR show REV:PATH`, or None when it does not exist.
pub fn git_show(git_dir: &Path, rev: &str, path: &str) -> Option<Vec<u8>> {
    let out = git_output(
        None,
        &[
            &format!("--git-dir={}", git_dir.display()),
            "show",
            &format!("{rev}:{path}"),
        ],
    );
    out.status.success().then_some(out.stdout)
}
