//! The settings every entrypoint shares, with one precedence: flags > `GITSTATE_*` environment >
//! configuration file (`--config` / `GITSTATE_CONFIG`) > defaults. The CLI parses them from its
//! arguments; the Lambda handler from the environment alone.

use std::path::PathBuf;

use clap::Args;

use crate::compat::{Given, TbgConfig, TbgInput};
use crate::config::{Config, ConfigError, TlsConfig, DEFAULT_REF};

/// Flags (each also a `GITSTATE_*` variable) that override the configuration file.
#[derive(Args, Debug, Clone, Default)]
pub struct Settings {
    /// Address to listen on [default: 127.0.0.1:6061].
    #[arg(long, env = "GITSTATE_LISTEN")]
    pub listen: Option<String>,
    /// Configuration file (HCL).
    #[arg(long, env = "GITSTATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory of the embedded default repository [default: ./.gitstate].
    #[arg(long, env = "GITSTATE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Cache of fetched objects for remote repositories [default: $TMPDIR/gitstate-cache].
    #[arg(long, env = "GITSTATE_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// A repository as NAME=URL (repeatable, or comma-separated in the variable); replaces the
    /// configuration file's repositories.
    #[arg(
        long = "repository",
        value_name = "NAME=URL",
        env = "GITSTATE_REPOSITORY",
        value_delimiter = ','
    )]
    pub repositories: Vec<String>,
    /// Branch holding the states, for --repository [default: main].
    #[arg(long = "ref", value_name = "REF", env = "GITSTATE_REF")]
    pub git_ref: Option<String>,
    /// URL patterns (`scheme://host[:port]/path`, `*` within one path segment, a last `**` for
    /// any depth, `*.` before a host name) allowed for query-style ad-hoc addresses, contacted
    /// with the caller's credential (pass-through) or none (repeatable, or comma-separated in the
    /// variable); replaces the configuration file's `allow`.
    #[arg(
        long = "allow",
        value_name = "PATTERN",
        env = "GITSTATE_ALLOW",
        value_delimiter = ','
    )]
    pub allow: Vec<String>,
    /// URL patterns of ad-hoc repositories that may be contacted with this server's own git
    /// credential (repeatable, or comma-separated in the variable); replaces the file's
    /// `allow_with_credential`.
    #[arg(
        long = "allow-with-credential",
        value_name = "PATTERN",
        env = "GITSTATE_ALLOW_WITH_CREDENTIAL",
        value_delimiter = ','
    )]
    pub allow_with_credential: Vec<String>,
    /// Whose git credential a request uses: "server" (GIT_USERNAME/GIT_PASSWORD, GITHUB_TOKEN),
    /// "passthrough" (the caller's basic-auth pair, for that request only) or "team" (the
    /// server's credential; callers present a token) [default: server].
    #[arg(long, env = "GITSTATE_AUTH_MODE")]
    pub auth_mode: Option<String>,
    /// Team mode: SHA-256 hashes (`sha256:<hex>`, e.g. from `printf %s TOKEN | sha256sum`) of the
    /// tokens callers may present as their basic-auth password (repeatable, or comma-separated in
    /// the variable); replaces the file's `auth.token_hashes`.
    #[arg(
        long = "token-hash",
        value_name = "sha256:HEX",
        env = "GITSTATE_TOKEN_HASHES",
        value_delimiter = ','
    )]
    pub token_hashes: Vec<String>,
    /// Team mode: a user as NAME:HASH, the hash from `htpasswd -nB NAME` (bcrypt; it asks for the password) or
    /// `sha256:<hex>` (repeatable, or comma-separated in the variable); replaces the file's
    /// `auth.users`.
    #[arg(
        long = "user",
        value_name = "NAME:HASH",
        env = "GITSTATE_USERS",
        value_delimiter = ','
    )]
    pub users: Vec<String>,
    /// Largest accepted state, in bytes [default: 536870912].
    #[arg(long, env = "GITSTATE_MAX_STATE_BYTES")]
    pub max_state_bytes: Option<usize>,
    /// Largest answer accepted from a git server (a pack), in bytes [default: 2147483648].
    #[arg(long, env = "GITSTATE_MAX_ANSWER_BYTES")]
    pub max_answer_bytes: Option<u64>,
    /// How long a write may wait for its turn and retry before it is answered 503 with nothing
    /// written, in seconds [default: 30].
    #[arg(long, env = "GITSTATE_WRITE_BUDGET_SECONDS")]
    pub write_budget_seconds: Option<u64>,
    /// Encryption at rest: "all" values or only secrets, keeping the "structure" readable
    /// [default: all].
    #[arg(long, env = "GITSTATE_ENCRYPTION_MODE")]
    pub encryption_mode: Option<String>,
    /// AWS KMS key ARN new state versions are wrapped for (repeatable, or comma-separated in the
    /// variable, as sops reads it); replaces the file's `encryption.kms_arns`.
    #[arg(
        long = "kms-arn",
        value_name = "ARN",
        env = "SOPS_KMS_ARN",
        value_delimiter = ','
    )]
    pub kms_arns: Vec<String>,
    /// KMS encryption context as KEY=VALUE (repeatable, or comma-separated in the variable);
    /// replaces the file's `encryption.kms_context`.
    #[arg(
        long = "kms-context",
        value_name = "KEY=VALUE",
        env = "GITSTATE_KMS_CONTEXT",
        value_delimiter = ','
    )]
    pub kms_context: Vec<String>,
    /// KMS key ARN that may still read older versions (rotation; repeatable).
    #[arg(
        long = "fallback-kms-arn",
        value_name = "ARN",
        env = "GITSTATE_FALLBACK_KMS_ARNS",
        value_delimiter = ','
    )]
    pub fallback_kms_arns: Vec<String>,
    /// age recipient new state versions are wrapped for (repeatable, or comma-separated in the
    /// variable, as sops reads it). Identities for reading come from SOPS_AGE_KEY_FILE or
    /// SOPS_AGE_KEY.
    #[arg(
        long = "age-recipient",
        value_name = "AGE1…",
        env = "SOPS_AGE_RECIPIENTS",
        value_delimiter = ','
    )]
    pub age_recipients: Vec<String>,
    /// PGP key fingerprint new state versions are wrapped for through gpg (repeatable, or
    /// comma-separated in the variable, as sops reads it); replaces the file's
    /// `encryption.pgp_fingerprints`. The secret key in gpg's keyring (GNUPGHOME) reads.
    #[arg(
        long = "pgp-fingerprint",
        value_name = "FINGERPRINT",
        env = "SOPS_PGP_FP",
        value_delimiter = ','
    )]
    pub pgp_fingerprints: Vec<String>,
    /// Vault / OpenBao transit key new state versions are wrapped for, as sops takes it
    /// (https://vault:8200/v1/transit/keys/NAME; repeatable, or comma-separated in the variable);
    /// replaces the file's `encryption.vault_uris`. The token comes from VAULT_TOKEN or
    /// ~/.vault-token.
    #[arg(
        long = "vault-uri",
        value_name = "URI",
        env = "SOPS_VAULT_URIS",
        value_delimiter = ','
    )]
    pub vault_uris: Vec<String>,
    /// GCP KMS key (projects/P/locations/L/keyRings/R/cryptoKeys/K) new state versions are
    /// wrapped for (repeatable, or comma-separated in the variable, as sops reads it); replaces
    /// the file's `encryption.gcp_kms_keys`.
    #[arg(
        long = "gcp-kms-key",
        value_name = "RESOURCE_ID",
        env = "SOPS_GCP_KMS_IDS",
        value_delimiter = ','
    )]
    pub gcp_kms_keys: Vec<String>,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(
        long,
        value_name = "PEM",
        env = "GITSTATE_TLS_CERT",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        value_name = "PEM",
        env = "GITSTATE_TLS_KEY",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// DynamoDB table of the catalog (states, locks, audit trail); replaces the file's
    /// `catalog.dynamodb_table` [default: no catalog].
    #[arg(long, value_name = "TABLE", env = "GITSTATE_CATALOG_TABLE")]
    pub catalog_table: Option<String>,
    /// KMS key that makes the catalog's resource index key (identifiers are stored as keyed
    /// hashes under it); replaces the file's `catalog.kms_arn` [default: the first of
    /// encryption.kms_arns; without any, nothing is indexed].
    #[arg(long, value_name = "ARN", env = "GITSTATE_CATALOG_KMS_ARN")]
    pub catalog_kms_arn: Option<String>,
    /// terraform-backend-git's encryption provider: "sops" (needs a key: --kms-arn,
    /// --age-recipient) or "aes" (needs the legacy passphrase; its files are read, and written
    /// back with the sops keys, or as plaintext without keys). Also read from
    /// TF_BACKEND_HTTP_ENCRYPTION_PROVIDER.
    #[arg(long, value_name = "sops|aes", env = "GITSTATE_ENCRYPTION_PROVIDER")]
    pub encryption_provider: Option<String>,
    /// A file holding the passphrase terraform-backend-git's aes provider encrypted states with
    /// (read only, never written in that format). The passphrase itself can be given in
    /// GITSTATE_LEGACY_AES_PASSPHRASE or TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE, never as a flag.
    #[arg(long, value_name = "PATH", env = "GITSTATE_LEGACY_AES_PASSPHRASE_FILE")]
    pub legacy_aes_passphrase_file: Option<PathBuf>,
    /// Refuse to start without an encryption key, so plaintext is never stored.
    #[arg(long, env = "GITSTATE_ENCRYPTION_ENFORCED", num_args = 0..=1, default_missing_value = "true")]
    pub encryption_enforced: Option<bool>,
    /// A host name browsers may use for a server listening on loopback, besides localhost and
    /// loopback addresses (repeatable, or comma-separated in the variable); any other Host
    /// header is refused (DNS rebinding). Replaces the file's `allowed_hosts`.
    #[arg(
        long = "allowed-host",
        value_name = "NAME",
        env = "GITSTATE_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Serve on a non-loopback address with auth mode "server": anyone who reaches the address
    /// reads and writes every state with the server's git credential. Refused without this.
    #[arg(
        long,
        env = "GITSTATE_INSECURE_NO_AUTH_ON_PUBLIC_ADDRESS",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub insecure_no_auth_on_public_address: Option<bool>,
    /// The state guard: refuse (409) a POST that would replace a state with another lineage or
    /// an older serial, unless its address says `?force=true`. On by default.
    #[arg(long, env = "GITSTATE_STATE_GUARD", num_args = 0..=1, default_missing_value = "true")]
    pub state_guard: Option<bool>,
    /// terraform-backend-git's flags and file, when gitstate runs under its command line (see
    /// [`crate::compat`]); its variables are read in every mode.
    #[arg(skip)]
    pub tbg: TbgInput,
}

