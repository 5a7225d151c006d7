//! Master-key servers and keyrings for the tests, real ones: a GnuPG home with a throwaway key
//! (the user's `gpg`, as sops calls it) and an OpenBao dev server with the transit engine
//! (`bao`, installed by `scripts/install-test-deps.sh`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, tools_dir, which, ChildGuard, INSTALL_HINT};

/// `gpg` on PATH.
pub fn gpg_bin() -> PathBuf {
    which("gpg").unwrap_or_else(|| panic!("gpg (GnuPG 2.1+) is not on PATH: {INSTALL_HINT}"))
}

/// The OpenBao 2.7.2 binary `scripts/install-test-deps.sh` installs.
pub fn bao_bin() -> PathBuf {
    let path = tools_dir().join("openbao-2.7.2/bao");
    assert!(
        path.is_file(),
        "OpenBao (bao 2.7.2) was not found at {}: {INSTALL_HINT}",
        path.display()
    );
    path
}

/// A GnuPG home with one key without a passphrase, and its fingerprint. Its gpg-agent is stopped
/// and the home removed when dropped.
pub struct GnuPg {
    /// The home (`GNUPGHOME`).
    pub home: PathBuf,
    /// The key's full fingerprint.
    pub fingerprint: String,
}

impl GnuPg {
    /// A new home named after `name` (unique within this process) holding a new key. The path is
    /// short: gpg-agent's socket lives in it, and socket paths are limited to ~100 bytes.
    pub fn new(name: &str) -> GnuPg {
        let home = std::env::temp_dir().join(format!("gs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).expect("create the GnuPG home");
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .expect("chmod the GnuPG home");
        let mut gnupg = GnuPg {
            home,
            fingerprint: String::new(),
        };
        gnupg.gpg(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            &format!("gitstate {name} <{name}@gitstate.invalid>"),
            "default",
            "default",
            "never",
        ]);
        gnupg.fingerprint = gnupg
            .gpg(&["--list-secret-keys", "--with-colons"])
            .lines()
            .find(|l| l.starts_with("fpr:"))
            .and_then(|l| l.split(':').nth(9))
            .expect("gpg lists the key's fingerprint")
            .to_owned();
        gnupg
    }

    /// The home as a string (for `GNUPGHOME`).
    pub fn home_str(&self) -> &str {
        self.home.to_str().expect("utf-8 path")
    }

    /// The key's secret part, armored (`gpg --armor --export-secret-keys`), as a signing key file
    /// holds it.
    pub fn export_secret_key(&self) -> String {
        self.gpg(&["--armor", "--export-secret-keys", &self.fingerprint])
    }

    /// Runs `gpg` on this home; panics with its message when it fails.
    fn gpg(&self, args: &[&str]) -> String {
        let out = Command::new(gpg_bin())
            .arg("--homedir")
            .arg(&self.home)
            .args(["--batch", "--no-tty"])
            .args(args)
            .output()
            .expect("run gpg");
        assert!(
            out.status.success(),
            "gpg {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for GnuPg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(&self.home)
            .args(["--kill", "gpg-agent"])
            .status();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// An OpenBao dev server on 127.0.0.1 with the transit engine enabled; killed on drop.
pub struct Bao {
    guard: ChildGuard,
    /// `http://127.0.0.1:PORT` (`VAULT_ADDR`).
    pub addr: String,
    home: tempfile::TempDir,
}

impl Bao {
    /// The dev server's root token (a test value: tests check it never shows).
    pub const ROOT_TOKEN: &'static str = "gitstate-test-root-token-5f1c";

    /// Starts it and enables transit (waiting up to 60 s for it to answer).
    pub fn start() -> Bao {
        let port = free_port();
        // Its own HOME: the dev server and the CLI write ~/.vault-token otherwise.
        let home = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new(bao_bin());
        cmd.env("HOME", home.path())
            .env_remove("VAULT_TOKEN")
            .args([
                "server",
                "-dev",
                &format!("-dev-root-token-id={}", Bao::ROOT_TOKEN),
                &format!("-dev-listen-address=127.0.0.1:{port}"),
            ])
            .stdin(Stdio::null());
        let guard = ChildGuard::spawn(cmd, &home.path().join("bao.log"), "bao server -dev");
        let bao = Bao {
            guard,
            addr: format!("http://127.0.0.1:{port}"),
            home,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = bao.cli(&["secrets", "enable", "transit"]);
            if out.status.success() {
                return bao;
            }
            assert!(
                Instant::now() < deadline,
                "OpenBao did not come up at {}: {}\n{}",
                bao.addr,
                String::from_utf8_lossy(&out.stderr),
                bao.guard.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs the `bao` CLI against this server as root.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bao_bin())
            .env("HOME", self.home.path())
            .env("VAULT_ADDR", &self.addr)
            .env("VAULT_TOKEN", Bao::ROOT_TOKEN)
            .args(args)
            .output()
            .expect("run bao")
    }

    /// Creates the transit key `name`.
    pub fn create_key(&self, name: &str) {
        let out = self.cli(&["write", "-f", &format!("transit/keys/{name}")]);
        assert!(
            out.status.success(),
            "bao write transit/keys/{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The sops URI of the transit key `name`.
    pub fn uri(&self, name: &str) -> String {
        format!("{}/v1/transit/keys/{name}", self.addr)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        self.guard.log_text()
    }
}
