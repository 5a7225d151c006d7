//! Configuration: `gitstate.hcl` (DESIGN §6) merged under flags and `GITSTATE_*` variables by the
//! entrypoints. This module reads the file and the git credential variables; the entrypoints apply
//! their flags on top.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gitstate_url::{redact_in_text, Credentials};
use serde::Deserialize;

use crate::blocks::one_or_more;

/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:6061";
/// Default state branch.
pub const DEFAULT_REF: &str = "main";
/// Name of the embedded default repository.
pub const DEFAULT_REPOSITORY: &str = "default";

/// A configured repository.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepositoryConfig {
    /// Git URL (`https://`, `http://`, `git://`, `ssh://`, `file://`) or a local bare repository path.
    pub url: String,
    /// The state branch.
    #[serde(default = "default_ref", rename = "ref")]
    pub git_ref: String,
    /// `false` turns the state guard off for this repository (the deployment's `state_guard =
    /// false` turns it off everywhere).
    #[serde(default)]
    pub state_guard: Option<bool>,
    /// This repository's `lock_ttl` ([`Config::lock_ttl`]), over the deployment's.
    #[serde(default, deserialize_with = "deserialize_lock_ttl")]
    pub lock_ttl: Option<Duration>,
    /// Where this repository keeps each workspace's state (DESIGN §10): a state path pattern
    /// holding `{name}` once, checked when the configuration is read; `None`:
    /// `workspaces/{name}.tfstate`.
    #[serde(default, deserialize_with = "deserialize_workspace_path")]
    pub workspace_path: Option<gitstate_core::workspace::WorkspacePath>,
    /// This repository's committer name ([`Config::committer_name`]), over the deployment's.
    #[serde(default)]
    pub committer_name: Option<String>,
    /// This repository's committer e-mail ([`Config::committer_email`]), over the deployment's.
    #[serde(default)]
    pub committer_email: Option<String>,
    /// This repository's commit-signing key ([`Config::signing_key`]), over the deployment's.
    #[serde(default)]
    pub signing_key: Option<PathBuf>,
}

impl RepositoryConfig {
    /// Who writes this repository's commits: its own `committer_name`/`committer_email`, else
    /// the deployment's, else gitstate's own (each part on its own); without the signing key,
    /// which the stores load once (`identity.rs`).
    pub fn committer(&self, config: &Config) -> gitstate_git::Committer {
        let deployment = config.committer();
        gitstate_git::Committer {
            name: self.committer_name.clone().unwrap_or(deployment.name),
            email: self.committer_email.clone().unwrap_or(deployment.email),
            signer: None,
        }
    }
}

impl Config {
    /// Who writes the commits of a repository without its own committer (and of ad-hoc
    /// repositories): `committer_name`/`committer_email`, else gitstate's own.
    pub fn committer(&self) -> gitstate_git::Committer {
        let default = gitstate_git::Committer::default();
        gitstate_git::Committer {
            name: self.committer_name.clone().unwrap_or(default.name),
            email: self.committer_email.clone().unwrap_or(default.email),
            signer: None,
        }
    }

    /// Every configured committer name and e-mail can be written into a commit.
    pub fn check_committers(&self) -> Result<(), ConfigError> {
        let repositories = self.repositories.values();
        let names = [&self.committer_name]
            .into_iter()
            .chain(repositories.clone().map(|r| &r.committer_name));
        let emails = [&self.committer_email]
            .into_iter()
            .chain(repositories.map(|r| &r.committer_email));
        for name in names.flatten() {
            check_committer_part("committer_name", name)?;
        }
        for email in emails.flatten() {
            check_committer_part("committer_email", email)?;
        }
        Ok(())
    }
}

/// A committer name or e-mail as git can write it: not empty, no `<`, `>` or control character.
pub fn check_committer_part(what: &str, value: &str) -> Result<(), ConfigError> {
    if value.trim().is_empty()
        || value
            .chars()
            .any(|c| c == '<' || c == '>' || c.is_control())
    {
        return Err(ConfigError::BadValue(format!(
            "{what} {value:?} cannot be written into a commit: it must not be empty nor hold '<', '>' or a control character"
        )));
    }
    Ok(())
}

