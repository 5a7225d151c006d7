//! End to end: gitstate as a drop-in for terraform-backend-git (plumber-cd). The gitstate binary
//! is run through a symlink named `terraform-backend-git` (and as `gitstate compat`), configured
//! only with terraform-backend-git's spellings, against a smart-HTTP remote (lighttpd + git
//! http-backend with basic auth) and real Terraform 1.15.5; what it stored is checked with plain
//! git.
//!
//! - Wrapper mode (`terraform-backend-git git terraform …`) with only `TF_BACKEND_GIT_*`
//!   variables: init, apply, plan (no changes); the state is on `master` (its default branch),
//!   no lock branch and no generated file remain, no credential in the output.
//! - Standalone mode with `terraform-backend-git.hcl` in the current directory: Terraform's
//!   `backend "http"` with its query address (with `amend=true`) applies twice; each write is a
//!   normal commit on top of the last (no force-push), and the log says so; `stop` ends it.
//! - Basic auth from `TF_BACKEND_GIT_HTTP_USERNAME`/`_PASSWORD`: a wrong or missing password is
//!   a 401.
//! - `gitstate config show` names the variables values came from, and no credential.
//! - A PGP key (not supported yet) stops the start with one sentence naming the variable.
//! - `SSH_PRIVATE_KEY` (a key file) and `StrictHostKeyChecking=no` reach a real sshd.
//! - `TF_BACKEND_GIT_HTTPS_CERT`/`_KEY` serve Terraform over HTTPS.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use gitstate_tests::*;

const GIT_USER: &str = "tfstate-bot";
const GIT_PASS: &str = "p4ss-w0rd-secret";
const TIMEOUT: Duration = Duration::from_secs(300);

/// A remote with one bare repository, and a directory holding the `terraform-backend-git`
/// symlink to the gitstate binary.
struct Setup {
    http: GitHttpServer,
    git_dir: PathBuf,
    bin_dir: TempDir,
    tmp: TempDir,
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
        let bin_dir = tempfile::Builder::new()
            .prefix("gitstate-tbg-bin")
            .tempdir()
            .unwrap();
        std::os::unix::fs::symlink(gitstate_bin(), bin_dir.path().join("terraform-backend-git"))
            .unwrap();
        Setup {
            http,
            git_dir,
            bin_dir,
            tmp: tempfile::Builder::new()
                .prefix("gitstate-tbg-tmp")
                .tempdir()
                .unwrap(),
            _repos: repos,
        }
    }

    fn remote(&self) -> String {
        self.http.url("states")
    }

    /// `terraform-backend-git ARGS` in `dir`, as a user of it runs it: none of gitstate's
    /// variables, the git credential in GIT_USERNAME/GIT_PASSWORD, `TMPDIR` and `HOME` of this
    /// test (its pid file and the home-directory lookup of its file stay here), Terraform
    /// offline, and `env`.
    fn command(&self, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(self.bin_dir.path().join("terraform-backend-git"));
        cmd.args(args).current_dir(dir).stdin(Stdio::null());
        without_gitstate_env(&mut cmd);
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy().to_string();
            if k.starts_with("TF_HTTP_")
                || k.starts_with("TF_CLI_ARGS")
                || k.starts_with("TF_VAR_")
                || k.starts_with("SSH_")
                || k == "GIT_SSH_COMMAND"
                || k == "GIT_SSH"
                || k == "StrictHostKeyChecking"
                || k.eq_ignore_ascii_case("http_proxy")
                || k.eq_ignore_ascii_case("https_proxy")
                || k.eq_ignore_ascii_case("all_proxy")
            {
                cmd.env_remove(&key);
            }
        }
        cmd.env("GIT_USERNAME", GIT_USER)
            .env("GIT_PASSWORD", GIT_PASS)
            .env("TMPDIR", self.tmp.path())
            .env("HOME", self.tmp.path())
            .env("TF_CLI_CONFIG_FILE", tools_dir().join("terraformrc"))
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd
    }

    fn run(&self, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> TfOutput {
        run_captured(
            self.command(dir, args, env),
            &format!("terraform-backend-git {}", args.join(" ")),
            TIMEOUT,
        )
    }

    /// Its standalone server, ready once `/_/health` answers.
    fn serve(&self, dir: &Path, env: &[(&str, &str)], port: u16) -> ChildGuard {
        self.serve_until(dir, env, || {
            matches!(
                http(
                    "GET",
                    &format!("http://127.0.0.1:{port}/_/health"),
                    None,
                    None
                ),
                Ok((200, _))
            )
        })
    }

    /// Its standalone server, ready once `ready()` holds.
    fn serve_until(
        &self,
        dir: &Path,
        env: &[(&str, &str)],
        ready: impl FnMut() -> bool,
    ) -> ChildGuard {
        let log = self.tmp.path().join("server.log");
        let mut server =
            ChildGuard::spawn(self.command(dir, &[], env), &log, "terraform-backend-git");
        server
            .wait_ready(Duration::from_secs(60), ready)
            .unwrap_or_else(|log| panic!("{log}"));
        server
    }
}

