//! Test support: starting real git servers, the gitstate binary and terraform.
//!
//! Everything here talks to real programs, installed by `scripts/install-test-deps.sh` into
//! `$GITSTATE_TOOLS` (default `~/.cache/gitstate-tools`). A missing tool is a test *failure*
//! whose message says to run that script; nothing is skipped silently.
//!
//! Every server binds 127.0.0.1 only, and every helper that starts a process kills it (and
//! removes its temporary files) on `Drop`.
//!
//! | helper | what |
//! |---|---|
//! | [`free_port`] | an unused TCP port on 127.0.0.1 |
//! | [`GitHttpServer`] | lighttpd + `git http-backend` (smart HTTP, basic auth) |
//! | [`GitDaemon`] | `git daemon` with receive-pack (git://) |
//! | [`DulwichServer`], [`JGitServer`] | smart HTTP by dulwich (Python) and JGit (Java), not git's |
//! | [`ReplayAdvertisementServer`] | issue 16's advertisement replayed in front of [`GitHttpServer`] |
//! | [`StateRepo`], [`terraform_lock_scenario`] | a server's states checked with plain git; the Terraform scenario |
//! | [`bare_repo`] | `git init --bare` with initial branch `main` |
//! | [`Gitstate`] | the `gitstate serve` binary, waited on until `/_/health` answers |
//! | [`Terraform`] | the installed Terraform versions, run against a directory |
//! | [`HttpBackend`], [`write_main_tf`] | a `main.tf` with an `http` backend and `null_resource`s |
//! | [`http`], [`lock_info`] | direct requests to the backend (LOCK/UNLOCK/GET/POST) |
//! | [`git`], [`git_log_subjects`], [`ls_remote`] | plain git, to check what is stored |
//!
//! The gitstate binary is found at `$GITSTATE_BIN`, else `$CARGO_TARGET_DIR/debug/gitstate`, else
//! next to the running test executable (`target/debug/deps/..` → `target/debug/gitstate`). Build it
//! first with `cargo build -p gitstate`; scripts/test.sh builds a release one
//! (`cargo build --release -p gitstate`) and points `GITSTATE_BIN` at it, as a user runs it.

pub mod crypto;
pub mod keys;
pub mod proxy;

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use tempfile::TempDir;

/// The message every missing-tool failure carries.
pub const INSTALL_HINT: &str =
    "run scripts/install-test-deps.sh (it installs into $GITSTATE_TOOLS, default ~/.cache/gitstate-tools)";

// ------------------------------------------------------------------------------------------------
// Ports and processes

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it). Servers started by this
/// crate retry with another port when the bind races with another test.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// True once something accepts TCP connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// A child process killed (and reaped) on drop; its stdout+stderr go to `log`.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    pub log: PathBuf,
    pub what: String,
}

impl ChildGuard {
    /// Spawns `cmd` with stdin closed and stdout/stderr appended to `log`.
    pub fn spawn(mut cmd: Command, log: &Path, what: &str) -> ChildGuard {
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let err = out.try_clone().expect("clone log handle");
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({cmd:?}): {e}; {INSTALL_HINT}"));
        ChildGuard {
            child: Some(child),
            log: log.to_path_buf(),
            what: what.to_string(),
        }
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// `Some(status)` when the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The log written so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `ready()` holds. `Err(log)` when the process exited first (the caller may retry
    /// on another port); panics with the log on timeout.
    pub fn wait_ready(
        &mut self,
        timeout: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{} exited with {status} before it was ready; its output:\n{}",
                    self.what,
                    self.log_text()
                ));
            }
            if ready() {
                return Ok(());
            }
            if Instant::now() > deadline {
                panic!(
                    "{} was not ready within {timeout:?}; its output:\n{}",
                    self.what,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the process now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a server up to 3 times on fresh ports: `spawn(port)` starts it, `ready(port)` says it
/// answers. Returns the guard and the port.
pub(crate) fn start_on_free_port(
    what: &str,
    timeout: Duration,
    mut spawn: impl FnMut(u16) -> ChildGuard,
    mut ready: impl FnMut(u16) -> bool,
) -> (ChildGuard, u16) {
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port();
        let mut guard = spawn(port);
        match guard.wait_ready(timeout, || ready(port)) {
            Ok(()) => return (guard, port),
            Err(log) => {
                // Retry on another port only when the bind raced with another process.
                let lower = log.to_lowercase();
                let raced = lower.contains("in use")
                    || lower.contains("cannot listen")
                    || lower.contains("bind");
                last = log;
                if !raced {
                    break;
                }
            }
        }
    }
    panic!("{what} did not start: {last}");
}

/// Looks `name` up on PATH (plus /usr/sbin and /sbin, where Debian puts daemons).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn require_tool(name: &str) -> PathBuf {
    which(name).unwrap_or_else(|| panic!("`{name}` is not installed: {INSTALL_HINT}"))
}