impl Settings {
    /// The effective configuration: these settings over the file over the defaults, with
    /// terraform-backend-git's spellings mapped in (see [`crate::compat`]).
    pub fn resolve(&self) -> Result<Config, ConfigError> {
        self.resolve_all().map(|(config, _)| config)
    }

    /// [`Settings::resolve`], and what came from terraform-backend-git's spellings.
    pub fn resolve_all(&self) -> Result<(Config, TbgConfig), ConfigError> {
        let mut config = self.resolve_own()?;
        let given = Given {
            config_file: self.config.is_some(),
            listen: self.listen.is_some(),
            repositories: given(&self.repositories).is_some(),
            git_ref: self.git_ref.as_deref().filter(|r| !r.is_empty()),
            auth_mode: self.auth_mode.as_deref().filter(|m| !m.is_empty()),
            tls: self.tls_cert.is_some(),
            kms_arns: given(&self.kms_arns).is_some(),
            kms_context: given(&self.kms_context).is_some(),
            age_recipients: given(&self.age_recipients).is_some(),
            pgp_fingerprints: given(&self.pgp_fingerprints).is_some(),
            vault_uris: given(&self.vault_uris).is_some(),
            gcp_kms_keys: given(&self.gcp_kms_keys).is_some(),
        };
        let tbg = crate::compat::apply(&self.tbg, &given, &mut config)?;
        Ok((config, tbg))
    }