fn tf_config(dir: &Path, backend: Option<&HttpBackend>, generation: &str) {
    let mut text = backend.map(HttpBackend::hcl).unwrap_or_default();
    text.push_str(&format!(
        "\nresource \"null_resource\" \"r0\" {{\n  triggers = {{ generation = \"{generation}\" }}\n}}\n"
    ));
    fs::write(dir.join("main.tf"), text).unwrap();
}

#[test]
fn a_symlink_named_terraform_backend_git_wraps_real_terraform_with_only_its_variables() {
    let s = Setup::new();
    let tf = Terraform::installed("1.15.5");
    let work = tempfile::tempdir().unwrap();
    tf_config(work.path(), None, "one");
    let listen = format!("127.0.0.1:{}", free_port());
    let remote = s.remote();
    let tf_bin = tf.bin.to_string_lossy().into_owned();
    let env = [
        ("TF_BACKEND_GIT_GIT_REPOSITORY", remote.as_str()),
        ("TF_BACKEND_GIT_GIT_STATE", "envs/prod.tfstate"),
        ("TF_BACKEND_GIT_ADDRESS", listen.as_str()),
        ("TF_BACKEND_GIT_WRAPPER_TF_BIN", tf_bin.as_str()),
    ];
    for args in [
        &["git", "terraform", "init", "-input=false", "-no-color"][..],
        &[
            "git",
            "terraform",
            "apply",
            "-auto-approve",
            "-input=false",
            "-no-color",
        ],
    ] {
        let out = s.run(work.path(), args, &env);
        out.expect_code(0, "terraform-backend-git git terraform");
        assert!(!out.combined().contains(GIT_PASS), "{}", out.combined());
    }
    // Its default branch: master, where terraform-backend-git wrote (main stays untouched).
    let state =
        git_show(&s.git_dir, "master", "envs/prod.tfstate").expect("the state is on master");
    assert!(String::from_utf8_lossy(&state).contains("null_resource"));
    assert!(git_show(&s.git_dir, "main", "envs/prod.tfstate").is_none());
    assert_eq!(
        refs_under(&s.git_dir, "refs/heads/locks/"),
        Vec::<String>::new()
    );
    // The same through `gitstate compat`, and with its flags: plan sees no change.
    let cmd = s.command(
        work.path(),
        &[
            "git",
            "terraform",
            "--tf",
            &tf_bin,
            "plan",
            "-detailed-exitcode",
            "-input=false",
            "-no-color",
        ],
        &env,
    );
    let mut compat = Command::new(gitstate_bin());
    compat
        .arg("compat")
        .args(cmd.get_args())
        .current_dir(work.path())
        .stdin(Stdio::null());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => compat.env(k, v),
            None => compat.env_remove(k),
        };
    }
    let out = run_captured(compat, "gitstate compat git terraform plan", TIMEOUT);
    out.expect_code(0, "gitstate compat git terraform plan: no changes");
    let leftovers: Vec<String> = fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tf.json"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn its_standalone_server_reads_its_hcl_file_and_serves_its_query_addresses_with_normal_commits() {
    let s = Setup::new();
    let tf = Terraform::installed("1.15.5");
    let server_dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let remote = s.remote();
    fs::write(
        server_dir.path().join("terraform-backend-git.hcl"),
        format!(
            "git.repository = \"{remote}\"\naddress = \"127.0.0.1:{port}\"\naccessLogs = true\n"
        ),
    )
    .unwrap();
    let mut server = s.serve(server_dir.path(), &[], port);

    // A backend block as terraform-backend-git's users wrote it for its standalone server, here
    // without `ref=`: its default branch, master, as before the switch.
    let address =
        format!("http://127.0.0.1:{port}/?type=git&repository={remote}&state=app.tfstate");
    let work = tempfile::tempdir().unwrap();
    let mut backend = HttpBackend::new(&address);
    backend.address = format!("{address}&amend=true");
    tf_config(work.path(), Some(&backend), "one");
    tf.init(work.path()).expect_code(0, "init");
    tf.apply(work.path()).expect_code(0, "first apply");
    let first = git(Some(&s.git_dir), &["rev-parse", "master"]);
    tf_config(work.path(), Some(&backend), "two");
    tf.apply(work.path()).expect_code(0, "second apply");
    let second = git(Some(&s.git_dir), &["rev-parse", "master"]);
    // A normal commit on top of the first: never amended, never force-pushed.
    let ancestry = git_output(
        Some(&s.git_dir),
        &["merge-base", "--is-ancestor", first.trim(), second.trim()],
    );
    assert!(
        ancestry.status.success(),
        "{first} is not an ancestor of {second}"
    );
    assert_ne!(first.trim(), second.trim());
    let state = git_show(&s.git_dir, "master", "app.tfstate").expect("the state is on master");
    assert!(String::from_utf8_lossy(&state).contains("\"two\""));
    let log = server.log_text();
    assert!(
        log.contains("written as a normal commit"),
        "the log says amend=true was a normal commit:\n{log}"
    );
    assert!(!log.contains(GIT_PASS));

    // `terraform-backend-git stop` finds it through its pid file and ends it.
    s.run(server_dir.path(), &["stop"], &[])
        .expect_code(0, "stop");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while server.exited().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "stop did not end the server"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn its_basic_auth_variables_refuse_a_wrong_password() {
    let s = Setup::new();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let remote = s.remote();
    let address = format!("127.0.0.1:{port}");
    let env = [
        ("TF_BACKEND_GIT_GIT_REPOSITORY", remote.as_str()),
        ("TF_BACKEND_GIT_ADDRESS", address.as_str()),
        ("TF_BACKEND_GIT_HTTP_USERNAME", "terraform"),
        ("TF_BACKEND_GIT_HTTP_PASSWORD", "backend-secret"),
    ];
    let server = s.serve(dir.path(), &env, port);
    let url = format!("http://127.0.0.1:{port}/state/default/x.tfstate");
    let status = |auth| http("GET", &url, None, auth).unwrap().0;
    assert_eq!(status(Some(("terraform", "backend-secret"))), 204);
    assert_eq!(status(Some(("terraform", "wrong"))), 401);
    assert_eq!(status(Some(("someone", "backend-secret"))), 401);
    assert_eq!(status(None), 401);
    assert!(!server.log_text().contains("backend-secret"));
}

