//! End to end: `gitstate wrap … -- terraform …` with real Terraform (1.15.5 and 1.0.3) against a
//! smart-HTTP remote (lighttpd + git http-backend with basic auth), checked with plain git.
//!
//! - init → apply → plan -detailed-exitcode (0), each run through the wrapper on the same fixed
//!   address, with a `backend "http" {}` block and with no backend block (and `-chdir=DIR`): the
//!   state is committed at `--state PATH` on main, no `locks/` ref remains, the generated
//!   `gitstate_backend_override.tf.json` is gone after every run, and nothing under `.terraform/`
//!   holds a password.
//! - Terraform's own exit codes (2 from plan -detailed-exitcode, 1 for an invalid configuration)
//!   come back from the wrapper unchanged; signal death is 128+N; a missing program is 127.
//! - Ctrl+C (SIGINT to the whole process group, as a terminal sends it) during a long apply:
//!   Terraform stops gracefully, the wrapper exits with its code, the file is gone, the lock is
//!   released, and the next plan proceeds. SIGTERM to the wrapper alone is forwarded to Terraform
//!   with the same result; SIGINT to the wrapper alone is not (the apply finishes, all cleaned up).
//! - A busy address: a one-sentence error naming it and `--listen`, exit 125, nothing run, no file.
//! - A foreign file with the generated file's name is never overwritten, nor the file of another
//!   wrap still running in the same directory; one left by a killed wrap is replaced.
//! - `gitstate wrap --help` has a copy-paste example.
//!
//! Each test picks its own free port for `--listen`. Needs `scripts/install-test-deps.sh` and a
//! built `gitstate` binary (see gitstate_tests docs).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gitstate_tests::*;

const GIT_USER: &str = "tfstate-bot";
const GIT_PASS: &str = "p4ss:w0rd";
const OVERRIDE: &str = "gitstate_backend_override.tf.json";
const TIMEOUT: Duration = Duration::from_secs(300);

/// A smart-HTTP remote, a working directory and a fixed `--listen` address for one test.
struct Setup {
    http: GitHttpServer,
    git_dir: PathBuf,
    listen: String,
    work: TempDir,
    cache: TempDir,
    _repos: TempDir,
}

impl Setup {
    fn new() -> Setup {
        let repos = tempfile::Builder::new()
            .prefix("gitstate-repos")
            .tempdir()
            .unwrap();
        let git_dir = bare_repo(repos.path(), "states");
        let http = GitHttpServer::start(repos.path(), GIT_USER, GIT_PASS);
        Setup {
            http,
            git_dir,
            listen: format!("127.0.0.1:{}", free_port()),
            work: tempfile::Builder::new()
                .prefix("gitstate-wrap")
                .tempdir()
                .unwrap(),
            cache: tempfile::Builder::new()
                .prefix("gitstate-cache")
                .tempdir()
                .unwrap(),
            _repos: repos,
        }
    }

    fn dir(&self) -> &Path {
        self.work.path()
    }

    fn remote(&self) -> String {
        self.http.url("states")
    }

    /// `http://USER:PASS@…` for plain git (the ':' in the password percent-encoded).
    fn remote_with_credentials(&self) -> String {
        format!(
            "http://{GIT_USER}:{}@127.0.0.1:{}/git/states.git",
            GIT_PASS.replace(':', "%3A"),
            self.http.port()
        )
    }

    /// `gitstate wrap --listen … --repository … --state STATE -- PROGRAM…` in `dir`, with the git
    /// credentials in GIT_USERNAME/GIT_PASSWORD.
    fn command(&self, dir: &Path, state: &str, program: &[&str]) -> std::process::Command {
        let cache = self.cache.path().to_string_lossy().into_owned();
        wrap_command(
            dir,
            &[
                "--listen",
                &self.listen,
                "--repository",
                &self.remote(),
                "--state",
                state,
            ],
            program,
            &[
                ("GIT_USERNAME", GIT_USER),
                ("GIT_PASSWORD", GIT_PASS),
                ("GITSTATE_CACHE_DIR", &cache),
            ],
        )
    }

    fn run(&self, dir: &Path, state: &str, program: &[&str]) -> TfOutput {
        run_captured(
            self.command(dir, state, program),
            &format!("gitstate wrap … -- {}", program.join(" ")),
            TIMEOUT,
        )
    }

