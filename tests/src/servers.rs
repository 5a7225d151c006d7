//! Git servers: lighttpd + `git http-backend` (smart HTTP) and `git daemon`.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::*;

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

/// Writes (atomically: a new file renamed over the old) the htpasswd file that accepts `user`
/// with `password` only, hashed with `openssl passwd -apr1`.
fn write_htpasswd(openssl: &Path, htpasswd: &Path, user: &str, password: &str) {
    // The password goes through stdin, never argv (visible to every local user).
    let mut hashing = Command::new(openssl)
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
    let next = htpasswd.with_extension("next");
    fs::write(
        &next,
        format!("{user}:{}\n", String::from_utf8_lossy(&hash.stdout).trim()),
    )
    .unwrap();
    fs::rename(&next, htpasswd).unwrap();
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
        let htpasswd = dir.path().join("htpasswd");
        write_htpasswd(&openssl, &htpasswd, user, password);
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

    /// Changes the password the server accepts (lighttpd reads its htpasswd file on every
    /// request): from now on only `password` is accepted for the user, as when a token rotates.
    pub fn set_password(&mut self, password: &str) {
        let openssl = require_tool("openssl");
        write_htpasswd(
            &openssl,
            &self._dir.path().join("htpasswd"),
            &self.user,
            password,
        );
        self.password = password.to_string();
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

    /// [`GitHttpServer::url`] through a proxy listening on `port` in front of this server.
    pub fn url_through(&self, repo_name: &str, port: u16) -> String {
        format!("{}://127.0.0.1:{port}/git/{repo_name}.git", self.scheme)
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