#[test]
fn config_show_names_its_variables_and_no_credential() {
    let s = Setup::new();
    let dir = tempfile::tempdir().unwrap();
    let remote = s.remote();
    let out = gitstate_run(
        dir.path(),
        &["config", "show"],
        &[
            ("TF_BACKEND_GIT_GIT_REPOSITORY", remote.as_str()),
            ("TF_BACKEND_GIT_ADDRESS", "127.0.0.1:7123"),
            ("TF_BACKEND_GIT_HTTP_USERNAME", "terraform"),
            ("TF_BACKEND_GIT_HTTP_PASSWORD", "backend-secret"),
            (
                "TF_BACKEND_HTTP_SOPS_AGE_RECIPIENTS",
                "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p",
            ),
            ("GIT_USERNAME", GIT_USER),
            ("GIT_PASSWORD", GIT_PASS),
            ("SSH_PRIVATE_KEY", "/nonexistent/id_ed25519"),
        ],
    );
    out.expect_code(0, "gitstate config show");
    let text = out.combined();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle}:\n{text}"))
            .to_owned()
    };
    let repository = line("repository \"default\"");
    assert!(repository.contains("ref = \"master\""), "{repository}");
    assert!(
        repository.contains("TF_BACKEND_GIT_GIT_REPOSITORY"),
        "{repository}"
    );
    assert!(line("listen = ").contains("TF_BACKEND_GIT_ADDRESS"));
    assert!(line("auth {").contains("TF_BACKEND_GIT_HTTP_USERNAME"));
    assert!(line("encryption {").contains("TF_BACKEND_HTTP_SOPS_AGE_RECIPIENTS"));
    assert!(line("# git credential").contains("SSH_PRIVATE_KEY"));
    for secret in [GIT_PASS, "backend-secret"] {
        assert!(!text.contains(secret), "{secret} printed:\n{text}");
    }
    // Its file, as its command line reads it.
    fs::write(
        dir.path().join("terraform-backend-git.hcl"),
        format!("git.repository = \"{remote}\"\ngit.ref = \"states\"\n"),
    )
    .unwrap();
    let out = gitstate_run(
        dir.path(),
        &["config", "show", "--as-terraform-backend-git"],
        &[("HOME", dir.path().to_str().unwrap())],
    );
    out.expect_code(0, "gitstate config show --as-terraform-backend-git");
    let text = out.combined();
    let repository = text
        .lines()
        .find(|l| l.contains("repository \"default\""))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(repository.contains("ref = \"states\""), "{repository}");
    assert!(repository.contains("key git.repository"), "{repository}");
}

