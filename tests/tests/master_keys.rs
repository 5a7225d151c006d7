//! The master keys terraform-backend-git users have, end to end: real Terraform applies through
//! `gitstate serve` configured with a PGP fingerprint (the user's gpg, a throwaway key) or a Vault
//! transit key (OpenBao 2.7.2 in dev mode); what lands in git opens with the real `sops -d`, and
//! Terraform reads it back. Without the key the server says which key the state needs, and the
//! Vault token appears in no log line nor answer.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gitstate_tests::crypto::sops_decrypt;
use gitstate_tests::*;
use serde_json::Value;

/// The root token of the OpenBao dev server (a test value; checked to be absent from logs).
const ROOT_TOKEN: &str = "gitstate-e2e-root-token-5f1c";

fn gpg_bin() -> PathBuf {
    which("gpg").unwrap_or_else(|| {
        panic!("gpg (GnuPG 2.1+) is not on PATH: run scripts/install-test-deps.sh")
    })
}

fn bao_bin() -> PathBuf {
    let p = tools_dir().join("openbao-2.7.2/bao");
    assert!(
        p.is_file(),
        "OpenBao (bao 2.7.2) was not found at {}: run scripts/install-test-deps.sh",
        p.display()
    );
    p
}

/// A GnuPG home (short path: gpg-agent's socket lives there) with one key without passphrase.
struct GnuPg {
    home: PathBuf,
    fingerprint: String,
}

impl GnuPg {
    fn new() -> GnuPg {
        let home = std::env::temp_dir().join(format!("gs-e2e-gpg-{}", std::process::id()));
        let _ = fs::remove_dir_all(&home);
        fs::create_dir_all(&home).unwrap();
        fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let gpg = |args: &[&str]| {
            let out = Command::new(gpg_bin())
                .arg("--homedir")
                .arg(&home)
                .args(["--batch", "--no-tty"])
                .args(args)
                .output()
                .expect("run gpg");
            assert!(
                out.status.success(),
                "gpg {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        gpg(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            "gitstate e2e <e2e@gitstate.invalid>",
            "default",
            "default",
            "never",
        ]);
        let fingerprint = gpg(&["--list-secret-keys", "--with-colons"])
            .lines()
            .find(|l| l.starts_with("fpr:"))
            .and_then(|l| l.split(':').nth(9))
            .expect("a fingerprint")
            .to_owned();
        GnuPg { home, fingerprint }
    }

    fn home(&self) -> &str {
        self.home.to_str().unwrap()
    }
}

impl Drop for GnuPg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(&self.home)
            .args(["--kill", "gpg-agent"])
            .status();
        let _ = fs::remove_dir_all(&self.home);
    }
}

/// An OpenBao dev server with transit enabled and key `tfstate`; killed on drop.
struct Bao {
    guard: ChildGuard,
    addr: String,
    home: tempfile::TempDir,
}