    /// `gitstate wrap … -- terraform ARGS`.
    fn terraform(&self, tf: &Terraform, dir: &Path, state: &str, args: &[&str]) -> TfOutput {
        let bin = tf.bin.to_string_lossy().into_owned();
        let mut program = vec![bin.as_str()];
        program.extend_from_slice(args);
        self.run(dir, state, &program)
    }

    /// Lock refs on the remote, as `git ls-remote` shows them.
    fn remote_locks(&self) -> Vec<String> {
        ls_remote(&self.remote_with_credentials())
            .into_iter()
            .map(|(_, r)| r)
            .filter(|r| r.starts_with("refs/heads/locks/"))
            .collect()
    }
}

/// `main.tf` with `null_resource.r0` (and `backend "http" {}` when asked).
fn write_config(dir: &Path, backend_block: bool, generation: &str) {
    let mut tf = String::new();
    if backend_block {
        tf.push_str("terraform {\n  backend \"http\" {}\n}\n\n");
    }
    tf.push_str(&format!(
        "resource \"null_resource\" \"r0\" {{\n  triggers = {{\n    generation = \"{generation}\"\n  }}\n}}\n"
    ));
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("main.tf"), tf).unwrap();
}

#[track_caller]
fn assert_no_override(dir: &Path, after: &str, out: &TfOutput) {
    assert!(
        !dir.join(OVERRIDE).exists(),
        "{OVERRIDE} is still in {} after {after}\n--- stdout\n{}\n--- stderr\n{}",
        dir.display(),
        out.stdout,
        out.stderr
    );
}

