//! Fixtures for encryption at rest: moto (KMS) on loopback, the real `sops` binary, age keys.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{start_on_free_port, tools_dir, which, ChildGuard};

/// The moto release `scripts/install-test-deps.sh` installs.
pub const MOTO_VERSION: &str = "5.2.5";

/// `moto_server` on 127.0.0.1 (KMS, DynamoDB, …), stopped on drop.
pub struct MotoServer {
    guard: ChildGuard,
    port: u16,
    _dir: tempfile::TempDir,
}

impl MotoServer {
    /// Starts `$GITSTATE_TOOLS/moto-5.2.5/bin/moto_server` (or `moto_server` on PATH).
    pub fn start() -> MotoServer {
        let bin = moto_bin();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("moto.log");
        let (guard, port) = start_on_free_port(
            "moto_server",
            Duration::from_secs(60),
            |port| {
                let mut cmd = Command::new(&bin);
                cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
                ChildGuard::spawn(cmd, &log, "moto_server")
            },
            moto_ready,
        );
        MotoServer {
            guard,
            port,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The variables an AWS SDK (gitstate, sops) needs to talk to this emulator.
    pub fn aws_env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL".into(), self.endpoint()),
            ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
            ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_DEFAULT_REGION".into(), "us-east-1".into()),
            ("AWS_EC2_METADATA_DISABLED".into(), "true".into()),
        ]
    }

    /// Every item of a DynamoDB table (a scan, page by page), in DynamoDB's JSON form
    /// (`{"pk": {"S": "…"}, …}`).
    pub fn dynamodb_items(&self, table: &str) -> Vec<serde_json::Value> {
        let mut items = Vec::new();
        let mut start = serde_json::Value::Null;
        loop {
            let mut request = serde_json::json!({"TableName": table, "ConsistentRead": true});
            if !start.is_null() {
                request["ExclusiveStartKey"] = start.clone();
            }
            let page = self.call_service(
                "dynamodb",
                "DynamoDB_20120810.Scan",
                "application/x-amz-json-1.0",
                &request,
            );
            items.extend(page["Items"].as_array().cloned().unwrap_or_default());
            start = page["LastEvaluatedKey"].clone();
            if start.is_null() {
                return items;
            }
        }
    }