/// A `lock_ttl` as written: a duration such as `30m`, `2h` or `1h 30m` (humantime's spelling),
/// at least one second.
pub fn parse_lock_ttl(text: &str) -> Result<Duration, ConfigError> {
    parse_lock_age("lock_ttl", text)
}

/// A lock age named `what` (`lock_ttl`, `--stale`), as [`parse_lock_ttl`] reads it.
pub fn parse_lock_age(what: &str, text: &str) -> Result<Duration, ConfigError> {
    let age = humantime::parse_duration(text.trim()).map_err(|e| {
        ConfigError::BadValue(format!(
            "{what} {text:?} is not a duration such as \"30m\" or \"2h\": {e}"
        ))
    })?;
    if age < Duration::from_secs(1) {
        return Err(ConfigError::BadValue(format!(
            "{what} {text:?} is under one second"
        )));
    }
    Ok(age)
}

/// A `lock_ttl` as [`parse_lock_ttl`] reads it back (`30m`, `1h 30m`).
pub fn format_lock_ttl(ttl: Duration) -> String {
    humantime::format_duration(ttl).to_string()
}

fn deserialize_workspace_path<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<gitstate_core::workspace::WorkspacePath>, D::Error> {
    let text = String::deserialize(d)?;
    gitstate_core::workspace::WorkspacePath::parse(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn deserialize_lock_ttl<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    parse_lock_ttl(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn default_ref() -> String {
    DEFAULT_REF.to_owned()
}

/// Whose git credential a request uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// The deployment's own credential (`GIT_USERNAME`/`GIT_PASSWORD`, `GITHUB_TOKEN`).
    #[default]
    Server,
    /// The caller's basic-auth pair (Terraform's `username`/`password`) is the git credential for
    /// that request only; the deployment holds none. The remote's answer to that credential is
    /// the authorization check of every request.
    Passthrough,
    /// The deployment's own credential for git, and callers must present one of the configured
    /// tokens (as the basic-auth password; the user name is free and names the writer).
    Team,
}

impl std::str::FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "server" => Ok(AuthMode::Server),
            "passthrough" => Ok(AuthMode::Passthrough),
            "team" => Ok(AuthMode::Team),
            other => Err(format!(
                "auth mode '{other}' is unknown; use \"server\", \"passthrough\" or \"team\""
            )),
        }
    }
}

/// The `auth { … }` block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Whose git credential a request uses.
    #[serde(default)]
    pub mode: AuthMode,
    /// Team mode: SHA-256 hashes (`sha256:<hex>`) of the tokens callers may present.
    #[serde(default)]
    pub token_hashes: Vec<String>,
    /// Team mode: named users as `NAME:HASH` (bcrypt from `htpasswd -nB NAME`, or `sha256:<hex>`);
    /// the caller's basic-auth user name and password must match one.
    #[serde(default)]
    pub users: Vec<String>,
    /// Team mode: scoped tokens (`token { hash = "sha256:…" access = "read-only" paths = […] }`,
    /// one block each), besides the `token_hashes` (which may carry the same scope as
    /// `sha256:<hex>;access=…;paths=…`).
    #[serde(default, rename = "token", deserialize_with = "one_or_more")]
    pub tokens: Vec<TokenConfig>,
    /// Team mode with client certificates (`tls.client_ca_file`): certificate subjects that are
    /// callers without a token (`certificate { subject = "CN=team-a" name = "team-a" … }`).
    #[serde(default, rename = "certificate", deserialize_with = "one_or_more")]
    pub certificates: Vec<CertificateConfig>,
    /// Team mode with workload identity: callers presenting an OIDC token of one of these
    /// issuers (`oidc { issuer = "…" audience = "…" rule { … } }`, one block per issuer).
    #[serde(default, rename = "oidc", deserialize_with = "one_or_more")]
    pub oidc: Vec<crate::oidc::OidcConfig>,
    /// A file holding the run key (`--run-key-file`, `GITSTATE_RUN_KEY_FILE`): the secret that
    /// seals the locks OIDC tokens take, the same in every process (DESIGN §6; read at start).
    #[serde(default)]
    pub run_key_file: Option<PathBuf>,
    /// The run key itself, from the environment only (`GITSTATE_RUN_KEY`); never a file key.
    #[serde(skip)]
    pub run_key: Option<crate::run_key::RunKey>,
}