#[test]
fn a_shamir_threshold_it_cannot_honour_stops_the_start_naming_its_variable() {
    let s = Setup::new();
    let dir = tempfile::tempdir().unwrap();
    let remote = s.remote();
    let out = s.run(
        dir.path(),
        &["git", "terraform", "version"],
        &[
            ("TF_BACKEND_GIT_GIT_REPOSITORY", remote.as_str()),
            ("TF_BACKEND_GIT_GIT_STATE", "x.tfstate"),
            ("TF_BACKEND_HTTP_SOPS_SHAMIR_THRESHOLD", "2"),
        ],
    );
    assert_ne!(out.code, Some(0), "{}", out.combined());
    assert!(
        out.stderr
            .contains("TF_BACKEND_HTTP_SOPS_SHAMIR_THRESHOLD=2"),
        "{}",
        out.combined()
    );
    assert!(!out.combined().contains("Terraform v"), "nothing ran");
}

#[test]
fn its_ssh_private_key_variable_reaches_an_ssh_remote() {
    let s = Setup::new();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("id_ed25519");
    ssh_keygen(&key);
    let public = fs::read_to_string(keys.path().join("id_ed25519.pub")).unwrap();
    let sshd = Sshd::start(&public);
    let remote = format!(
        "ssh://root@127.0.0.1:{}{}",
        sshd.port(),
        s.git_dir.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let key_path = key.to_string_lossy().into_owned();
    let env = [
        ("TF_BACKEND_GIT_GIT_REPOSITORY", remote.as_str()),
        ("TF_BACKEND_GIT_ADDRESS", address.as_str()),
        ("SSH_PRIVATE_KEY", key_path.as_str()),
        ("StrictHostKeyChecking", "no"),
    ];
    let server = s.serve(dir.path(), &env, port);
    let state = r#"{"version":4,"terraform_version":"1.15.5","serial":1,"lineage":"0b5c6a4e-ssh","outputs":{},"resources":[]}"#;
    let url = format!("http://127.0.0.1:{port}/state/default/ssh.tfstate");
    let (status, body) = http("POST", &url, Some(state), None).unwrap();
    assert_eq!(status, 200, "{body}\n{}\n{}", server.log_text(), sshd.log());
    let stored = git_show(&s.git_dir, "master", "ssh.tfstate").expect("written over ssh on master");
    assert!(String::from_utf8_lossy(&stored).contains("0b5c6a4e-ssh"));
    assert!(sshd.log().contains("Accepted publickey"), "{}", sshd.log());
    // What ssh says on every session under these settings (`Permanently added … to the list of
    // known hosts`) is routine: nothing of it at WARN, where an operator looks for what needs
    // attention (issue 49).
    let (status, _) = http("GET", &url, None, None).unwrap();
    assert_eq!(status, 200);
    let log = server.log_text();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("ssh said"))
        .collect();
    assert!(warned.is_empty(), "{warned:#?}");
}

#[test]
fn its_https_variables_serve_terraform_over_tls() {
    let s = Setup::new();
    let tf = Terraform::installed("1.15.5");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "self.key",
            "-out",
            "self.pem",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .current_dir(dir.path())
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cert = dir.path().join("self.pem").to_string_lossy().into_owned();
    let key = dir.path().join("self.key").to_string_lossy().into_owned();
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let remote = s.remote();
    let env = [
        ("TF_BACKEND_GIT_GIT_REPOSITORY", remote.as_str()),
        ("TF_BACKEND_GIT_ADDRESS", address.as_str()),
        ("TF_BACKEND_GIT_HTTPS_CERT", cert.as_str()),
        ("TF_BACKEND_GIT_HTTPS_KEY", key.as_str()),
    ];
    let _server = s.serve_until(dir.path(), &env, || port_open(port));
    let mut backend = HttpBackend::new(&format!(
        "https://127.0.0.1:{port}/state/default/tls.tfstate"
    ));
    backend
        .extra
        .push(("skip_cert_verification".into(), "true".into()));
    let work = tempfile::tempdir().unwrap();
    tf_config(work.path(), Some(&backend), "tls");
    tf.init(work.path()).expect_code(0, "init over https");
    tf.apply(work.path()).expect_code(0, "apply over https");
    assert!(git_show(&s.git_dir, "master", "tls.tfstate").is_some());
}
