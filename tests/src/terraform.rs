//! The installed Terraform versions, run against a directory.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::*;

/// Where `scripts/install-test-deps.sh` put the tools: `$GITSTATE_TOOLS` or
/// `~/.cache/gitstate-tools`.
pub fn tools_dir() -> PathBuf {
    match std::env::var_os("GITSTATE_TOOLS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
            .join(".cache/gitstate-tools"),
    }
}

/// One installed Terraform.
#[derive(Clone, Debug)]
pub struct Terraform {
    /// "1.0.3", "1.15.5", or what the PATH terraform reports.
    pub version: String,
    pub bin: PathBuf,
    /// `$GITSTATE_TOOLS/terraformrc` (TF_CLI_CONFIG_FILE): the null provider from the local mirror.
    pub cli_config: PathBuf,
    /// Upper bound for one command; the process is killed and the test fails past it.
    pub timeout: Duration,
    /// Further environment of every command (e.g. `SSL_CERT_FILE` naming a test CA).
    pub env: Vec<(String, String)>,
}

/// The output of one terraform command.
#[derive(Debug)]
pub struct TfOutput {
    pub args: Vec<String>,
    /// Exit code (None: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl TfOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
    /// stdout followed by stderr.
    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
    /// Panics with the whole output unless the exit code is `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32, context: &str) -> &Self {
        if self.code != Some(code) {
            panic!(
                "{context}: `terraform {}` exited with {:?}, expected {code}\n--- stdout\n{}\n--- stderr\n{}",
                self.args.join(" "),
                self.code,
                self.stdout,
                self.stderr
            );
        }
        self
    }
}

const TF_REQUIRED: [&str; 2] = ["1.0.3", "1.15.5"];

/// Whether the test's environment variable `k` would change what Terraform does (its backend
/// settings, arguments, variables, workspace, data and plugin directories, proxies): such a
/// variable is never passed on to a Terraform the tests run.
pub fn steers_terraform(k: &str) -> bool {
    k.starts_with("TF_HTTP_")
        || k.starts_with("TF_CLI_ARGS")
        || k.starts_with("TF_VAR_")
        || k.eq_ignore_ascii_case("http_proxy")
        || k.eq_ignore_ascii_case("https_proxy")
        || k.eq_ignore_ascii_case("all_proxy")
        || k == "TF_WORKSPACE"
        || k == "TF_DATA_DIR"
        || k == "TF_PLUGIN_CACHE_DIR"
}

impl Terraform {
    /// The Terraform `version` installed by scripts/install-test-deps.sh ("1.0.3" or "1.15.5");
    /// panics with the install hint when it is missing or reports another version.
    pub fn installed(version: &str) -> Terraform {
        let tools = tools_dir();
        let cli_config = tools.join("terraformrc");
        let bin = tools.join(format!("terraform-{version}/terraform"));
        assert!(
            bin.is_file(),
            "Terraform {version} is not installed at {}: {INSTALL_HINT}",
            bin.display()
        );
        assert!(
            cli_config.is_file(),
            "{} is missing: {INSTALL_HINT}",
            cli_config.display()
        );
        let tf = Terraform {
            version: version.to_string(),
            bin,
            cli_config,
            timeout: Duration::from_secs(300),
            env: Vec::new(),
        };
        let reported = tf.reported_version();
        assert_eq!(
            reported.as_deref(),
            Some(version),
            "{} does not report Terraform {version}: {INSTALL_HINT}",
            tf.bin.display()
        );
        tf
    }

    /// A `terraform` on PATH whose version is not one of the installed ones (1.11.4 on the
    /// development machines), or None.
    pub fn from_path() -> Option<Terraform> {
        let bin = which("terraform")?;
        let bin = fs::canonicalize(&bin).unwrap_or(bin);
        if bin.starts_with(tools_dir()) {
            return None;
        }
        let mut tf = Terraform {
            version: String::new(),
            bin,
            cli_config: tools_dir().join("terraformrc"),
            timeout: Duration::from_secs(300),
            env: Vec::new(),
        };
        let version = tf.reported_version()?;
        if TF_REQUIRED.contains(&version.as_str()) {
            return None;
        }
        tf.version = version;
        Some(tf)
    }

    /// Every version to test: 1.0.3 and 1.15.5 (required) and the PATH one when present.
    pub fn all() -> Vec<Terraform> {
        let mut all: Vec<Terraform> = TF_REQUIRED
            .iter()
            .map(|v| Terraform::installed(v))
            .collect();
        all.extend(Terraform::from_path());
        all
    }