/// One `auth { certificate { … } }` block: a client certificate's subject as a team caller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertificateConfig {
    /// Attributes the certificate's subject must hold, as `TYPE=value` pairs separated by commas
    /// (`CN=team-a,O=acme`; RFC 4514 escaping, e.g. `\,` in a value).
    pub subject: String,
    /// The caller's name: the writer in commit messages and the commits' author.
    pub name: String,
    /// `read-write` (the default), `read-only` or `outputs-only`, as for a token.
    #[serde(default)]
    pub access: Option<String>,
    /// State path patterns it may use, as for a token; empty: every path.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// One `auth { token { … } }` block: a team token and what it may do (DESIGN §6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// `sha256:<hex>` of the token.
    pub hash: String,
    /// `read-write` (the default), `read-only` or `outputs-only`.
    #[serde(default)]
    pub access: Option<String>,
    /// State path patterns it may use (as in `allow`: `*` within a segment, a last `**` for
    /// the rest); empty: every path.
    #[serde(default)]
    pub paths: Vec<String>,
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the server listens on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Where the embedded default repository lives (`{data_dir}/default.git`).
    #[serde(default = "default_data_dir")]
    pub data_dir: PathBuf,
    /// Where fetched objects of remote repositories are cached.
    #[serde(default = "default_cache_dir")]
    pub cache_dir: PathBuf,
    /// Named repositories. Empty: the embedded default.
    #[serde(default, rename = "repository")]
    pub repositories: BTreeMap<String, RepositoryConfig>,
    /// URL patterns allowed for query-style ad-hoc addresses (see `gitstate_url::policy`). Those
    /// repositories are contacted with the caller's credential (pass-through) or with none.
    #[serde(default)]
    pub allow: Vec<String>,
    /// URL patterns of ad-hoc repositories that may also be contacted with the deployment's own
    /// git credential (and are allowed): the only way an ad-hoc URL gets it.
    #[serde(default)]
    pub allow_with_credential: Vec<String>,
    /// Largest state accepted, in bytes.
    #[serde(default = "default_max_state_bytes")]
    pub max_state_bytes: usize,
    /// Largest answer a git server may give to one request (a pack, an advertisement at most
    /// 64 MiB), in bytes; a larger one is refused with a 502 and fills no disk.
    #[serde(default = "default_max_answer_bytes")]
    pub max_answer_bytes: u64,
    /// Timeout of one git network operation, in seconds.
    #[serde(default = "default_git_timeout")]
    pub git_timeout_seconds: u64,
    /// How long a write may wait for its turn and retry, in seconds, before it is answered 503
    /// with nothing written (DESIGN §9.3); on Lambda the invocation's deadline also bounds it.
    #[serde(default = "default_write_budget")]
    pub write_budget_seconds: u64,
    /// Authentication.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Encryption at rest (DESIGN §5); off when no key is configured.
    #[serde(default)]
    pub encryption: EncryptionConfig,
    /// HTTPS for the standalone server; plain HTTP when absent.
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// The DynamoDB catalog; off when absent.
    #[serde(default)]
    pub catalog: Option<CatalogConfig>,
    /// Host names (besides `localhost` and loopback addresses) a browser may use to reach a
    /// server listening on loopback, e.g. a name in `/etc/hosts`. Any other `Host` is refused
    /// (DNS rebinding). When set, it applies to every listener.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Let `gitstate serve` listen on a non-loopback address with auth mode "server" (callers
    /// unauthenticated, the server's own git credential). Off: such a start is refused.
    #[serde(default)]
    pub insecure_no_auth_on_public_address: bool,
    /// The state guard (DESIGN §2): a POST that would replace a state with another lineage or
    /// an older serial is refused with 409, unless its address says `?force=true`. On by
    /// default; a repository block can turn it off for itself.
    #[serde(default = "default_true")]
    pub state_guard: bool,
    /// Stale locks (DESIGN §2): a LOCK takes over another holder's lock once it is older than
    /// this by its `Created`, and says so; `None` (the default): locks never expire. A repository
    /// block's `lock_ttl` overrides it.
    #[serde(default, deserialize_with = "deserialize_lock_ttl")]
    pub lock_ttl: Option<Duration>,
    /// The name commits are written under, as author and committer (a named bot a protected
    /// branch admits); `None`: `gitstate`. A repository block's `committer_name` overrides it.
    #[serde(default)]
    pub committer_name: Option<String>,
    /// The e-mail commits are written under; `None`: `gitstate@localhost`.
    #[serde(default)]
    pub committer_email: Option<String>,
    /// A key file that signs every commit: an OpenSSH ed25519 private key or an
    /// armored OpenPGP secret key (through gpg), without a passphrase; `None`: unsigned. A
    /// repository block's `signing_key` overrides it.
    #[serde(default)]
    pub signing_key: Option<PathBuf>,
    /// The branch of a query-style address without `ref=`: `main`, or `master` under
    /// terraform-backend-git's standalone command line (its default); not a file key.
    #[serde(skip, default = "default_ref")]
    pub query_default_ref: String,
}

