//! Real git servers on 127.0.0.1 for the tests: `git daemon` and lighttpd + `git http-backend`.
//! Every server is killed when its guard drops.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed on drop.
pub struct ChildGuard(Child);

impl ChildGuard {
    /// Guards `child`.
    pub fn new(child: Child) -> ChildGuard {
        ChildGuard(child)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what} did not listen on {port}");
}

/// Creates an empty bare repository `dir/name.git` and returns its path. Its upload-pack offers
/// `filter` (`uploadpack.allowFilter`, as GitHub and GitLab do), so reads fetch partially.
pub fn bare_repo(dir: &Path, name: &str) -> PathBuf {
    let path = bare_repo_without_filter(dir, name);
    super::git(&path, &["config", "uploadpack.allowFilter", "true"]);
    path
}

/// Creates an empty bare repository `dir/name.git` whose upload-pack offers no `filter` (git's
/// default): reads fall back to fetching whole trees.
pub fn bare_repo_without_filter(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.git"));
    super::git(
        dir,
        &["init", "-q", "--bare", "-b", "main", path.to_str().unwrap()],
    );
    path
}

/// `git daemon` exporting every repository under `base` with receive-pack enabled.
pub struct GitDaemon {
    _child: ChildGuard,
    /// Its port.
    pub port: u16,
}

impl GitDaemon {
    /// Starts the daemon (retrying on a port race).
    pub fn start(base: &Path) -> GitDaemon {
        GitDaemon::start_with_env(base, &[])
    }

    /// Starts the daemon with extra environment for its upload-pack and receive-pack (e.g.
    /// `GIT_TRACE_PACKET` to see what a client asked for).
    pub fn start_with_env(base: &Path, env: &[(&str, &str)]) -> GitDaemon {
        // Run `git-daemon` itself: `git daemon` would fork it as a child that outlives a kill
        // of the `git` wrapper.
        let exec_path = super::git(base, &["--exec-path"]).trim().to_string();
        let program = Path::new(&exec_path).join("git-daemon");
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new(&program)
                .args([
                    "--enable=receive-pack",
                    "--export-all",
                    "--reuseaddr",
                    "--listen=127.0.0.1",
                    &format!("--base-path={}", base.display()),
                    &format!("--port={port}"),
                ])
                .arg(base)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn git daemon");
            let start = Instant::now();
            let mut up = false;
            while start.elapsed() < Duration::from_secs(10) {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    up = true;
                    break;
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if up {
                return GitDaemon {
                    _child: ChildGuard(child),
                    port,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("git daemon did not start");
    }

    /// `git://127.0.0.1:PORT/NAME.git`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}.git", self.port)
    }
}

/// lighttpd serving `git http-backend` for the repositories under a directory, basic auth required.
pub struct GitHttp {
    _child: ChildGuard,
    _dir: tempfile::TempDir,
    /// Its port.
    pub port: u16,
}

/// Whether lighttpd is installed (HTTP tests are skipped with a message otherwise).
pub fn have_lighttpd() -> bool {
    Path::new("/usr/sbin/lighttpd").exists()
}

impl GitHttp {
    /// Serves `repos/NAME.git` at `http://127.0.0.1:PORT/git/NAME.git` for `user`:`password`.
    pub fn start(repos: &Path, user: &str, password: &str) -> GitHttp {
        let dir = tempfile::tempdir().unwrap();
        let hash = Command::new("openssl")
            .args(["passwd", "-apr1", password])
            .output()
            .expect("openssl passwd");
        assert!(hash.status.success());
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(
            &htpasswd,
            format!("{user}:{}\n", String::from_utf8_lossy(&hash.stdout).trim()),
        )
        .unwrap();
        let exec_path = super::git(repos, &["--exec-path"]).trim().to_string();
        let backend = Path::new(&exec_path).join("git-http-backend");
        let docroot = dir.path().join("www");
        std::fs::create_dir_all(&docroot).unwrap();
        let path_env = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
        for _ in 0..5 {
            let port = free_port();
            let conf = dir.path().join("lighttpd.conf");
            std::fs::write(
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
"#,
                    docroot = docroot.display(),
                    errorlog = dir.path().join("error.log").display(),
                    backend = backend.display(),
                    htpasswd = htpasswd.display(),
                    root = repos.display(),
                ),
            )
            .unwrap();
            let mut child = Command::new("/usr/sbin/lighttpd")
                .arg("-D")
                .arg("-f")
                .arg(&conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn lighttpd");
            std::thread::sleep(Duration::from_millis(50));
            if let Ok(Some(_)) = child.try_wait() {
                continue; // port race
            }
            wait_for_port(port, &mut child, "lighttpd");
            return GitHttp {
                _child: ChildGuard(child),
                _dir: dir,
                port,
            };
        }
        panic!("lighttpd did not start");
    }

    /// `http://127.0.0.1:PORT/git/NAME.git`.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/git/{name}.git", self.port)
    }

    /// The same repository where pushing is forbidden (`http.receivepack false`: 403).
    pub fn read_only_url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/ro/{name}.git", self.port)
    }
}
