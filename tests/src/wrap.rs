//! `gitstate wrap` run as a user types it.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::*;

/// `gitstate wrap WRAP_ARGS -- PROGRAM…` run in `dir`, as a user would type it: the environment is
/// the test's minus every `GITSTATE_*`, git credential, `TF_HTTP_*`, `TF_CLI_ARGS*`, `TF_VAR_*`
/// and proxy variable, plus what Terraform needs offline (`TF_CLI_CONFIG_FILE` =
/// `$GITSTATE_TOOLS/terraformrc`, `CHECKPOINT_DISABLE=1`, `TF_IN_AUTOMATION=1`), `RUST_LOG`
/// (`info` unless set, so failures show the backend's requests) and `env`. stdin is closed.
pub fn wrap_command(
    dir: &Path,
    wrap_args: &[&str],
    program: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let mut cmd = Command::new(gitstate_bin());
    cmd.arg("wrap")
        .args(wrap_args)
        .arg("--")
        .args(program)
        .current_dir(dir)
        .stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy().to_string();
        if k.starts_with("GITSTATE_")
            || k == "GIT_USERNAME"
            || k == "GIT_PASSWORD"
            || k == "GITHUB_TOKEN"
            || crate::terraform::steers_terraform(&k)
        {
            cmd.env_remove(&key);
        }
    }
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    cmd.env("TF_CLI_CONFIG_FILE", tools_dir().join("terraformrc"))
        .env("CHECKPOINT_DISABLE", "1")
        .env("TF_IN_AUTOMATION", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Removes from `cmd`'s environment what would configure gitstate behind a test's back: every
/// `GITSTATE_*` and `SOPS_*` variable and the git credential variables.
pub fn without_gitstate_env(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("GITSTATE_")
            || k.starts_with("SOPS_")
            || k.starts_with("TF_BACKEND_")
            || k == "GIT_USERNAME"
            || k == "GIT_PASSWORD"
            || k == "GITHUB_TOKEN"
        {
            cmd.env_remove(&key);
        }
    }
}

/// `gitstate ARGS` (an operator command: `history`, `restore`, `locks`, `unlock`, `catalog …`)
/// run in `dir` as a user would type it: the environment is the test's minus every
/// `GITSTATE_*`, `SOPS_*` and git credential variable, plus `env`; stdin is closed. Run it with
/// [`run_captured`].
pub fn gitstate_command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(gitstate_bin());
    cmd.args(args).current_dir(dir).stdin(Stdio::null());
    without_gitstate_env(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `gitstate ARGS` (see [`gitstate_command`]) to the end, at most 5 minutes.
pub fn gitstate_run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> TfOutput {
    run_captured(
        gitstate_command(dir, args, env),
        &format!("gitstate {}", args.join(" ")),
        Duration::from_secs(300),
    )
}

/// Runs `cmd` (from [`wrap_command`]) to the end with stdout/stderr captured; panics with the
/// output so far when it runs longer than `timeout`. `args` in the result is `describe`.
pub fn run_captured(mut cmd: Command, describe: &str, timeout: Duration) -> TfOutput {
    let logs = tempfile::tempdir().expect("tempdir");
    let out_path = logs.path().join("stdout");
    let err_path = logs.path().join("stderr");
    cmd.stdout(fs::File::create(&out_path).expect("create stdout file"))
        .stderr(fs::File::create(&err_path).expect("create stderr file"));
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {describe}: {e}"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "`{describe}` ran longer than {timeout:?}; output so far:\n{}{}",
                fs::read_to_string(&out_path).unwrap_or_default(),
                fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let read = |p: &Path| String::from_utf8_lossy(&fs::read(p).unwrap_or_default()).into_owned();
    TfOutput {
        args: vec![describe.to_string()],
        code: status.code(),
        stdout: read(&out_path),
        stderr: read(&err_path),
    }
}