fn default_true() -> bool {
    true
}

/// The `catalog { dynamodb_table, audit_ttl_days, kms_arn }` block.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    /// The DynamoDB table (keys `pk`, `sk`; see `gitstate catalog create-table`).
    pub dynamodb_table: String,
    /// How long audit events are kept.
    #[serde(default = "default_audit_ttl_days")]
    pub audit_ttl_days: u64,
    /// The KMS key that makes the resource index key when the table has none (default: the
    /// first of `encryption.kms_arns`). Without any, the resource index stays empty.
    #[serde(default)]
    pub kms_arn: Option<String>,
}

fn default_audit_ttl_days() -> u64 {
    90
}

/// The `tls { cert_file, key_file, client_ca_file }` block: PEM files of the server certificate
/// (chain) and key, and optionally the CA certificates that client certificates must chain to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Certificate chain (PEM), leaf first.
    pub cert_file: PathBuf,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// mTLS: every client must present a certificate that chains to one of these CA
    /// certificates (PEM), or its TLS handshake fails. `None`: no client certificate is asked.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
}

/// The `encryption { … }` block.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptionConfig {
    /// `"all"` (default) or `"structure"`.
    #[serde(default = "default_encryption_mode")]
    pub mode: String,
    /// KMS key ARNs new versions are wrapped for.
    #[serde(default)]
    pub kms_arns: Vec<String>,
    /// Encryption context used with `kms_arns`.
    #[serde(default)]
    pub kms_context: BTreeMap<String, String>,
    /// KMS key ARNs that may still read older versions (rotation).
    #[serde(default)]
    pub fallback_kms_arns: Vec<String>,
    /// age recipients new versions are wrapped for.
    #[serde(default)]
    pub age_recipients: Vec<String>,
    /// PGP fingerprints new versions are wrapped for, through the `gpg` binary (the secret key
    /// in gpg's keyring reads: `GNUPGHOME`, else `~/.gnupg`).
    #[serde(default)]
    pub pgp_fingerprints: Vec<String>,
    /// Vault / OpenBao transit keys new versions are wrapped for, in sops' URI form
    /// (`https://vault:8200/v1/transit/keys/NAME`); the token comes from `VAULT_TOKEN` or
    /// `~/.vault-token`.
    #[serde(default)]
    pub vault_uris: Vec<String>,
    /// GCP KMS keys (`projects/P/locations/L/keyRings/R/cryptoKeys/K`) new versions are wrapped
    /// for; credentials from `GOOGLE_APPLICATION_CREDENTIALS`, `GOOGLE_CREDENTIALS`,
    /// `GOOGLE_OAUTH_ACCESS_TOKEN` or the metadata server.
    #[serde(default)]
    pub gcp_kms_keys: Vec<String>,
    /// A file of age identities for reading (besides `SOPS_AGE_KEY_FILE` / `SOPS_AGE_KEY`).
    #[serde(default)]
    pub age_key_file: Option<PathBuf>,
    /// Refuse to start without a key, so plaintext is never stored.
    #[serde(default)]
    pub enforced: bool,
    /// How long unwrapped data keys stay in memory (0 disables the memory).
    #[serde(default = "default_data_key_cache_seconds")]
    pub data_key_cache_seconds: u64,
    /// terraform-backend-git's encryption provider (`TF_BACKEND_HTTP_ENCRYPTION_PROVIDER`):
    /// `"sops"` needs a key above; `"aes"` needs a legacy aes passphrase. Unset: whatever is
    /// configured applies.
    #[serde(default)]
    pub provider: Option<String>,
    /// A file holding the passphrase terraform-backend-git's `aes` provider encrypted states
    /// with: such states are read (and written back sealed with the keys above, or as
    /// plaintext without keys), never written in that format.
    #[serde(default)]
    pub legacy_aes_passphrase_file: Option<PathBuf>,
    /// The passphrase itself, from the environment only (`GITSTATE_LEGACY_AES_PASSPHRASE`,
    /// `TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE`): a credential, never in the file, never printed.
    #[serde(skip)]
    pub legacy_aes_passphrase: Option<gitstate_seal::Passphrase>,
}