    /// `terraform version` → "X.Y.Z".
    pub fn reported_version(&self) -> Option<String> {
        let dir = tempfile::tempdir().ok()?;
        let out = self.run(dir.path(), &["version"]);
        let first = out.stdout.lines().next()?.trim().to_string();
        first.strip_prefix("Terraform v").map(str::to_string)
    }

    /// Runs `terraform ARGS` in `dir` with TF_CLI_CONFIG_FILE, CHECKPOINT_DISABLE=1,
    /// TF_IN_AUTOMATION=1, no TF_HTTP_* / TF_CLI_ARGS* / proxy variables from the test's
    /// environment; captures stdout and stderr. Panics when it runs past `timeout`.
    pub fn run(&self, dir: &Path, args: &[&str]) -> TfOutput {
        self.run_with(dir, args, Stdio::null())
    }

    /// [`Terraform::run`] with `input` as the standard input: the answers to Terraform's
    /// prompts (run it with `-input=true`), one per line.
    pub fn run_with_input(&self, dir: &Path, args: &[&str], input: &str) -> TfOutput {
        let input_path = dir.join(".tf-stdin");
        fs::write(&input_path, input).expect("write terraform's input");
        let stdin = fs::File::open(&input_path).expect("open terraform's input");
        let out = self.run_with(dir, args, Stdio::from(stdin));
        let _ = fs::remove_file(&input_path);
        out
    }

    fn run_with(&self, dir: &Path, args: &[&str], stdin: Stdio) -> TfOutput {
        let out_path = dir.join(".tf-stdout");
        let err_path = dir.join(".tf-stderr");
        let mut child = self.spawn_with(dir, args, &out_path, &err_path, stdin);
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait terraform") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`terraform {}` ({}) ran longer than {:?}; output so far:\n{}{}",
                    args.join(" "),
                    self.version,
                    self.timeout,
                    fs::read_to_string(&out_path).unwrap_or_default(),
                    fs::read_to_string(&err_path).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        let read = |p: &Path| {
            let mut s = String::new();
            if let Ok(mut f) = fs::File::open(p) {
                let mut bytes = Vec::new();
                let _ = f.read_to_end(&mut bytes);
                s = String::from_utf8_lossy(&bytes).into_owned();
            }
            let _ = fs::remove_file(p);
            s
        };
        TfOutput {
            args: args.iter().map(|s| s.to_string()).collect(),
            code: status.code(),
            stdout: read(&out_path),
            stderr: read(&err_path),
        }
    }

    /// Starts `terraform ARGS` in `dir` as [`Terraform::run`] does, in a process group of its
    /// own (the caller may kill it, and the plugins it started, with `kill -KILL -PID`), its
    /// output going to `out` and `err`.
    pub fn spawn(&self, dir: &Path, args: &[&str], out: &Path, err: &Path) -> std::process::Child {
        self.spawn_with(dir, args, out, err, Stdio::null())
    }

    fn spawn_with(
        &self,
        dir: &Path,
        args: &[&str],
        out: &Path,
        err: &Path,
        stdin: Stdio,
    ) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .current_dir(dir)
            .process_group(0)
            .stdin(stdin)
            .stdout(fs::File::create(out).expect("create stdout file"))
            .stderr(fs::File::create(err).expect("create stderr file"));
        for (key, _) in std::env::vars_os() {
            if steers_terraform(&key.to_string_lossy()) {
                cmd.env_remove(&key);
            }
        }
        cmd.env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        cmd.spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", self.bin.display()))
    }

    /// `terraform init -input=false -no-color`.
    pub fn init(&self, dir: &Path) -> TfOutput {
        self.run(dir, &["init", "-input=false", "-no-color"])
    }

    /// `terraform apply -auto-approve -input=false -no-color`.
    pub fn apply(&self, dir: &Path) -> TfOutput {
        self.run(
            dir,
            &["apply", "-auto-approve", "-input=false", "-no-color"],
        )
    }

    /// `terraform plan -detailed-exitcode -input=false -no-color` (0: no changes, 2: changes).
    pub fn plan(&self, dir: &Path) -> TfOutput {
        self.run(
            dir,
            &["plan", "-detailed-exitcode", "-input=false", "-no-color"],
        )
    }

    /// `terraform force-unlock -force ID`.
    pub fn force_unlock(&self, dir: &Path, id: &str) -> TfOutput {
        self.run(dir, &["force-unlock", "-force", "-no-color", id])
    }
}