    /// One JSON-protocol call to `service` (`X-Amz-Target: TARGET`); moto picks the service from
    /// the credential scope and does not check signatures.
    pub fn call_service(
        &self,
        service: &str,
        target: &str,
        content_type: &str,
        body: &serde_json::Value,
    ) -> serde_json::Value {
        let resp = reqwest::blocking::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(self.endpoint())
            .header("X-Amz-Target", target)
            .header("Content-Type", content_type)
            .header(
                "Authorization",
                format!("AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"),
            )
            .body(body.to_string())
            .send()
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let status = resp.status();
        let text = resp.text().unwrap();
        assert!(status.is_success(), "{target}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// One JSON-protocol call (`X-Amz-Target: TARGET`); moto does not check signatures.
    pub fn call(&self, target: &str, body: &serde_json::Value) -> serde_json::Value {
        let resp = reqwest::blocking::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(self.endpoint())
            .header("X-Amz-Target", target)
            .header("Content-Type", "application/x-amz-json-1.1")
            .header(
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/kms/aws4_request, SignedHeaders=host, Signature=0",
            )
            .body(body.to_string())
            .send()
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        let status = resp.status();
        let text = resp.text().unwrap();
        assert!(status.is_success(), "{target}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// Creates a symmetric KMS key and returns its ARN.
    pub fn create_kms_key(&self) -> String {
        let out = self.call("TrentService.CreateKey", &serde_json::json!({}));
        out["KeyMetadata"]["Arn"].as_str().unwrap().to_owned()
    }

    /// Stops the emulator (to test an unreachable KMS or DynamoDB).
    pub fn stop(&mut self) {
        self.guard.kill();
    }

    /// Starts a fresh (empty) emulator on the same port, as after a restart.
    pub fn restart(&mut self) {
        self.guard.kill();
        let log = self._dir.path().join("moto-restarted.log");
        let mut cmd = Command::new(moto_bin());
        cmd.args(["-H", "127.0.0.1", "-p", &self.port.to_string()]);
        let mut guard = ChildGuard::spawn(cmd, &log, "moto_server");
        let port = self.port;
        guard
            .wait_ready(Duration::from_secs(60), || moto_ready(port))
            .unwrap_or_else(|log| panic!("moto did not restart: {log}"));
        self.guard = guard;
    }
}

fn moto_bin() -> PathBuf {
    let installed = tools_dir().join(format!("moto-{MOTO_VERSION}/bin/moto_server"));
    if installed.is_file() {
        installed
    } else {
        which("moto_server").expect("moto_server: run scripts/install-test-deps.sh")
    }
}

fn moto_ready(port: u16) -> bool {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()
        .and_then(|c| {
            c.get(format!("http://127.0.0.1:{port}/moto-api/"))
                .send()
                .ok()
        })
        .is_some_and(|r| r.status().is_success())
}

/// The real sops 3.11 binary that `scripts/install-test-deps.sh` installs.
pub fn sops_bin() -> PathBuf {
    let installed = tools_dir().join("sops-3.11.0/sops");
    if installed.is_file() {
        return installed;
    }
    which("sops").expect("sops: run scripts/install-test-deps.sh")
}

/// Runs real `sops -d` on `file` (JSON in and out) with only the variables in `env` (plus PATH
/// and HOME); returns (success, stdout, stderr).
pub fn sops_decrypt(file: &Path, env: &[(String, String)]) -> (bool, Vec<u8>, String) {
    let mut cmd = Command::new(sops_bin());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .args([
            "--disable-version-check",
            "decrypt",
            "--input-type",
            "json",
            "--output-type",
            "json",
        ])
        .arg(file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sops");
    (
        out.status.success(),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Real `sops -d` of the document `bytes` with the age key file `key_file`, parsed; panics
/// with sops' message when it fails.
pub fn sops_decrypt_with_age_key(bytes: &[u8], key_file: &Path) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("state.json");
    std::fs::write(&file, bytes).expect("write");
    let (ok, stdout, stderr) = sops_decrypt(
        &file,
        &[(
            "SOPS_AGE_KEY_FILE".into(),
            key_file.to_str().expect("utf-8").into(),
        )],
    );
    assert!(ok, "sops -d failed: {stderr}");
    serde_json::from_slice(&stdout).expect("sops printed JSON")
}

/// A fresh age X25519 key pair.
pub struct AgeKeyPair {
    /// `age1…`
    pub recipient: String,
    /// `AGE-SECRET-KEY-1…`
    pub identity: String,
}

impl AgeKeyPair {
    /// Generates a key pair.
    pub fn generate() -> AgeKeyPair {
        use age::secrecy::ExposeSecret;
        let identity = age::x25519::Identity::generate();
        AgeKeyPair {
            recipient: identity.to_public().to_string(),
            identity: identity.to_string().expose_secret().to_owned(),
        }
    }

    /// Writes the identity to `dir/NAME.txt` (an age key file) and returns its path.
    pub fn write_key_file(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.txt"));
        std::fs::write(
            &path,
            format!("# public key: {}\n{}\n", self.recipient, self.identity),
        )
        .unwrap();
        path
    }
}

/// Lower-case hex SHA-256 of `text` (team-mode token hashes are `sha256:` + this).
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A file of the legacy-aes vectors (terraform-backend-git's `aes` provider, made with Python's
/// `cryptography`, see their README), which live with the seal crate.
pub fn legacy_aes_vector(name: &str) -> Vec<u8> {
    // The workspace root is this crate's parent.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .join("shared/seal/tests/vectors/legacy-aes")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Real `sops -e` of `plain` (JSON in and out) with the creation rules in `config_yaml` (a
/// `.sops.yaml` text: key groups, a Shamir threshold...), as a tool other than gitstate leaves
/// documents: every leaf encrypted unless the rules say otherwise. `env` is all sops sees besides
/// PATH and HOME (e.g. `GNUPGHOME`, `VAULT_ADDR`, `VAULT_TOKEN`).
pub fn sops_encrypt_with_config(
    plain: &serde_json::Value,
    config_yaml: &str,
    env: &[(&str, &str)],
) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("sops.yaml"), config_yaml).expect("write sops.yaml");
    std::fs::write(dir.path().join("state.json"), plain.to_string()).expect("write state");
    let out = Command::new(sops_bin())
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir.path())
        .envs(env.iter().copied())
        .args([
            "--disable-version-check",
            "--config",
            "sops.yaml",
            "encrypt",
            "--input-type",
            "json",
            "--output-type",
            "json",
            "state.json",
        ])
        .output()
        .expect("run sops");
    assert!(
        out.status.success(),
        "sops -e failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