    /// gitstate's own settings over its file over the defaults.
    fn resolve_own(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(listen) = &self.listen {
            config.listen = listen.clone();
        }
        if let Some(dir) = &self.data_dir {
            config.data_dir = dir.clone();
        }
        if let Some(dir) = &self.cache_dir {
            config.cache_dir = dir.clone();
        }
        if let Some(allow) = given(&self.allow) {
            config.allow = allow;
        }
        if let Some(allow) = given(&self.allow_with_credential) {
            config.allow_with_credential = allow;
        }
        if let Some(mode) = self.auth_mode.as_deref().filter(|m| !m.is_empty()) {
            config.auth.mode = mode.parse().map_err(ConfigError::BadValue)?;
        }
        if let Some(hashes) = given(&self.token_hashes) {
            config.auth.token_hashes = hashes;
        }
        if let Some(users) = given(&self.users) {
            config.auth.users = users;
        }
        if let Some(max) = self.max_state_bytes {
            config.max_state_bytes = max;
        }
        if let Some(max) = self.max_answer_bytes {
            config.max_answer_bytes = max;
        }
        if let Some(budget) = self.write_budget_seconds {
            config.write_budget_seconds = budget;
        }
        if let (Some(cert_file), Some(key_file)) = (&self.tls_cert, &self.tls_key) {
            config.tls = Some(TlsConfig {
                cert_file: cert_file.clone(),
                key_file: key_file.clone(),
            });
        }
        if let Some(table) = self.catalog_table.as_deref().filter(|t| !t.is_empty()) {
            let audit_ttl_days = config.catalog.as_ref().map_or(90, |c| c.audit_ttl_days);
            let kms_arn = config.catalog.as_ref().and_then(|c| c.kms_arn.clone());
            config.catalog = Some(crate::config::CatalogConfig {
                dynamodb_table: table.to_owned(),
                audit_ttl_days,
                kms_arn,
            });
        }
        if let (Some(catalog), Some(arn)) = (
            config.catalog.as_mut(),
            self.catalog_kms_arn.as_deref().filter(|a| !a.is_empty()),
        ) {
            catalog.kms_arn = Some(arn.to_owned());
        }
        let encryption = &mut config.encryption;
        if let Some(mode) = self.encryption_mode.as_deref().filter(|m| !m.is_empty()) {
            encryption.mode = mode.to_owned();
        }
        if let Some(arns) = given(&self.kms_arns) {
            encryption.kms_arns = arns;
        }
        if let Some(pairs) = given(&self.kms_context) {
            encryption.kms_context =
                crate::config::key_value_pairs(pairs.iter().map(String::as_str), "--kms-context")?;
        }
        if let Some(arns) = given(&self.fallback_kms_arns) {
            encryption.fallback_kms_arns = arns;
        }
        if let Some(recipients) = given(&self.age_recipients) {
            encryption.age_recipients = recipients;
        }
        if let Some(fingerprints) = given(&self.pgp_fingerprints) {
            encryption.pgp_fingerprints = fingerprints;
        }
        if let Some(uris) = given(&self.vault_uris) {
            encryption.vault_uris = uris;
        }
        if let Some(keys) = given(&self.gcp_kms_keys) {
            encryption.gcp_kms_keys = keys;
        }
        if let Some(enforced) = self.encryption_enforced {
            encryption.enforced = enforced;
        }
        if let Some(provider) = self
            .encryption_provider
            .clone()
            .or_else(|| std::env::var(TF_ENCRYPTION_PROVIDER).ok())
            .filter(|p| !p.is_empty())
        {
            encryption.provider = Some(provider);
        }
        if let Some(file) = &self.legacy_aes_passphrase_file {
            encryption.legacy_aes_passphrase_file = Some(file.clone());
        } else if let Some(passphrase) = legacy_aes_passphrase_from_env()? {
            encryption.legacy_aes_passphrase = Some(passphrase);
            encryption.legacy_aes_passphrase_file = None;
        }
        if let Some(hosts) = given(&self.allowed_hosts) {
            config.allowed_hosts = hosts;
        }
        if let Some(guard) = self.state_guard {
            config.state_guard = guard;
        }
        if let Some(insecure) = self.insecure_no_auth_on_public_address {
            config.insecure_no_auth_on_public_address = insecure;
        }
        if let Some(repositories) = given(&self.repositories) {
            config.repositories.clear();
            let git_ref = self
                .git_ref
                .as_deref()
                .filter(|r| !r.is_empty())
                .unwrap_or(DEFAULT_REF);
            for spec in &repositories {
                config.add_repository_flag(spec, git_ref)?;
            }
        }
        Ok(config)
    }
}

