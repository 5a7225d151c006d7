//! A gitstate serving the workspace API (DESIGN §10) over TLS in team mode: a certificate from a
//! test CA (given to Terraform as `SSL_CERT_FILE`), the team token [`TOKEN`] in a `credentials`
//! block of `TF_CLI_CONFIG_FILE`, and requests of the tests' own through `curl` with the CA.

use std::path::PathBuf;
use std::process::Command;

use crate::certs::signed_by_a_ca;
use crate::{Gitstate, TempDir, Terraform};

/// The team token every test host accepts (read-write on every state).
pub const TOKEN: &str = "team-token-ws";
/// The run key the host seals API locks with.
pub const RUN_KEY: &str = "workspaces-test-run-key-0123456789abcdef";

/// A gitstate serving the workspace API over TLS in team mode, with the embedded repository.
pub struct WorkspaceHost {
    pub server: Gitstate,
    pub cwd: TempDir,
    pub certs: TempDir,
    /// The test CA's certificate (what `SSL_CERT_FILE` names for Terraform).
    pub ca: PathBuf,
}

/// `sha256:HEX` of `token`, as `--token-hash` takes it.
pub fn hash(token: &str) -> String {
    format!("sha256:{}", crate::crypto::sha256_hex(token))
}

impl WorkspaceHost {
    /// Team mode with [`TOKEN`] (read-write on every state) and the further `tokens` entries.
    pub fn start(tokens: &[String]) -> WorkspaceHost {
        WorkspaceHost::serving(tokens, &[], &[])
    }

    /// [`WorkspaceHost::start`] with further `args` and `env` (a remote repository).
    pub fn serving(tokens: &[String], more_args: &[&str], env: &[(&str, &str)]) -> WorkspaceHost {
        WorkspaceHost::configured(tokens, more_args, env, None)
    }

    /// [`WorkspaceHost::serving`] with `config` as the server's `gitstate.hcl`.
    pub fn configured(
        tokens: &[String],
        more_args: &[&str],
        env: &[(&str, &str)],
        config: Option<&str>,
    ) -> WorkspaceHost {
        let certs = tempfile::tempdir().unwrap();
        let (ca, cert, key) = signed_by_a_ca(
            certs.path(),
            "localhost",
            "server",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        );
        let cwd = tempfile::tempdir().unwrap();
        if let Some(config) = config {
            std::fs::write(cwd.path().join("gitstate.hcl"), config).unwrap();
        }
        let mut hashes = vec![hash(TOKEN)];
        hashes.extend(tokens.iter().cloned());
        let mut args = vec![
            "--tls-cert".to_owned(),
            cert.to_str().unwrap().to_owned(),
            "--tls-key".to_owned(),
            key.to_str().unwrap().to_owned(),
            "--auth-mode".to_owned(),
            "team".to_owned(),
        ];
        for h in &hashes {
            args.push("--token-hash".to_owned());
            args.push(h.clone());
        }
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend_from_slice(more_args);
        let mut env = env.to_vec();
        env.push(("GITSTATE_RUN_KEY", RUN_KEY));
        let server = Gitstate::start_tls(&args, &env, cwd.path());
        WorkspaceHost {
            server,
            cwd,
            certs,
            ca,
        }
    }

    /// `localhost:PORT`: the `cloud` block's hostname.
    pub fn hostname(&self) -> String {
        format!("localhost:{}", self.server.port())
    }

    /// The embedded repository.
    pub fn bare(&self) -> PathBuf {
        self.cwd.path().join(".gitstate/default.git")
    }

    /// `terraform` of `version` ("1.15.5", or "path" for the one on PATH) with this host's
    /// CA and `token` as the host's credential.
    pub fn terraform(&self, tf: &Terraform, token: &str) -> Terraform {
        let mut tf = tf.clone();
        let config = self
            .certs
            .path()
            .join(format!("terraformrc-{}", tf.version));
        let mirror = std::fs::read_to_string(&tf.cli_config).unwrap();
        std::fs::write(
            &config,
            format!(
                "{mirror}\ncredentials {:?} {{\n  token = {token:?}\n}}\n",
                self.hostname()
            ),
        )
        .unwrap();
        tf.cli_config = config;
        tf.env
            .push(("SSL_CERT_FILE".into(), self.ca.to_str().unwrap().into()));
        tf
    }

    /// `curl -X METHOD https://localhost:PORT{path}` with `authorization` and `body` (as
    /// `application/vnd.api+json`): (status, body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut headers = Vec::new();
        if let Some(value) = authorization {
            headers.push(("Authorization", value));
        }
        if body.is_some() {
            headers.push(("Content-Type", "application/vnd.api+json"));
        }
        let answer = self.exchange(method, path, &headers, body);
        (answer.status, answer.body)
    }

    /// `METHOD https://localhost:PORT{path}` with exactly `headers` (curl's own `Accept` and
    /// `User-Agent` are replaced when `headers` names them) and `body`: the whole answer.
    pub fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Answer {
        let head = self.certs.path().join("answer-headers");
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--cacert"])
            .arg(&self.ca)
            .arg("-D")
            .arg(&head)
            .args(["-X", method, "-w", "\n%{http_code}"])
            .arg(format!("https://{}{path}", self.hostname()));
        for (name, value) in headers {
            cmd.args(["-H", &format!("{name}: {value}")]);
        }
        if let Some(body) = body {
            cmd.args(["--data-binary", body]);
        }
        let out = cmd.output().expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
        let head = std::fs::read_to_string(&head).unwrap_or_default();
        Answer {
            status: status
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("curl: {text}")),
            headers: head
                .lines()
                .filter_map(|line| line.split_once(':'))
                .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
                .collect(),
            body: body.to_owned(),
        }
    }

    /// [`WorkspaceHost::request`] with `token` as a Bearer token.
    pub fn with_token(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        self.request(method, path, Some(&format!("Bearer {token}")), body)
    }

    /// The id of the workspace `name` (read through the API with [`TOKEN`]).
    pub fn workspace_id(&self, name: &str) -> String {
        let (status, body) = self.with_token(
            TOKEN,
            "GET",
            &format!("/api/v2/organizations/default/workspaces/{name}"),
            None,
        );
        assert_eq!(status, 200, "{body}");
        json(&body)["data"]["id"].as_str().unwrap().to_owned()
    }
}

/// `text` as JSON (a panic naming it when it is not).
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// An answer of [`WorkspaceHost::exchange`].
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// Its headers, names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The value of the header `name` (lower case), when there is one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        json(&self.body)
    }
}