/// Nothing Terraform keeps under `.terraform/` names a password: the backend configuration it
/// recorded at init has `password = null` and holds only the addresses.
fn assert_no_password_recorded(dir: &Path) {
    let recorded = fs::read_to_string(dir.join(".terraform/terraform.tfstate"))
        .expect(".terraform/terraform.tfstate after init");
    let v: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    let config = &v["backend"]["config"];
    assert_eq!(v["backend"]["type"], "http", "{recorded}");
    assert!(config["password"].is_null(), "{recorded}");
    assert!(config["username"].is_null(), "{recorded}");
    assert!(
        config["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("http://127.0.0.1:")),
        "{recorded}"
    );
}

/// init → apply → plan (no changes) through the wrapper; then the remote holds the state at
/// `state` and no lock.
fn init_apply_plan(version: &str, backend_block: bool, chdir: bool) {
    let tf = Terraform::installed(version);
    let setup = Setup::new();
    let state = format!("envs/{}/prod.tfstate", version.replace('.', "-"));
    // With -chdir the configuration is in a subdirectory and the wrapper runs one level up.
    let config_dir = if chdir {
        setup.dir().join("stack")
    } else {
        setup.dir().to_path_buf()
    };
    write_config(&config_dir, backend_block, "one");
    let chdir_arg = "-chdir=stack".to_string();
    let with_chdir = |args: &[&'static str]| -> Vec<String> {
        let mut v = Vec::new();
        if chdir {
            v.push(chdir_arg.clone());
        }
        v.extend(args.iter().map(|s| s.to_string()));
        v
    };
    let run = |args: &[&'static str]| {
        let args = with_chdir(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        setup.terraform(&tf, setup.dir(), &state, &args)
    };

    let init = run(&["init", "-input=false", "-no-color"]);
    init.expect_code(0, "wrap -- terraform init");
    assert_no_override(&config_dir, "init", &init);
    assert_no_password_recorded(&config_dir);

    let apply = run(&["apply", "-auto-approve", "-input=false", "-no-color"]);
    apply.expect_code(0, "wrap -- terraform apply");
    assert!(
        apply.stdout.contains("1 added"),
        "apply output: {}",
        apply.stdout
    );
    assert_no_override(&config_dir, "apply", &apply);

    let plan = run(&["plan", "-detailed-exitcode", "-input=false", "-no-color"]);
    plan.expect_code(0, "wrap -- terraform plan -detailed-exitcode (no changes)");
    assert_no_override(&config_dir, "plan", &plan);

    // What a user checks with plain git: the state's history at PATH on main, and no lock.
    let subjects = git_log_subjects(&setup.git_dir, "main", &state);
    assert!(
        !subjects.is_empty() && subjects[0].starts_with(&format!("Update {state} (serial ")),
        "git log -- {state} on the remote: {subjects:?}"
    );
    let stored = git_show(&setup.git_dir, "main", &state).expect("the state file on main");
    let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
    assert_eq!(
        stored["resources"][0]["type"], "null_resource",
        "stored state: {stored}"
    );
    assert_eq!(setup.remote_locks(), Vec::<String>::new(), "locks left");
    assert_no_password_recorded(&config_dir);
}

#[test]
fn tf_1_15_5_backend_block_init_apply_plan() {
    init_apply_plan("1.15.5", true, false);
}

#[test]
fn tf_1_15_5_no_backend_block_init_apply_plan() {
    init_apply_plan("1.15.5", false, false);
}

#[test]
fn tf_1_0_3_backend_block_init_apply_plan() {
    init_apply_plan("1.0.3", true, false);
}

#[test]
fn tf_1_0_3_no_backend_block_chdir_init_apply_plan() {
    init_apply_plan("1.0.3", false, true);
}

/// Terraform's exit codes come back unchanged, and the file is removed whatever happened.
#[test]
fn exit_codes_pass_through() {
    let tf = Terraform::installed("1.15.5");
    let setup = Setup::new();
    let dir = setup.dir();
    let state = "codes.tfstate";
    write_config(dir, true, "one");
    setup
        .terraform(&tf, dir, state, &["init", "-input=false", "-no-color"])
        .expect_code(0, "init");

    // Changes pending: plan -detailed-exitcode exits 2, and so does the wrapper.
    let plan = setup.terraform(
        &tf,
        dir,
        state,
        &["plan", "-detailed-exitcode", "-input=false", "-no-color"],
    );
    plan.expect_code(2, "wrap -- terraform plan -detailed-exitcode with changes");
    assert_no_override(dir, "plan with changes", &plan);

    // An invalid configuration: Terraform exits 1, the wrapper too.
    fs::write(
        dir.join("main.tf"),
        "terraform {\n  backend \"http\" {}\n}\nresource \"null_resource\" {\n",
    )
    .unwrap();
    let wrapped = setup.terraform(&tf, dir, state, &["plan", "-input=false", "-no-color"]);
    let direct = tf.run(dir, &["plan", "-input=false", "-no-color"]);
    assert!(
        direct.code.is_some_and(|c| c != 0),
        "terraform alone: {direct:?}"
    );
    assert_eq!(
        wrapped.code, direct.code,
        "the wrapper's exit code is terraform's\n--- wrapped\n{}\n--- direct\n{}",
        wrapped.stderr, direct.stderr
    );
    assert!(
        wrapped.combined().contains("Error"),
        "terraform's own error is shown: {}",
        wrapped.combined()
    );
    assert_no_override(dir, "a failing plan", &wrapped);

    // A program killed by a signal: 128 + N.
    let killed = setup.run(dir, state, &["sh", "-c", "kill -KILL $$"]);
    assert_eq!(killed.code, Some(128 + 9), "{}", killed.stderr);
    assert_no_override(dir, "a program killed by SIGKILL", &killed);

    // A program that does not exist: 127, and the file is gone too.
    let missing = setup.run(dir, state, &["gitstate-no-such-program"]);
    assert_eq!(missing.code, Some(127), "{}", missing.stderr);
    assert!(
        missing.stderr.contains("gitstate-no-such-program"),
        "{}",
        missing.stderr
    );
    assert_no_override(dir, "a missing program", &missing);
}

/// `main.tf` whose apply runs a `local-exec` of `exec sleep SECONDS` (`exec`: when Terraform kills
/// the provisioner's process on SIGTERM, no orphaned `sleep` outlives the test).
fn write_slow_config(dir: &Path, seconds: u32) {
    fs::write(
        dir.join("main.tf"),
        format!("terraform {{\n  backend \"http\" {{}}\n}}\n\nresource \"null_resource\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"exec sleep {seconds}\"\n  }}\n}}\n"),
    )
    .unwrap();
}

/// Starts `wrap -- terraform apply` of the slow configuration in its own process group (as a
/// shell starts a foreground job) and waits until the provisioner runs. Returns the child and
/// where its output goes.
fn start_slow_apply(
    setup: &Setup,
    tf: &Terraform,
    state: &str,
) -> (std::process::Child, PathBuf, Instant) {
    use std::os::unix::process::CommandExt;
    let dir = setup.dir();
    let bin = tf.bin.to_string_lossy().into_owned();
    let log = dir.join("apply.log");
    let mut cmd = setup.command(
        dir,
        state,
        &[&bin, "apply", "-auto-approve", "-input=false", "-no-color"],
    );
    let out = fs::File::create(&log).unwrap();
    cmd.stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null())
        .process_group(0);
    let mut child = cmd.spawn().expect("spawn gitstate wrap");
    let started = Instant::now();
    loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        if text.contains("Executing: [\"/bin/sh\" \"-c\" \"exec sleep ") {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the wrapper ended ({status}) before the provisioner ran:\n{text}");
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("the provisioner did not start within 120 s:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, log, started)
}

fn wait_exit(child: &mut std::process::Child, limit: Duration, log: &Path) -> Option<i32> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > deadline {
            // SAFETY: the test's own child process group.
            unsafe {
                libc::killpg(child.id() as i32, libc::SIGKILL);
            }
            let _ = child.wait();
            panic!(
                "the wrapper did not exit within {limit:?}:\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ctrl+C during a long apply: the terminal sends SIGINT to the whole foreground process group
/// (the wrapper, Terraform, its provider and the provisioner's shell).
fn interrupt_during_apply(version: &str) {
    let tf = Terraform::installed(version);
    let setup = Setup::new();
    let dir = setup.dir();
    let state = "slow.tfstate";
    write_slow_config(dir, 30);
    setup
        .terraform(&tf, dir, state, &["init", "-input=false", "-no-color"])
        .expect_code(0, "init");

    let (mut child, log, started) = start_slow_apply(&setup, &tf, state);
    assert!(
        dir.join(OVERRIDE).exists(),
        "the backend file exists while terraform runs"
    );
    // The backend answers only the Terraform the wrapper started (it holds the run's token).
    let url = format!("http://{}/state/default/{state}", setup.listen);
    let (status, body) = http("GET", &url, None, None).expect("the backend answers");
    assert_eq!(status, 401, "a request without the run's token: {body}");
    let (status, _) = http("GET", &url, None, Some(("me", "guess"))).unwrap();
    assert_eq!(status, 401, "a request with a wrong token");
    let held = setup.remote_locks();
    assert_eq!(
        held,
        vec![format!("refs/heads/locks/{state}")],
        "terraform holds the lock during apply"
    );

    // SAFETY: signals the test's own child process group.
    let rc = unsafe { libc::killpg(child.id() as i32, libc::SIGINT) };
    assert_eq!(rc, 0, "killpg");
    let code = wait_exit(&mut child, Duration::from_secs(60), &log);
    let output = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the interrupt stopped the apply before the 30 s provisioner finished:\n{output}"
    );
    assert!(
        output.contains("Interrupt received"),
        "terraform got the interrupt:\n{output}"
    );
    assert_eq!(
        code,
        Some(1),
        "the wrapper exits with terraform's code:\n{output}"
    );
    assert!(
        !dir.join(OVERRIDE).exists(),
        "{OVERRIDE} removed after Ctrl+C:\n{output}"
    );
    assert_eq!(
        setup.remote_locks(),
        Vec::<String>::new(),
        "terraform released its lock:\n{output}"
    );
    // What Terraform left: its last state is committed (1.15.5 records the interrupted resource
    // as tainted, 1.0.3 an empty state), and the next run can go on: plan wants to (re)create it.
    let subjects = git_log_subjects(&setup.git_dir, "main", state);
    assert!(
        subjects
            .iter()
            .all(|s| s.starts_with("Update slow.tfstate (serial ")),
        "{subjects:?}"
    );
    let plan = setup.terraform(
        &tf,
        dir,
        state,
        &["plan", "-detailed-exitcode", "-input=false", "-no-color"],
    );
    plan.expect_code(2, "plan after the interrupted apply");
    assert_no_override(dir, "plan after the interrupted apply", &plan);
}

#[test]
fn tf_1_15_5_ctrl_c_during_apply() {
    interrupt_during_apply("1.15.5");
}

#[test]
fn tf_1_0_3_ctrl_c_during_apply() {
    interrupt_during_apply("1.0.3");
}

/// SIGINT to the wrapper alone (not to its process group): the wrapper neither dies nor passes it
/// on (a terminal's Ctrl+C reaches Terraform directly, and a second SIGINT would make Terraform
/// abort without releasing its lock), so the apply runs to the end and everything is cleaned up.
#[test]
fn tf_1_15_5_sigint_to_the_wrapper_alone_lets_terraform_finish() {
    let tf = Terraform::installed("1.15.5");
    let setup = Setup::new();
    let dir = setup.dir();
    let state = "finish.tfstate";
    write_slow_config(dir, 4);
    setup
        .terraform(&tf, dir, state, &["init", "-input=false", "-no-color"])
        .expect_code(0, "init");
    let (mut child, log, _) = start_slow_apply(&setup, &tf, state);
    for _ in 0..2 {
        // SAFETY: signals the test's own child (the wrapper) only.
        let rc = unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        assert_eq!(rc, 0, "kill");
        std::thread::sleep(Duration::from_millis(200));
    }
    let code = wait_exit(&mut child, Duration::from_secs(120), &log);
    let output = fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(code, Some(0), "the apply finished:\n{output}");
    assert!(output.contains("1 added"), "{output}");
    assert!(
        !dir.join(OVERRIDE).exists(),
        "{OVERRIDE} removed:\n{output}"
    );
    assert_eq!(setup.remote_locks(), Vec::<String>::new(), "lock released");
    let subjects = git_log_subjects(&setup.git_dir, "main", state);
    assert!(!subjects.is_empty(), "the state is committed");
}

/// SIGTERM to the wrapper alone (a supervisor stopping it) reaches Terraform, which stops
/// gracefully; the wrapper cleans up and exits with Terraform's code.
fn sigterm_is_forwarded(version: &str) {
    let tf = Terraform::installed(version);
    let setup = Setup::new();
    let dir = setup.dir();
    let state = "term.tfstate";
    write_slow_config(dir, 30);
    setup
        .terraform(&tf, dir, state, &["init", "-input=false", "-no-color"])
        .expect_code(0, "init");
    let (mut child, log, started) = start_slow_apply(&setup, &tf, state);
    // SAFETY: signals the test's own child (the wrapper) only.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0, "kill");
    let code = wait_exit(&mut child, Duration::from_secs(60), &log);
    let output = fs::read_to_string(&log).unwrap_or_default();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "SIGTERM stopped the apply early:\n{output}"
    );
    assert_eq!(code, Some(1), "terraform's exit code:\n{output}");
    assert!(
        !dir.join(OVERRIDE).exists(),
        "{OVERRIDE} removed:\n{output}"
    );
    assert_eq!(
        setup.remote_locks(),
        Vec::<String>::new(),
        "lock released:\n{output}"
    );
}

#[test]
fn tf_1_15_5_sigterm_is_forwarded() {
    sigterm_is_forwarded("1.15.5");
}

#[test]
fn tf_1_0_3_sigterm_is_forwarded() {
    sigterm_is_forwarded("1.0.3");
}

/// `gitstate wrap --help` explains the command with a copy-paste example.
#[test]
fn help_has_an_example() {
    let out = std::process::Command::new(gitstate_bin())
        .args(["wrap", "--help"])
        .output()
        .expect("gitstate wrap --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "gitstate wrap --repository https://",
        "--state envs/prod.tfstate -- terraform init",
        "gitstate_backend_override.tf.json",
        "TF_HTTP_PASSWORD",
        "--listen",
    ] {
        assert!(
            help.contains(expected),
            "{expected:?} missing from:\n{help}"
        );
    }
}

/// The address is taken: one clear sentence, exit 125, no program run, no file written. The
/// address comes from GITSTATE_LISTEN here (flags > environment > file > defaults).
#[test]
fn busy_address_runs_nothing() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let cmd = wrap_command(
        dir,
        &["--state", "prod.tfstate"],
        &["sh", "-c", "touch program-ran"],
        &[("GITSTATE_LISTEN", &address)],
    );
    let out = run_captured(cmd, "gitstate wrap (busy address)", TIMEOUT);
    assert_eq!(out.code, Some(125), "{}", out.combined());
    let message = out.stderr.trim();
    assert!(
        message.contains(&address) && message.contains("--listen") && message.contains("in use"),
        "the error names the address and --listen: {message}"
    );
    assert_eq!(message.lines().count(), 1, "one line: {message}");
    assert!(!dir.join("program-ran").exists(), "the program did not run");
    assert!(!dir.join(OVERRIDE).exists(), "no backend file written");
    assert!(!dir.join(".gitstate").exists(), "no repository created");
    drop(taken);
}

/// A file with the generated file's name that gitstate did not write is left alone; one that a
/// killed wrapper left behind is replaced.
#[test]
fn foreign_backend_file_is_never_overwritten() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let listen = format!("127.0.0.1:{}", free_port());
    let mine =
        "{\"terraform\": {\"backend\": {\"http\": {\"address\": \"http://example.invalid/\"}}}}\n";
    fs::write(dir.join(OVERRIDE), mine).unwrap();
    let cmd = wrap_command(
        dir,
        &["--listen", &listen, "--state", "prod.tfstate"],
        &["sh", "-c", "touch program-ran"],
        &[],
    );
    let out = run_captured(cmd, "gitstate wrap (foreign file)", TIMEOUT);
    assert_eq!(out.code, Some(125), "{}", out.combined());
    assert!(
        out.stderr.contains(OVERRIDE) && out.stderr.contains("gitstate did not write it"),
        "{}",
        out.stderr
    );
    assert_eq!(fs::read_to_string(dir.join(OVERRIDE)).unwrap(), mine);
    assert!(!dir.join("program-ran").exists(), "the program did not run");

    // Left behind by a wrapper that was killed (its pid no longer exists): replaced, then removed.
    let stale = "{\"//\": \"Written by gitstate wrap (pid 2147483000) for one command\", \"terraform\": {}}\n";
    fs::write(dir.join(OVERRIDE), stale).unwrap();
    let cmd = wrap_command(
        dir,
        &["--listen", &listen, "--state", "prod.tfstate"],
        &[
            "sh",
            "-c",
            &format!("grep -q lock_address {OVERRIDE} && touch program-ran"),
        ],
        &[],
    );
    let out = run_captured(cmd, "gitstate wrap (stale file)", TIMEOUT);
    assert_eq!(out.code, Some(0), "{}", out.combined());
    assert!(
        dir.join("program-ran").exists(),
        "the program saw the new file"
    );
    assert!(!dir.join(OVERRIDE).exists(), "removed at the end");

    // A second wrap in the same directory while the first still runs (on another address).
    let first = wrap_command(
        dir,
        &["--listen", &listen, "--state", "prod.tfstate"],
        &["sh", "-c", "sleep 3"],
        &[],
    );
    let mut first = ChildGuard::spawn(first, &work.path().join("first.log"), "first gitstate wrap");
    first
        .wait_ready(Duration::from_secs(30), || dir.join(OVERRIDE).exists())
        .expect("the first wrap writes its file");
    let other = format!("127.0.0.1:{}", free_port());
    let cmd = wrap_command(
        dir,
        &["--listen", &other, "--state", "prod.tfstate"],
        &["sh", "-c", "touch second-ran"],
        &[],
    );
    let out = run_captured(cmd, "gitstate wrap (second in the same directory)", TIMEOUT);
    assert_eq!(out.code, Some(125), "{}", out.combined());
    assert!(
        out.stderr.contains(&format!(
            "another gitstate wrap that is still running (pid {})",
            first.id()
        )),
        "{}",
        out.stderr
    );
    assert!(!dir.join("second-ran").exists());
    assert!(
        dir.join(OVERRIDE).exists(),
        "the first wrap's file is untouched"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while first.exited().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        first.exited().is_some_and(|s| s.success()),
        "{}",
        first.log_text()
    );
    assert!(!dir.join(OVERRIDE).exists(), "removed by the first wrap");
}