// ------------------------------------------------------------------------------------------------
// git

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

// ------------------------------------------------------------------------------------------------
// Git servers

/// lighttpd serving `git http-backend` (smart HTTP) for every repository under a directory, with
/// basic auth required for every request (`mod_auth` + `mod_authn_file`, an htpasswd file written
/// with `openssl passwd -apr1`). Listens on 127.0.0.1 only; killed on drop. Every request that
/// reaches `git http-backend` is recorded (see [`GitHttpServer::requests`]).
pub struct GitHttpServer {
    _guard: ChildGuard,
    port: u16,
    scheme: &'static str,
    user: String,
    password: String,
    _dir: TempDir,
}

impl GitHttpServer {
    /// Serves the bare repositories in `repos_dir` at `http://127.0.0.1:PORT/git/NAME.git`,
    /// readable and writable by `user`:`password` (and nobody else).
    pub fn start(repos_dir: &Path, user: &str, password: &str) -> GitHttpServer {
        GitHttpServer::launch(repos_dir, user, password, None)
    }

    /// Like [`GitHttpServer::start`] over HTTPS (lighttpd's mod_openssl) with the certificate
    /// chain `cert` and its key `key` (PEM files): `https://127.0.0.1:PORT/git/NAME.git`.
    pub fn start_https(
        repos_dir: &Path,
        user: &str,
        password: &str,
        cert: &Path,
        key: &Path,
    ) -> GitHttpServer {
        GitHttpServer::launch(repos_dir, user, password, Some((cert, key)))
    }