fn default_encryption_mode() -> String {
    "all".to_owned()
}
fn default_data_key_cache_seconds() -> u64 {
    300
}

impl Default for EncryptionConfig {
    fn default() -> Self {
        EncryptionConfig {
            mode: default_encryption_mode(),
            kms_arns: Vec::new(),
            kms_context: BTreeMap::new(),
            fallback_kms_arns: Vec::new(),
            age_recipients: Vec::new(),
            pgp_fingerprints: Vec::new(),
            vault_uris: Vec::new(),
            gcp_kms_keys: Vec::new(),
            age_key_file: None,
            enforced: false,
            data_key_cache_seconds: default_data_key_cache_seconds(),
            provider: None,
            legacy_aes_passphrase_file: None,
            legacy_aes_passphrase: None,
        }
    }
}

fn default_listen() -> String {
    DEFAULT_LISTEN.to_owned()
}
fn default_data_dir() -> PathBuf {
    PathBuf::from(".gitstate")
}
fn default_cache_dir() -> PathBuf {
    std::env::temp_dir().join("gitstate-cache")
}
fn default_max_state_bytes() -> usize {
    gitstate_core::backend::DEFAULT_MAX_STATE_BYTES
}
fn default_max_answer_bytes() -> u64 {
    gitstate_git::DEFAULT_MAX_ANSWER_BYTES
}
fn default_git_timeout() -> u64 {
    30
}
fn default_write_budget() -> u64 {
    gitstate_core::RetryPolicy::default().budget.as_secs()
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: default_listen(),
            data_dir: default_data_dir(),
            cache_dir: default_cache_dir(),
            repositories: BTreeMap::new(),
            allow: Vec::new(),
            allow_with_credential: Vec::new(),
            max_state_bytes: default_max_state_bytes(),
            max_answer_bytes: default_max_answer_bytes(),
            git_timeout_seconds: default_git_timeout(),
            write_budget_seconds: default_write_budget(),
            auth: AuthConfig::default(),
            encryption: EncryptionConfig::default(),
            tls: None,
            catalog: None,
            allowed_hosts: Vec::new(),
            insecure_no_auth_on_public_address: false,
            state_guard: true,
            lock_ttl: None,
            committer_name: None,
            committer_email: None,
            signing_key: None,
            query_default_ref: default_ref(),
        }
    }
}

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the configuration file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid HCL for this schema.
    #[error("the configuration file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A flag or variable has a bad value.
    #[error("{0}")]
    BadValue(String),
}

/// Reads `KEY=VALUE` pairs (an encryption context) into a map; `what` names where they came
/// from in the error.
pub fn key_value_pairs<'a>(
    pairs: impl IntoIterator<Item = &'a str>,
    what: &str,
) -> Result<std::collections::BTreeMap<String, String>, ConfigError> {
    let mut map = std::collections::BTreeMap::new();
    for pair in pairs.into_iter().filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| {
            ConfigError::BadValue(format!("{what} expects KEY=VALUE pairs, got '{pair}'"))
        })?;
        map.insert(key.to_owned(), value.to_owned());
    }
    Ok(map)
}