impl Bao {
    fn start() -> Bao {
        let port = free_port();
        let home = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(bao_bin());
        cmd.env("HOME", home.path())
            .env_remove("VAULT_TOKEN")
            .args([
                "server",
                "-dev",
                &format!("-dev-root-token-id={ROOT_TOKEN}"),
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
                break;
            }
            assert!(
                Instant::now() < deadline,
                "OpenBao did not come up: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                bao.guard.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let out = bao.cli(&["write", "-f", "transit/keys/tfstate"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        bao
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bao_bin())
            .env("HOME", self.home.path())
            .env("VAULT_ADDR", &self.addr)
            .env("VAULT_TOKEN", ROOT_TOKEN)
            .args(args)
            .output()
            .expect("run bao")
    }

    fn uri(&self) -> String {
        format!("{}/v1/transit/keys/tfstate", self.addr)
    }
}

fn stored(cwd: &Path) -> Vec<u8> {
    git_show(&cwd.join(".gitstate/default.git"), "main", "prod.tfstate")
        .expect("prod.tfstate is in the repository")
}

fn real_sops(bytes: &[u8], env: &[(String, String)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state.json");
    fs::write(&file, bytes).unwrap();
    let (ok, stdout, stderr) = sops_decrypt(&file, env);
    assert!(ok, "sops -d failed: {stderr}");
    serde_json::from_slice(&stdout).unwrap()
}

fn apply_and_plan(server: &Gitstate, tfdir: &Path) {
    let tf = Terraform::installed("1.15.5");
    let backend = HttpBackend::new(&server.state_url("default", "prod.tfstate"));
    write_main_tf(tfdir, &backend, 2, "one");
    tf.init(tfdir).expect_code(0, "init");
    tf.apply(tfdir).expect_code(0, "apply");
    tf.plan(tfdir)
        .expect_code(0, "plan reads the sealed state back");
}

#[test]
fn terraform_through_a_pgp_key() {
    let gnupg = GnuPg::new();
    let cwd = tempfile::tempdir().unwrap();
    let tfdir = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &["--pgp-fingerprint", &gnupg.fingerprint],
        &[("GNUPGHOME", gnupg.home())],
        cwd.path(),
    );
    apply_and_plan(&server, tfdir.path());
    let sealed = stored(cwd.path());
    let doc: Value = serde_json::from_slice(&sealed).unwrap();
    assert_eq!(doc["sops"]["pgp"][0]["fp"], gnupg.fingerprint.as_str());
    let opened = real_sops(&sealed, &[("GNUPGHOME".into(), gnupg.home().to_owned())]);
    assert_eq!(opened["resources"][0]["type"], "null_resource");
    drop(server);

    // A server whose gpg has no such key answers 500 naming the fingerprint the state needs.
    let empty = std::env::temp_dir().join(format!("gs-e2e-gpg0-{}", std::process::id()));
    fs::create_dir_all(&empty).unwrap();
    fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let other = GnuPg::new_in(&empty);
    let server = Gitstate::start(
        &["--pgp-fingerprint", &other.fingerprint],
        &[("GNUPGHOME", other.home())],
        cwd.path(),
    );
    let (status, text) = http(
        "GET",
        &server.state_url("default", "prod.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(
        text.contains(&format!("pgp:{}", gnupg.fingerprint)),
        "the answer names the key the state needs: {text}"
    );
}

impl GnuPg {
    /// Another key in its own home `home`.
    fn new_in(home: &Path) -> GnuPg {
        let gpg = |args: &[&str]| {
            let out = Command::new(gpg_bin())
                .arg("--homedir")
                .arg(home)
                .args(["--batch", "--no-tty"])
                .args(args)
                .output()
                .expect("run gpg");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        gpg(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            "gitstate other <other@gitstate.invalid>",
            "default",
            "default",
            "never",
        ]);
        let fingerprint = gpg(&["--list-secret-keys", "--with-colons"])
            .lines()
            .find(|l| l.starts_with("fpr:"))
            .and_then(|l| l.split(':').nth(9))
            .expect("a fingerprint")
            .to_owned();
        GnuPg {
            home: home.to_owned(),
            fingerprint,
        }
    }
}

#[test]
fn terraform_through_a_vault_transit_key_and_the_token_stays_out_of_logs() {
    let bao = Bao::start();
    let cwd = tempfile::tempdir().unwrap();
    let tfdir = tempfile::tempdir().unwrap();
    let uri = bao.uri();
    let server = Gitstate::start(
        &[],
        &[
            ("SOPS_VAULT_URIS", uri.as_str()),
            ("VAULT_TOKEN", ROOT_TOKEN),
            ("RUST_LOG", "debug"),
        ],
        cwd.path(),
    );
    apply_and_plan(&server, tfdir.path());
    let sealed = stored(cwd.path());
    let doc: Value = serde_json::from_slice(&sealed).unwrap();
    assert_eq!(
        doc["sops"]["hc_vault"][0]["vault_address"],
        bao.addr.as_str()
    );
    assert_eq!(doc["sops"]["hc_vault"][0]["key_name"], "tfstate");
    let opened = real_sops(
        &sealed,
        &[
            ("VAULT_ADDR".into(), bao.addr.clone()),
            ("VAULT_TOKEN".into(), ROOT_TOKEN.into()),
        ],
    );
    assert_eq!(opened["resources"][0]["type"], "null_resource");
    let log = server.log();
    assert!(
        !log.contains(ROOT_TOKEN),
        "the Vault token is in the log:\n{log}"
    );
    drop(server);

    // Without a token: 500 naming the key and why, and still no token anywhere.
    let home = tempfile::tempdir().unwrap();
    let server = Gitstate::start(
        &["--vault-uri", &uri],
        &[
            ("HOME", home.path().to_str().unwrap()),
            ("RUST_LOG", "debug"),
        ],
        cwd.path(),
    );
    let (status, text) = http(
        "GET",
        &server.state_url("default", "prod.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 500, "{text}");
    assert!(text.contains(&format!("hc_vault:{uri}")), "{text}");
    assert!(text.contains("VAULT_TOKEN"), "{text}");
    assert!(!server.log().contains(ROOT_TOKEN));

    // Vault down while reading: 503, the key named.
    let server_up = Gitstate::start(
        &["--vault-uri", &uri],
        &[("VAULT_TOKEN", ROOT_TOKEN)],
        cwd.path(),
    );
    drop(bao);
    let (status, text) = http(
        "GET",
        &server_up.state_url("default", "prod.tfstate"),
        None,
        None,
    )
    .unwrap();
    assert_eq!(status, 503, "{text}");
    assert!(text.contains(&uri), "{text}");
    assert!(!text.contains(ROOT_TOKEN) && !server_up.log().contains(ROOT_TOKEN));
}