/// terraform-backend-git's name for the encryption provider (`sops` or `aes`).
pub const TF_ENCRYPTION_PROVIDER: &str = "TF_BACKEND_HTTP_ENCRYPTION_PROVIDER";
/// terraform-backend-git's name for its aes passphrase.
pub const TF_ENCRYPTION_PASSPHRASE: &str = "TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE";
/// gitstate's name for the legacy aes passphrase.
pub const LEGACY_AES_PASSPHRASE: &str = "GITSTATE_LEGACY_AES_PASSPHRASE";

/// The legacy aes passphrase from the environment: `GITSTATE_LEGACY_AES_PASSPHRASE` when it is
/// not empty, else `TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE` when it is set at all (empty
/// included: terraform-backend-git then encrypted with the MD5 of the empty string).
fn legacy_aes_passphrase_from_env() -> Result<Option<gitstate_seal::Passphrase>, ConfigError> {
    for (name, empty_counts) in [
        (LEGACY_AES_PASSPHRASE, false),
        (TF_ENCRYPTION_PASSPHRASE, true),
    ] {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        let value = gitstate_seal::Zeroizing::new(value.into_string().map_err(|_| {
            ConfigError::BadValue(format!(
                "{name} is not UTF-8; give the passphrase as UTF-8 text"
            ))
        })?);
        if value.is_empty() && !empty_counts {
            continue;
        }
        return Ok(Some(gitstate_seal::Passphrase::new(
            value,
            format!("environment {name}"),
        )));
    }
    Ok(None)
}

/// The non-empty values of a list flag, or `None` when none was given. An empty variable (a
/// template parameter left blank) means "not set", not "an empty list".
fn given(values: &[String]) -> Option<Vec<String>> {
    let values: Vec<String> = values.iter().filter(|v| !v.is_empty()).cloned().collect();
    (!values.is_empty()).then_some(values)
}