    fn launch(
        repos_dir: &Path,
        user: &str,
        password: &str,
        tls: Option<(&Path, &Path)>,
    ) -> GitHttpServer {
        let lighttpd = require_tool("lighttpd");
        let openssl = require_tool("openssl");
        let exec_path = git(None, &["--exec-path"]).trim().to_string();
        let backend = Path::new(&exec_path).join("git-http-backend");
        assert!(
            backend.is_file(),
            "{} is missing: {INSTALL_HINT}",
            backend.display()
        );
        let repos_dir = fs::canonicalize(repos_dir).expect("repos_dir exists");

        let dir = tempfile::Builder::new()
            .prefix("gitstate-lighttpd")
            .tempdir()
            .unwrap();
        // The password goes through stdin, never argv (visible to every local user).
        let mut hashing = Command::new(&openssl)
            .args(["passwd", "-apr1", "-stdin"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("openssl passwd");
        hashing
            .stdin
            .take()
            .expect("stdin")
            .write_all(format!("{password}\n").as_bytes())
            .expect("write the password to openssl");
        let hash = hashing.wait_with_output().expect("openssl passwd");
        assert!(hash.status.success(), "openssl passwd -apr1 failed");
        let htpasswd = dir.path().join("htpasswd");
        fs::write(
            &htpasswd,
            format!("{user}:{}\n", String::from_utf8_lossy(&hash.stdout).trim()),
        )
        .unwrap();
        let docroot = dir.path().join("www");
        fs::create_dir_all(&docroot).unwrap();
        // A CGI wrapper that records each request before running git http-backend: the line is
        // written before the answer, so it is there when the client has its response.
        let cgi_dir = dir.path().join("cgi");
        fs::create_dir_all(&cgi_dir).unwrap();
        let wrapper = cgi_dir.join("git-http-backend");
        fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nprintf '%s %s\\n' \"$REQUEST_METHOD\" \"$REQUEST_URI\" >> '{}'\nexec '{}'\n",
                dir.path().join("requests.log").display(),
                backend.display()
            ),
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path_env = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
        let tls_conf = match tls {
            Some((cert, key)) => format!(
                "server.modules += (\"mod_openssl\")\nssl.engine = \"enable\"\nssl.pemfile = \"{}\"\nssl.privkey = \"{}\"\n",
                cert.display(),
                key.display()
            ),
            None => String::new(),
        };

        let spawn = |port: u16| {
            let conf = dir.path().join("lighttpd.conf");
            fs::write(
                &conf,
                format!(
                    r#"server.modules = ("mod_alias", "mod_setenv", "mod_auth", "mod_authn_file", "mod_cgi")
server.bind = "127.0.0.1"
server.port = {port}
server.document-root = "{docroot}"
server.errorlog = "{errorlog}"
server.max-request-size = 0
server.stream-request-body = 0
alias.url = ( "/git/" => "{backend}/", "/ro/" => "{backend}/" )
auth.backend = "htpasswd"
auth.backend.htpasswd.userfile = "{htpasswd}"
auth.require = ( "/git/" => ( "method" => "basic", "realm" => "git", "require" => "valid-user" ),
                 "/ro/" => ( "method" => "basic", "realm" => "git", "require" => "valid-user" ) )
$HTTP["url"] =~ "^/git/" {{
    cgi.assign = ( "" => "" )
    setenv.add-environment = (
        "GIT_PROJECT_ROOT" => "{root}",
        "GIT_HTTP_EXPORT_ALL" => "1",
        "GIT_CONFIG_NOSYSTEM" => "1",
        "GIT_CONFIG_COUNT" => "2",
        "GIT_CONFIG_KEY_0" => "http.receivepack",
        "GIT_CONFIG_VALUE_0" => "true",
        "GIT_CONFIG_KEY_1" => "safe.directory",
        "GIT_CONFIG_VALUE_1" => "*",
        "PATH" => "{path_env}"
    )
}}
$HTTP["url"] =~ "^/ro/" {{
    cgi.assign = ( "" => "" )
    setenv.add-environment = (
        "GIT_PROJECT_ROOT" => "{root}",
        "GIT_HTTP_EXPORT_ALL" => "1",
        "GIT_CONFIG_NOSYSTEM" => "1",
        "GIT_CONFIG_COUNT" => "2",
        "GIT_CONFIG_KEY_0" => "http.receivepack",
        "GIT_CONFIG_VALUE_0" => "false",
        "GIT_CONFIG_KEY_1" => "safe.directory",
        "GIT_CONFIG_VALUE_1" => "*",
        "PATH" => "{path_env}"
    )
}}
{tls_conf}"#,
                    docroot = docroot.display(),
                    errorlog = dir.path().join("error.log").display(),
                    backend = wrapper.display(),
                    htpasswd = htpasswd.display(),
                    root = repos_dir.display(),
                ),
            )
            .unwrap();
            let mut cmd = Command::new(&lighttpd);
            cmd.arg("-D").arg("-f").arg(&conf);
            ChildGuard::spawn(
                cmd,
                &dir.path().join("lighttpd.log"),
                "lighttpd (git http-backend)",
            )
        };
        let (guard, port) =
            start_on_free_port("lighttpd", Duration::from_secs(20), spawn, port_open);
        GitHttpServer {
            _guard: guard,
            port,
            scheme: if tls.is_some() { "https" } else { "http" },
            user: user.to_string(),
            password: password.to_string(),
            _dir: dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT/git/NAME.git` (`https://` when started with TLS; no credentials).
    pub fn url(&self, repo_name: &str) -> String {
        format!(
            "{}://127.0.0.1:{}/git/{repo_name}.git",
            self.scheme, self.port
        )
    }

    /// The same repository where pushing is forbidden (`http.receivepack false`: receive-pack
    /// answers 403), at `/ro/NAME.git`.
    pub fn read_only_url(&self, repo_name: &str) -> String {
        format!(
            "{}://127.0.0.1:{}/ro/{repo_name}.git",
            self.scheme, self.port
        )
    }

    /// `http://USER:PASSWORD@127.0.0.1:PORT/git/NAME.git`, for plain git in assertions.
    pub fn url_with_credentials(&self, repo_name: &str) -> String {
        format!(
            "http://{}:{}@127.0.0.1:{}/git/{repo_name}.git",
            self.user, self.password, self.port
        )
    }

    /// The requests that reached `git http-backend` so far, one `METHOD URI` per request, in
    /// order (each one is a CGI process: the cost per operation that matters).
    pub fn requests(&self) -> Vec<String> {
        fs::read_to_string(self._dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The server's error log (CGI errors end up there).
    pub fn error_log(&self) -> String {
        fs::read_to_string(self._dir.path().join("error.log")).unwrap_or_default()
    }
}

/// `git daemon --enable=receive-pack --export-all` on 127.0.0.1; killed on drop.
pub struct GitDaemon {
    _guard: ChildGuard,
    port: u16,
    _dir: TempDir,
}

impl GitDaemon {
    /// Serves the repositories in `repos_dir` at `git://127.0.0.1:PORT/NAME.git`.
    pub fn start(repos_dir: &Path) -> GitDaemon {
        GitDaemon::start_with_env(repos_dir, &[])
    }

    /// [`GitDaemon::start`] with extra environment for its upload-pack and receive-pack (e.g.
    /// `GIT_TRACE_PACKET` to see what a client asked for).
    pub fn start_with_env(repos_dir: &Path, env: &[(&str, &str)]) -> GitDaemon {
        let git_bin = require_tool("git");
        let repos_dir = fs::canonicalize(repos_dir).expect("repos_dir exists");
        let dir = tempfile::Builder::new()
            .prefix("gitstate-daemon")
            .tempdir()
            .unwrap();
        // Run git-daemon itself: `git daemon` is a wrapper that execs it as a child, and killing
        // the wrapper would leave the daemon running after the test.
        let exec_path = git(None, &["--exec-path"]);
        let daemon_bin = Path::new(exec_path.trim()).join("git-daemon");
        let daemon_bin = if daemon_bin.exists() {
            daemon_bin
        } else {
            git_bin.clone()
        };
        let spawn = |port: u16| {
            let mut cmd = Command::new(&daemon_bin);
            if daemon_bin == git_bin {
                cmd.arg("daemon");
            }
            cmd.args([
                "--enable=receive-pack",
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", repos_dir.display()),
                &format!("--pid-file={}", dir.path().join("pid").display()),
                "--informative-errors",
            ])
            .arg(&repos_dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "safe.directory")
            .env("GIT_CONFIG_VALUE_0", "*")
            .envs(env.iter().copied());
            ChildGuard::spawn(cmd, &dir.path().join("daemon.log"), "git daemon")
        };
        let (guard, port) =
            start_on_free_port("git daemon", Duration::from_secs(20), spawn, port_open);
        GitDaemon {
            _guard: guard,
            port,
            _dir: dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `git://127.0.0.1:PORT/NAME.git`.
    pub fn url(&self, repo_name: &str) -> String {
        format!("git://127.0.0.1:{}/{repo_name}.git", self.port)
    }
}

// ------------------------------------------------------------------------------------------------
// Smart-HTTP servers that are not git's own (interoperability, issue 16)

/// Starts `tests/servers/SCRIPT` with `python` on a free port of 127.0.0.1 (`args(port)` are its
/// arguments), with `HOME` and its log in a new temporary directory; ready once the port accepts
/// connections (30 s at most).
fn start_script_server(
    python: &Path,
    script: &str,
    args: impl Fn(u16) -> Vec<std::ffi::OsString>,
) -> (ChildGuard, u16, TempDir) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("servers")
        .join(script);
    let dir = tempfile::Builder::new()
        .prefix("gitstate-script-server")
        .tempdir()
        .unwrap();
    let spawn = |port: u16| {
        let mut cmd = Command::new(python);
        cmd.arg(&path)
            .args(args(port))
            .env("HOME", dir.path())
            .env("PYTHONUNBUFFERED", "1");
        ChildGuard::spawn(cmd, &dir.path().join("server.log"), script)
    };
    let (guard, port) = start_on_free_port(script, Duration::from_secs(30), spawn, port_open);
    (guard, port, dir)
}

/// dulwich's smart-HTTP server (dulwich 1.2.21 from PyPI: `dulwich.web`'s WSGI application, where
/// upload-pack and receive-pack are written in Python, no git process involved), started by
/// `tests/servers/dulwich_http_server.py` like `python -m dulwich.web` but serving its one
/// repository at `http://127.0.0.1:PORT/git/NAME.git`, without authentication; killed on drop.
pub struct DulwichServer {
    guard: ChildGuard,
    port: u16,
    name: String,
    _dir: TempDir,
}

/// The dulwich version scripts/install-test-deps.sh installs (in a venv under `$GITSTATE_TOOLS`).
pub const DULWICH_VERSION: &str = "1.2.21";

impl DulwichServer {
    /// Serves the repository `git_dir` (bare or not) as `NAME.git`.
    pub fn start(git_dir: &Path, name: &str) -> DulwichServer {
        let python = tools_dir().join(format!("dulwich-{DULWICH_VERSION}/bin/python"));
        assert!(
            python.is_file(),
            "dulwich {DULWICH_VERSION} is not installed ({} is missing): {INSTALL_HINT}",
            python.display()
        );
        let git_dir = fs::canonicalize(git_dir).expect("git_dir exists");
        let (guard, port, dir) = start_script_server(&python, "dulwich_http_server.py", |port| {
            vec![
                port.to_string().into(),
                git_dir.clone().into_os_string(),
                name.into(),
            ]
        });
        DulwichServer {
            guard,
            port,
            name: name.to_string(),
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT/git/NAME.git`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/git/{}.git", self.port, self.name)
    }

    /// Its log (one line per request).
    pub fn log_path(&self) -> PathBuf {
        self.guard.log.clone()
    }
}

/// JGit's smart-HTTP server: `org.eclipse.jgit.http.server.GitServlet` (JGit 4.11.9 from Debian
/// `libjgit-java`: upload-pack and receive-pack written in Java, no git process involved) in an
/// embedded Jetty 9 (Debian `libjetty9-java`), started by `tests/servers/JGitHttpServer.java`.
/// Serves every repository under a directory at `http://127.0.0.1:PORT/git/NAME.git`, without
/// authentication (receive-pack where the repository sets `http.receivepack`, as [`bare_repo`]
/// does); killed on drop.
pub struct JGitServer {
    guard: ChildGuard,
    port: u16,
    _dir: TempDir,
}

impl JGitServer {
    /// Serves the repositories in `repos_dir`.
    pub fn start(repos_dir: &Path) -> JGitServer {
        let java = require_tool("java");
        let jars: Vec<PathBuf> = [
            "org.eclipse.jgit",
            "org.eclipse.jgit.http.server",
            "jetty9-server",
            "jetty9-servlet",
            "jetty9-security",
            "jetty9-http",
            "jetty9-io",
            "jetty9-util",
            "servlet-api",
            "javaewah",
            "jsch",
        ]
        .iter()
        .map(|name| PathBuf::from(format!("/usr/share/java/{name}.jar")))
        .collect();
        for jar in &jars {
            assert!(
                jar.is_file(),
                "{} is missing (Debian libjgit-java, libjetty9-java): {INSTALL_HINT}",
                jar.display()
            );
        }
        let classpath = std::env::join_paths(&jars).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("servers/JGitHttpServer.java");
        let repos_dir = fs::canonicalize(repos_dir).expect("repos_dir exists");
        let dir = tempfile::Builder::new()
            .prefix("gitstate-jgit")
            .tempdir()
            .unwrap();
        let spawn = |port: u16| {
            let mut cmd = Command::new(&java);
            // user.home: JGit reads ~/.gitconfig; keep the developer's out.
            cmd.arg(format!("-Duser.home={}", dir.path().display()))
                .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
                .arg(&classpath)
                .arg(&source)
                .arg(port.to_string())
                .arg(&repos_dir);
            ChildGuard::spawn(cmd, &dir.path().join("jgit.log"), "JGit http server")
        };
        let (guard, port) = start_on_free_port(
            "JGit http server",
            Duration::from_secs(90),
            spawn,
            port_open,
        );
        JGitServer {
            guard,
            port,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT/git/NAME.git`.
    pub fn url(&self, repo_name: &str) -> String {
        format!("http://127.0.0.1:{}/git/{repo_name}.git", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.guard.log.clone()
    }
}

/// The receive-pack capabilities of issue 16's server, byte for byte.
pub const ISSUE_16_RECEIVE_CAPS: &str = "report-status delete-refs quiet atomic ofs-delta side-band-64k no-done object-format=sha1 symref=HEAD:refs/heads/master";

/// `tests/servers/replay_advertisement.py` in front of a [`GitHttpServer`]: forwards every request,
/// but answers both advertisements in issue 16's shape (no `HEAD` line, `capabilities^{}` on an
/// empty repository, `symref=HEAD:refs/heads/master`, receive-pack capabilities as given, by
/// default [`ISSUE_16_RECEIVE_CAPS`]). Drops `Git-Protocol`, so the backend answers protocol v0.
/// Listens on 127.0.0.1; killed on drop.
pub struct ReplayAdvertisementServer {
    guard: ChildGuard,
    port: u16,
    _dir: TempDir,
}

impl ReplayAdvertisementServer {
    /// In front of `backend`, advertising `receive_caps` for receive-pack.
    pub fn start(backend: &GitHttpServer, receive_caps: &str) -> ReplayAdvertisementServer {
        let python = require_tool("python3");
        let backend_url = format!("http://127.0.0.1:{}", backend.port());
        let (guard, port, dir) = start_script_server(&python, "replay_advertisement.py", |port| {
            [
                "--port",
                &port.to_string(),
                "--backend",
                &backend_url,
                "--receive-caps",
                receive_caps,
            ]
            .map(std::ffi::OsString::from)
            .to_vec()
        });
        ReplayAdvertisementServer {
            guard,
            port,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT/git/NAME.git` (no credentials; the backend's are required).
    pub fn url(&self, repo_name: &str) -> String {
        format!("http://127.0.0.1:{}/git/{repo_name}.git", self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.guard.log.clone()
    }

    /// How many advertisements of `service` (`git-receive-pack`, `git-upload-pack`) it replayed.
    pub fn replayed(&self, service: &str) -> usize {
        self.guard
            .log_text()
            .lines()
            .filter(|l| l.starts_with(&format!("replayed {service}:")))
            .count()
    }
}

/// `tests/servers/hostile_git_daemon.py`: a git:// server whose every answer breaks a limit
/// (`drip`, `flood`, `pack-flood`; see the script). Listens on 127.0.0.1; killed on drop.
pub struct HostileGitDaemon {
    guard: ChildGuard,
    port: u16,
    _dir: TempDir,
}

impl HostileGitDaemon {
    pub fn start(mode: &str) -> HostileGitDaemon {
        let python = require_tool("python3");
        let (guard, port, dir) = start_script_server(&python, "hostile_git_daemon.py", |port| {
            ["--port", &port.to_string(), "--mode", mode]
                .map(std::ffi::OsString::from)
                .to_vec()
        });
        HostileGitDaemon {
            guard,
            port,
            _dir: dir,
        }
    }

    /// `git://127.0.0.1:PORT/x.git`.
    pub fn url(&self) -> String {
        format!("git://127.0.0.1:{}/x.git", self.port)
    }

    /// The `closed MODE after N bytes` lines: one per connection the client gave up on.
    pub fn closed(&self) -> Vec<String> {
        self.guard
            .log_text()
            .lines()
            .filter(|l| l.starts_with("closed "))
            .map(str::to_owned)
            .collect()
    }
}

/// A throwaway OpenSSH server on 127.0.0.1 (`/usr/sbin/sshd -D`, from openssh-server, installed
/// by scripts/install-test-deps.sh) that accepts the keys of `authorized_keys` for any user;
/// killed on drop.
pub struct Sshd {
    guard: ChildGuard,
    port: u16,
    _dir: TempDir,
}

impl Sshd {
    /// Starts sshd with `authorized_keys` (its text, options like `command="..."` included).
    pub fn start(authorized_keys: &str) -> Sshd {
        let sshd = require_tool("sshd");
        let dir = tempfile::Builder::new()
            .prefix("gitstate-sshd")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all("/run/sshd").ok();
        let host_key = dir.path().join("host_key");
        ssh_keygen(&host_key);
        let authorized = dir.path().join("authorized_keys");
        std::fs::write(&authorized, authorized_keys).unwrap();
        let spawn = |port: u16| {
            let config = dir.path().join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                     StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                     UsePAM no\nPermitRootLogin prohibit-password\nAcceptEnv GIT_PROTOCOL\n\
                     PidFile {}\n",
                    host_key.display(),
                    authorized.display(),
                    dir.path().join("sshd.pid").display()
                ),
            )
            .unwrap();
            let mut cmd = Command::new(&sshd);
            cmd.args(["-D", "-e", "-f"]).arg(&config);
            ChildGuard::spawn(cmd, &dir.path().join("sshd.log"), "sshd")
        };
        let (guard, port) = start_on_free_port("sshd", Duration::from_secs(15), spawn, port_open);
        Sshd {
            guard,
            port,
            _dir: dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// What sshd logged so far.
    pub fn log(&self) -> String {
        self.guard.log_text()
    }
}

/// The processes whose parent is `pid` (from `/proc/*/stat`): (pid, command name).
pub fn children_of(pid: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let ppid = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            if let Ok(child) = stat[..open].trim().parse::<u32>() {
                found.push((child, stat[open + 1..close].to_owned()));
            }
        }
    }
    found
}

/// Makes an ed25519 key pair without a passphrase at `path` (and `path.pub`).
pub fn ssh_keygen(path: &Path) {
    let ok = Command::new(require_tool("ssh-keygen"))
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "ssh-keygen failed for {}", path.display());
}

/// `GET URL/info/refs?service=SERVICE` as a v0 client sends it (no `Git-Protocol` header), with an
/// optional basic-auth pair: the raw advertisement, panicking unless it is a 200.
pub fn advertisement(repo_url: &str, service: &str, auth: Option<(&str, &str)>) -> Vec<u8> {
    let url = format!(
        "{}/info/refs?service={service}",
        repo_url.trim_end_matches('/')
    );
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut req = client.get(&url);
    if let Some((user, password)) = auth {
        req = req.basic_auth(user, Some(password));
    }
    let resp = req.send().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = resp.status().as_u16();
    let body = resp.bytes().unwrap().to_vec();
    assert_eq!(status, 200, "GET {url}: {}", String::from_utf8_lossy(&body));
    body
}

/// The ref lines of a v0 smart-HTTP advertisement: (pkt-line length as 4 hex digits, object id,
/// ref name, capabilities after the NUL of the first line — empty for the others).
pub fn advertised_refs(body: &[u8]) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    let mut rest = body;
    let mut flushes = 0;
    while rest.len() >= 4 && flushes < 2 {
        let len_hex = String::from_utf8_lossy(&rest[..4]).to_string();
        let len = usize::from_str_radix(&len_hex, 16)
            .unwrap_or_else(|_| panic!("not a pkt-line: {:?}", String::from_utf8_lossy(rest)));
        if len == 0 {
            flushes += 1;
            rest = &rest[4..];
            continue;
        }
        let payload = &rest[4..len];
        rest = &rest[len..];
        if payload.starts_with(b"# service=") {
            continue;
        }
        let line = String::from_utf8_lossy(payload);
        let line = line.trim_end_matches('\n');
        let (refpart, caps) = line.split_once('\0').unwrap_or((line, ""));
        let (id, name) = refpart.split_once(' ').unwrap_or((refpart, ""));
        out.push((len_hex, id.to_string(), name.to_string(), caps.to_string()));
    }
    out
}

// ------------------------------------------------------------------------------------------------
// gitstate

/// The gitstate binary: `$GITSTATE_BIN`, `$CARGO_TARGET_DIR/debug/gitstate`, or the `gitstate`
/// next to this test executable's `deps/` directory. Panics with a hint when none exists.
pub fn gitstate_bin() -> PathBuf {
    let mut tried = Vec::new();
    if let Some(bin) = std::env::var_os("GITSTATE_BIN") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "GITSTATE_BIN={} does not exist",
            bin.display()
        );
        return bin;
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        let dir = if dir.is_relative() {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir)
        } else {
            dir
        };
        tried.push(dir.join("debug/gitstate"));
    }
    if let Ok(exe) = std::env::current_exe() {
        // target/debug/deps/terraform_e2e-HASH → target/debug/gitstate
        if let Some(profile_dir) = exe.parent().and_then(Path::parent) {
            tried.push(profile_dir.join("gitstate"));
        }
    }
    tried.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/gitstate"));
    tried
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the gitstate binary was not found (tried {tried:?}); build it with \
                 `cargo build -p gitstate` or set GITSTATE_BIN (scripts/test.sh does both)"
            )
        })
}

/// A running `gitstate serve --listen 127.0.0.1:PORT ARGS…`; killed on drop.
///
/// Its environment is the test's minus every `GITSTATE_*`, `GIT_USERNAME`, `GIT_PASSWORD`,
/// `GITHUB_TOKEN` variable, plus `GITSTATE_CACHE_DIR` (a fresh temporary directory unless `env`
/// gives one), `RUST_LOG` (`info` unless set) and `env`.
pub struct Gitstate {
    guard: ChildGuard,
    port: u16,
    pub cache_dir: PathBuf,
    _dir: TempDir,
}

impl Gitstate {
    /// Starts `gitstate serve` in `cwd` and waits (up to 60 s) until `GET /_/health` answers 200.
    pub fn start(args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Gitstate {
        Gitstate::launch(args, env, cwd, |port| {
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

    /// Like [`Gitstate::start`] for a server on HTTPS (`--tls-cert`/`--tls-key` among `args`):
    /// ready once its port accepts connections.
    pub fn start_tls(args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Gitstate {
        Gitstate::launch(args, env, cwd, port_open)
    }

    fn launch(
        args: &[&str],
        env: &[(&str, &str)],
        cwd: &Path,
        ready: impl FnMut(u16) -> bool,
    ) -> Gitstate {
        let bin = gitstate_bin();
        let dir = tempfile::Builder::new()
            .prefix("gitstate-serve")
            .tempdir()
            .unwrap();
        let cache_dir = env
            .iter()
            .find(|(k, _)| *k == "GITSTATE_CACHE_DIR")
            .map(|(_, v)| PathBuf::from(v))
            .unwrap_or_else(|| dir.path().join("cache"));
        let log = dir.path().join("gitstate.log");
        let spawn = |port: u16| {
            let mut cmd = Command::new(&bin);
            cmd.arg("serve")
                .arg("--listen")
                .arg(format!("127.0.0.1:{port}"))
                .args(args)
                .current_dir(cwd);
            without_gitstate_env(&mut cmd);
            if std::env::var_os("RUST_LOG").is_none() {
                cmd.env("RUST_LOG", "info");
            }
            cmd.env("GITSTATE_CACHE_DIR", &cache_dir);
            for (k, v) in env {
                cmd.env(k, v);
            }
            ChildGuard::spawn(cmd, &log, "gitstate serve")
        };
        let (guard, port) =
            start_on_free_port("gitstate serve", Duration::from_secs(60), spawn, ready);
        Gitstate {
            guard,
            port,
            cache_dir,
            _dir: dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT/state/REPO/PATH`.
    pub fn state_url(&self, repo: &str, path: &str) -> String {
        format!("{}/state/{repo}/{path}", self.base_url())
    }

    /// Everything the server printed so far (for failure messages).
    pub fn log(&self) -> String {
        self.guard.log_text()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.guard.id()
    }

    /// True while the server process runs.
    pub fn running(&mut self) -> bool {
        self.guard.exited().is_none()
    }
}

// ------------------------------------------------------------------------------------------------
// Direct HTTP

/// Sends `METHOD url` (any method, LOCK and UNLOCK included) with an optional body and optional
/// basic-auth pair; returns (status, body). Err only when no HTTP answer came.
pub fn http(
    method: &str,
    url: &str,
    body: Option<&str>,
    auth: Option<(&str, &str)>,
) -> Result<(u16, String), String> {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .map_err(|e| e.to_string())?;
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let mut req = client.request(method, url);
    if let Some((user, password)) = auth {
        req = req.basic_auth(user, Some(password));
    }
    if let Some(body) = body {
        req = req
            .header("Content-Type", "application/json")
            .body(body.to_string());
    }
    let resp = req.send().map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp.text().map_err(|e| e.to_string())?;
    Ok((status, text))
}

/// The `Who` Terraform puts in its LockInfo on this machine: `user@hostname`.
pub fn terraform_who() -> String {
    let user = Command::new("id")
        .arg("-un")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let host = fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    format!("{user}@{host}")
}

/// A Terraform LockInfo JSON document with `ID` = `id` and `Who` = `who`.
pub fn lock_info(id: &str, who: &str, operation: &str) -> String {
    serde_json::json!({
        "ID": id,
        "Operation": operation,
        "Info": "",
        "Who": who,
        "Version": "1.0.3",
        "Created": "2024-01-01T00:00:00.000000000Z",
        "Path": ""
    })
    .to_string()
}

// ------------------------------------------------------------------------------------------------
// Terraform

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
        let out_path = dir.join(".tf-stdout");
        let err_path = dir.join(".tf-stderr");
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out_path).expect("create stdout file"))
            .stderr(fs::File::create(&err_path).expect("create stderr file"));
        for (key, _) in std::env::vars_os() {
            let k = key.to_string_lossy().to_string();
            if k.starts_with("TF_HTTP_")
                || k.starts_with("TF_CLI_ARGS")
                || k.starts_with("TF_VAR_")
                || k.eq_ignore_ascii_case("http_proxy")
                || k.eq_ignore_ascii_case("https_proxy")
                || k.eq_ignore_ascii_case("all_proxy")
                || k == "TF_WORKSPACE"
                || k == "TF_DATA_DIR"
                || k == "TF_PLUGIN_CACHE_DIR"
            {
                cmd.env_remove(&key);
            }
        }
        cmd.env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}; {INSTALL_HINT}", self.bin.display()));
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

// ------------------------------------------------------------------------------------------------
// Terraform configuration

/// The `backend "http"` block of a test configuration.
#[derive(Clone, Debug)]
pub struct HttpBackend {
    pub address: String,
    pub lock_address: Option<String>,
    pub unlock_address: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Other attributes written as `key = value` (value is HCL: quote strings yourself).
    pub extra: Vec<(String, String)>,
}

impl HttpBackend {
    /// `address`, `lock_address` and `unlock_address` all set to `address` (the documented setup).
    pub fn new(address: &str) -> HttpBackend {
        HttpBackend {
            address: address.to_string(),
            lock_address: Some(address.to_string()),
            unlock_address: Some(address.to_string()),
            username: None,
            password: None,
            extra: Vec::new(),
        }
    }

    /// Adds `username`/`password` (basic auth on every request).
    pub fn with_auth(mut self, username: &str, password: &str) -> HttpBackend {
        self.username = Some(username.to_string());
        self.password = Some(password.to_string());
        self
    }

    pub fn hcl(&self) -> String {
        let mut s = String::from("terraform {\n  backend \"http\" {\n");
        let mut attr = |k: &str, v: &str| s.push_str(&format!("    {k} = {}\n", hcl_string(v)));
        attr("address", &self.address);
        if let Some(v) = &self.lock_address {
            attr("lock_address", v);
        }
        if let Some(v) = &self.unlock_address {
            attr("unlock_address", v);
        }
        if let Some(v) = &self.username {
            attr("username", v);
        }
        if let Some(v) = &self.password {
            attr("password", v);
        }
        for (k, v) in &self.extra {
            s.push_str(&format!("    {k} = {v}\n"));
        }
        s.push_str("  }\n}\n");
        s
    }
}

fn hcl_string(v: &str) -> String {
    serde_json::to_string(v)
        .unwrap()
        .replace("${", "$${")
        .replace("%{", "%%{")
}

/// Writes `dir/main.tf`: the backend block and `count` `null_resource`s `r0…` whose `triggers`
/// hold `generation` (change it to make the next apply replace them, i.e. write a new state).
pub fn write_main_tf(dir: &Path, backend: &HttpBackend, count: usize, generation: &str) {
    let mut tf = backend.hcl();
    for i in 0..count {
        tf.push_str(&format!(
            "\nresource \"null_resource\" \"r{i}\" {{\n  triggers = {{\n    generation = {}\n    index      = \"{i}\"\n  }}\n}}\n",
            hcl_string(generation)
        ));
    }
    let mut f = fs::File::create(dir.join("main.tf")).expect("create main.tf");
    f.write_all(tf.as_bytes()).expect("write main.tf");
}

// ------------------------------------------------------------------------------------------------
// States checked with plain git

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

// ------------------------------------------------------------------------------------------------
// gitstate wrap

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
            || k.starts_with("TF_HTTP_")
            || k.starts_with("TF_CLI_ARGS")
            || k.starts_with("TF_VAR_")
            || k.eq_ignore_ascii_case("http_proxy")
            || k.eq_ignore_ascii_case("https_proxy")
            || k.eq_ignore_ascii_case("all_proxy")
            || k == "TF_WORKSPACE"
            || k == "TF_DATA_DIR"
            || k == "TF_PLUGIN_CACHE_DIR"
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