impl Config {
    /// Reads `gitstate.hcl`.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_hcl(&text).map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses HCL text. Errors name the key (`repository.default.url`) and, when it can be
    /// found, the line: `line 4: repository.default.colour: unknown field …`.
    pub fn from_hcl(text: &str) -> Result<Self, String> {
        let deserializer = hcl::de::Deserializer::from_str(text)
            .map_err(|e| one_line_parse_error(&e.to_string()))?;
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            let message = e.inner().to_string();
            // An unknown field is reported on its parent; the message names the field itself.
            let unknown = message
                .strip_prefix("unknown field `")
                .and_then(|rest| rest.split('`').next())
                .map(str::to_owned);
            let key = match (&unknown, path.as_str()) {
                (Some(field), ".") => field.clone(),
                (Some(field), path) if !path.ends_with(field.as_str()) => {
                    format!("{path}.{field}")
                }
                (_, path) => path.to_owned(),
            };
            let searched = unknown.or_else(|| key.rsplit('.').next().map(str::to_owned));
            match searched.and_then(|word| line_of(text, &word)) {
                Some(line) => format!("line {line}: {key}: {message}"),
                None => format!("{key}: {message}"),
            }
        })
    }

    /// Adds `NAME=URL` (from `--repository`), with `ref` as its branch.
    pub fn add_repository_flag(&mut self, spec: &str, git_ref: &str) -> Result<(), ConfigError> {
        let (name, url) = spec.split_once('=').ok_or_else(|| {
            ConfigError::BadValue(format!(
                "--repository expects NAME=URL, got '{}'",
                redact_in_text(spec)
            ))
        })?;
        if name.is_empty() || url.is_empty() {
            return Err(ConfigError::BadValue(
                "--repository expects NAME=URL with both parts non-empty".into(),
            ));
        }
        self.repositories.insert(
            name.to_owned(),
            RepositoryConfig {
                url: url.to_owned(),
                git_ref: git_ref.to_owned(),
                state_guard: None,
                lock_ttl: None,
                workspace_path: None,
                committer_name: None,
                committer_email: None,
                signing_key: None,
            },
        );
        Ok(())
    }

    /// The git network timeout.
    pub fn git_timeout(&self) -> Duration {
        Duration::from_secs(self.git_timeout_seconds)
    }
}

/// hcl-rs reports syntax errors over several lines with an excerpt of the file; keep the position
/// and the reason on one line, and drop the excerpt (the line may hold a credential).
pub(crate) fn one_line_parse_error(message: &str) -> String {
    let parts: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('|'))
        .map(|l| l.trim_start_matches("-->").trim_start_matches('=').trim())
        .collect();
    parts.join(": ")
}

/// The 1-based line where `word` first appears as an HCL attribute or block name (followed by
/// `=`, `{`, a label or the end of the line).
fn line_of(text: &str, word: &str) -> Option<usize> {
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    text.lines()
        .position(|line| {
            line.match_indices(word).any(|(at, _)| {
                let before = line[..at].chars().next_back();
                let after = line[at + word.len()..].trim_start().chars().next();
                !before.is_some_and(is_name_char) && matches!(after, None | Some('=' | '{' | '"'))
            })
        })
        .map(|i| i + 1)
}

