//! Smart-HTTP and ssh servers that are not git's own (interoperability, issue 16), and hostile ones.

use std::fs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::*;

/// Starts `tests/servers/SCRIPT` with `python` on a free port of 127.0.0.1 (`args(port)` are its
/// arguments), with `HOME` and its log in a new temporary directory; ready once the port accepts
/// connections (30 s at most).
pub(crate) fn start_script_server(
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
