//! The gitstate binary, started as `gitstate serve`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::*;

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

    /// Whether a line the server logged for the request `id` (its span carries the id) holds
    /// `needle`: where the cause of an error answer is (the answer holds one sentence and the id).
    pub fn logged(&self, id: &str, needle: &str) -> bool {
        !id.is_empty()
            && self
                .log()
                .lines()
                .any(|line| line.contains(id) && line.contains(needle))
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