/// Git credentials from the environment: `GIT_USERNAME` + `GIT_PASSWORD`, or `GITHUB_TOKEN`
/// (with `GIT_USERNAME` when set, as terraform-backend-git sent it; each also as `*_FILE`
/// holding the value).
pub fn git_credentials_from_env() -> Result<Option<Credentials>, ConfigError> {
    fn var(name: &str) -> Result<Option<String>, ConfigError> {
        if let Ok(v) = std::env::var(name) {
            return Ok(Some(v));
        }
        if let Ok(file) = std::env::var(format!("{name}_FILE")) {
            let v = std::fs::read_to_string(&file).map_err(|e| {
                ConfigError::BadValue(format!("cannot read {name}_FILE ({file}): {e}"))
            })?;
            return Ok(Some(v.trim_end_matches(['\r', '\n']).to_owned()));
        }
        Ok(None)
    }
    if let Some(password) = var("GIT_PASSWORD")?.filter(|p| !p.is_empty()) {
        let username = var("GIT_USERNAME")?
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "git".to_owned());
        return Ok(Some(Credentials { username, password }));
    }
    if let Some(token) = var("GITHUB_TOKEN")?.filter(|t| !t.is_empty()) {
        // terraform-backend-git sent the token with GIT_USERNAME; GitHub accepts any name.
        let username = var("GIT_USERNAME")?
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "x-access-token".to_owned());
        return Ok(Some(Credentials {
            username,
            password: token,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_path_is_checked_when_the_configuration_is_read() {
        let config = Config::from_hcl(
            r#"
repository "prod" {
  url = "https://github.com/acme/prod-state.git"
  workspace_path = "envs/{name}/terraform.tfstate"
}
repository "ci" { url = "https://github.com/acme/ci-state.git" }
"#,
        )
        .unwrap();
        let pattern = config.repositories["prod"].workspace_path.as_ref().unwrap();
        assert_eq!(pattern.to_string(), "envs/{name}/terraform.tfstate");
        assert_eq!(config.repositories["ci"].workspace_path, None);
        let refused = Config::from_hcl(
            r#"repository "prod" {
  url = "https://github.com/acme/prod-state.git"
  workspace_path = "envs/.{name}"
}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            refused.contains("workspace_path") && refused.contains("starts with '.'"),
            "{refused}"
        );
    }

    #[test]
    fn lock_ttl_is_a_duration_for_the_deployment_and_per_repository() {
        let config = Config::from_hcl(
            r#"
lock_ttl = "2h"
repository "ci" {
  url = "https://github.com/acme/ci-state.git"
  lock_ttl = "30m"
}
repository "prod" { url = "https://github.com/acme/prod-state.git" }
"#,
        )
        .unwrap();
        assert_eq!(config.lock_ttl, Some(Duration::from_secs(7200)));
        assert_eq!(
            config.repositories["ci"].lock_ttl,
            Some(Duration::from_secs(1800))
        );
        assert_eq!(config.repositories["prod"].lock_ttl, None);
        assert_eq!(Config::default().lock_ttl, None, "off by default");
        assert_eq!(format_lock_ttl(Duration::from_secs(5400)), "1h 30m");
        assert_eq!(parse_lock_ttl("1h 30m").unwrap(), Duration::from_secs(5400));
        for bad in ["soon", "-5m", "0s", "500ms", ""] {
            assert!(parse_lock_ttl(bad).is_err(), "{bad:?}");
        }
        assert!(Config::from_hcl("lock_ttl = \"often\"").is_err());
    }

    #[test]
    fn parses_the_contract_example() {
        let config = Config::from_hcl(
            r#"
listen = "127.0.0.1:7000"
repository "default" {
  url = "https://github.com/acme/tf-state.git"
  ref = "main"
}
repository "other" {
  url = "git://127.0.0.1/other.git"
}
allow = ["https://github.com/acme/*"]
auth { mode = "passthrough" }
"#,
        )
        .unwrap();
        assert_eq!(config.listen, "127.0.0.1:7000");
        assert_eq!(config.repositories.len(), 2);
        assert_eq!(config.repositories["other"].git_ref, "main");
        assert_eq!(config.allow, vec!["https://github.com/acme/*".to_owned()]);
        assert_eq!(config.auth.mode, AuthMode::Passthrough);
        assert!(Config::from_hcl("auth { mode = \"open\" }").is_err());
        let scoped = Config::from_hcl(
            "auth {\n  mode = \"team\"\n  token {\n    hash = \"sha256:ab\"\n    access = \"outputs-only\"\n    paths = [\"teams/a/**\"]\n  }\n  token {\n    hash = \"sha256:cd\"\n  }\n}",
        )
        .expect("token blocks");
        assert_eq!(scoped.auth.tokens.len(), 2);
        assert_eq!(
            scoped.auth.tokens[0].access.as_deref(),
            Some("outputs-only")
        );
        assert_eq!(scoped.auth.tokens[0].paths, ["teams/a/**"]);
        assert_eq!(scoped.auth.tokens[1].hash, "sha256:cd");
        let one = Config::from_hcl("auth {\n  token {\n    hash = \"sha256:ab\"\n  }\n}")
            .expect("one token block");
        assert_eq!(one.auth.tokens.len(), 1);
        let unknown =
            Config::from_hcl("auth {\n  token {\n    hash = \"x\"\n    rights = \"all\"\n  }\n}")
                .unwrap_err();
        assert!(unknown.contains("rights"), "{unknown}");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = Config::from_hcl("listne = \"x\"").unwrap_err();
        assert!(err.contains("listne"), "{err}");
    }
}
