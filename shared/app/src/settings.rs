//! The settings every entrypoint shares, with one precedence: flags > `GITSTATE_*` environment >
//! configuration file (`--config` / `GITSTATE_CONFIG`) > defaults. The CLI parses them from its
//! arguments; the Lambda handler from the environment alone.
//!
//! **Every setting is declared once**, in the [`settings!`] table below: its field, flag and
//! environment variable and `--help` text (clap's attributes), its key in the configuration file,
//! its terraform-backend-git alias if it has one, and how it lands in [`Config`]. The overlay on
//! the file ([`Settings::resolve`]), terraform-backend-git's aliases ([`crate::compat`]), `gitstate
//! config show`'s sources and `--help` all read that table; adding a setting is one row, plus
//! the [`Config`] field it sets (whose serde default is the file's default) and its use. No
//! setting given by flag holds a secret: passwords, tokens and passphrases come from variables
//! or files only (DESIGN §6), outside this table.

use std::path::PathBuf;

use crate::compat::{OwnSettings, TbgConfig, TbgInput};
use crate::config::{Config, ConfigError, TlsConfig, DEFAULT_REF};

/// A value as a flag or variable gives it: `None` when not given. An empty variable (a template
/// parameter left blank) means "not set", not "an empty value", and a list keeps only its
/// non-empty items.
pub trait Given {
    /// What the setting's row receives.
    type Value;
    /// The value, when one was given.
    fn given(&self) -> Option<Self::Value>;
}

impl Given for Option<String> {
    type Value = String;
    fn given(&self) -> Option<String> {
        self.clone().filter(|v| !v.is_empty())
    }
}

impl Given for Vec<String> {
    type Value = Vec<String>;
    fn given(&self) -> Option<Vec<String>> {
        let values: Vec<String> = self.iter().filter(|v| !v.is_empty()).cloned().collect();
        (!values.is_empty()).then_some(values)
    }
}

macro_rules! given_as_is {
    ($($ty:ty),*) => {$(
        impl Given for Option<$ty> {
            type Value = $ty;
            fn given(&self) -> Option<$ty> {
                self.clone()
            }
        }
    )*};
}
given_as_is!(PathBuf, u64, usize, bool);

/// A value read from a terraform-backend-git variable: a list is comma-separated, as sops splits
/// it (blanks dropped); a single value is trimmed. Only these types may have an alias.
pub trait FromAlias {
    /// The value of the variable's text.
    fn from_alias(raw: &str) -> Self;
}

impl FromAlias for Vec<String> {
    fn from_alias(raw: &str) -> Self {
        raw.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

impl FromAlias for String {
    fn from_alias(raw: &str) -> Self {
        raw.trim().to_owned()
    }
}

/// One row of the table, as the other readers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The field (and clap's id).
    pub id: &'static str,
    /// The key in `gitstate.hcl` that holds it (the top-level attribute or block; empty for
    /// `--config` itself).
    pub file_key: &'static str,
    /// terraform-backend-git's variable for it, below gitstate's own flag and variable and above
    /// the files (see [`crate::compat`]).
    pub tbg: Option<&'static str>,
}

/// Declares the settings: the clap struct, the table of rows, the overlay on a [`Config`], the
/// aliases. Each row: clap's doc and attributes, `field: Type { file: "key", [tbg: "VARIABLE",]
/// apply: |settings, config, value, what| { … } }`, where `value` is the given value
/// ([`Given::Value`]) and `what()` names where it came from, for a message.
macro_rules! settings {
    ($(
        $(#[$attr:meta])*
        $field:ident: $ty:ty {
            file: $file:literal,
            $(tbg: $tbg:literal,)?
            apply: |$s:ident, $config:ident, $value:ident, $what:ident| $apply:block,
        }
    )*) => {
        /// Flags (each also a variable) that override the configuration file: one row each in
        /// [`SETTINGS`].
        #[derive(clap::Args, Debug, Clone, Default)]
        pub struct Settings {
            $($(#[$attr])* pub $field: $ty,)*
            /// terraform-backend-git's flags and file, when gitstate runs under its command line
            /// (see [`crate::compat`]); its variables are read in every mode.
            #[arg(skip)]
            pub tbg: TbgInput,
        }

        /// Every setting, in the order they are applied.
        pub const SETTINGS: &[Setting] = &[$(Setting {
            id: stringify!($field),
            file_key: $file,
            tbg: settings!(@alias $($tbg)?),
        },)*];

        impl Settings {
            /// Whether the setting `id` was given (by flag or variable, not empty).
            pub fn given(&self, id: &str) -> bool {
                match id {
                    $(stringify!($field) => Given::given(&self.$field).is_some(),)*
                    _ => false,
                }
            }

            /// Sets in `config` every setting given, in the table's order.
            fn overlay(&self, config: &mut Config) -> Result<(), ConfigError> {
                $(
                    if let Some(value) = Given::given(&self.$field) {
                        let spelling = || Settings::spelling(stringify!($field));
                        settings!(@apply self, config, value, spelling, $s, $config, $value, $what, $apply);
                    }
                )*
                Ok(())
            }

        }

        impl OwnSettings for Settings {
            fn given(&self, id: &str) -> bool {
                Settings::given(self, id)
            }

            fn git_ref(&self) -> Option<String> {
                Given::given(&self.git_ref)
            }

            fn auth_mode(&self) -> Option<String> {
                Given::given(&self.auth_mode)
            }

            fn aliases(&self) -> Vec<(&'static str, &'static str)> {
                SETTINGS.iter().filter_map(|s| Some((s.id, s.tbg?))).collect()
            }

            /// Sets the setting `id` in `config` from `raw`, the text of its terraform-backend-git
            /// variable `name` (see [`Setting::tbg`]).
            fn apply_alias(
                &self,
                id: &str,
                raw: &str,
                name: &str,
                config: &mut Config,
            ) -> Result<(), ConfigError> {
                $($(
                    if id == stringify!($field) {
                        let _ = $tbg;
                        let value = <<$ty as Given>::Value as FromAlias>::from_alias(raw);
                        let spelling = || name.to_owned();
                        settings!(@apply self, config, value, spelling, $s, $config, $value, $what, $apply);
                        return Ok(());
                    }
                )?)*
                Err(ConfigError::BadValue(format!("{name} names no setting gitstate reads")))
            }
        }
    };
    (@alias) => { None };
    (@alias $tbg:literal) => { Some($tbg) };
    (@apply $self:expr, $config_in:expr, $value_in:expr, $spelling:expr, $s:ident, $config:ident, $value:ident, $what:ident, $apply:block) => {{
        #[allow(unused_variables)]
        let $s: &Settings = $self;
        #[allow(unused_variables)]
        let $config: &mut Config = &mut *$config_in;
        #[allow(unused_variables)]
        let $value = $value_in;
        #[allow(unused_variables)]
        let $what = &$spelling;
        $apply
    }};
}

// One row per setting, in the order they are applied. The rows look alike on purpose (a
// duplicate scan sees one shape many times): each row is the whole declaration of its setting.
settings! {
    /// Address to listen on [default: 127.0.0.1:6061].
    #[arg(long, env = "GITSTATE_LISTEN")]
    listen: Option<String> {
        file: "listen",
        apply: |_s, config, value, _what| { config.listen = value; },
    }
    /// Configuration file (HCL).
    #[arg(long, env = "GITSTATE_CONFIG")]
    config: Option<PathBuf> {
        file: "",
        apply: |_s, _config, _value, _what| {},
    }
    /// The configuration file's text itself, where no file can be shipped (a Lambda function's
    /// environment); `--config` wins.
    #[arg(long, env = "GITSTATE_CONFIG_TEXT", hide_env_values = true)]
    config_text: Option<String> {
        file: "",
        apply: |_s, _config, _value, _what| {},
    }
    /// Directory of the embedded default repository [default: ./.gitstate].
    #[arg(long, env = "GITSTATE_DATA_DIR")]
    data_dir: Option<PathBuf> {
        file: "data_dir",
        apply: |_s, config, value, _what| { config.data_dir = value; },
    }
    /// Cache of fetched objects for remote repositories [default: $TMPDIR/gitstate-cache].
    #[arg(long, env = "GITSTATE_CACHE_DIR")]
    cache_dir: Option<PathBuf> {
        file: "cache_dir",
        apply: |_s, config, value, _what| { config.cache_dir = value; },
    }
    /// A repository as NAME=URL (repeatable, or comma-separated in the variable); replaces the
    /// configuration file's repositories.
    #[arg(
        long = "repository",
        value_name = "NAME=URL",
        env = "GITSTATE_REPOSITORY",
        value_delimiter = ','
    )]
    repositories: Vec<String> {
        file: "repository",
        apply: |s, config, value, _what| {
            config.repositories.clear();
            let git_ref = s.git_ref.as_deref().filter(|r| !r.is_empty()).unwrap_or(DEFAULT_REF);
            for spec in &value {
                config.add_repository_flag(spec, git_ref)?;
            }
        },
    }
    /// Branch holding the states, for --repository [default: main].
    #[arg(long = "ref", value_name = "REF", env = "GITSTATE_REF")]
    git_ref: Option<String> {
        file: "repository",
        apply: |_s, _config, _value, _what| { /* read by --repository */ },
    }
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
    allow: Vec<String> {
        file: "allow",
        apply: |_s, config, value, _what| { config.allow = value; },
    }
    /// URL patterns of ad-hoc repositories that may be contacted with this server's own git
    /// credential (repeatable, or comma-separated in the variable); replaces the file's
    /// `allow_with_credential`.
    #[arg(
        long = "allow-with-credential",
        value_name = "PATTERN",
        env = "GITSTATE_ALLOW_WITH_CREDENTIAL",
        value_delimiter = ','
    )]
    allow_with_credential: Vec<String> {
        file: "allow_with_credential",
        apply: |_s, config, value, _what| { config.allow_with_credential = value; },
    }
    /// Whose git credential a request uses: "server" (GIT_USERNAME/GIT_PASSWORD, GITHUB_TOKEN),
    /// "passthrough" (the caller's basic-auth pair, for that request only) or "team" (the
    /// server's credential; callers present a token) [default: server].
    #[arg(long, env = "GITSTATE_AUTH_MODE")]
    auth_mode: Option<String> {
        file: "auth",
        apply: |_s, config, value, _what| { config.auth.mode = value.parse().map_err(ConfigError::BadValue)?; },
    }
    /// Team mode: SHA-256 hashes (`sha256:<hex>`, e.g. from `printf %s TOKEN | sha256sum`) of the
    /// tokens callers may present as their basic-auth password (repeatable, or comma-separated in
    /// the variable), each optionally scoped: `sha256:<hex>;access=outputs-only;paths=teams/a/**`
    /// (`access` read-write, read-only or outputs-only; `paths` comma-separated patterns as in
    /// `allow`); replaces the file's `auth.token_hashes`.
    #[arg(
        long = "token-hash",
        value_name = "sha256:HEX",
        env = "GITSTATE_TOKEN_HASHES",
        value_delimiter = ','
    )]
    token_hashes: Vec<String> {
        file: "auth",
        apply: |_s, config, value, _what| { config.auth.token_hashes = value; },
    }
    /// Team mode: a user as NAME:HASH, the hash from `htpasswd -nB NAME` (bcrypt; it asks for the password) or
    /// `sha256:<hex>` (repeatable, or comma-separated in the variable); replaces the file's
    /// `auth.users`.
    #[arg(
        long = "user",
        value_name = "NAME:HASH",
        env = "GITSTATE_USERS",
        value_delimiter = ','
    )]
    users: Vec<String> {
        file: "auth",
        apply: |_s, config, value, _what| { config.auth.users = value; },
    }
    /// Team mode with OIDC: a file holding the run key (at least 32 bytes; a trailing newline is
    /// trimmed), the secret that seals the locks OIDC tokens take; give every process that
    /// serves these repositories the same. The key itself can be given in GITSTATE_RUN_KEY,
    /// never as a flag [default: a random key per process].
    #[arg(long, value_name = "PATH", env = "GITSTATE_RUN_KEY_FILE")]
    run_key_file: Option<PathBuf> {
        file: "auth",
        apply: |_s, config, value, _what| { config.auth.run_key_file = Some(value); },
    }
    /// Largest accepted state, in bytes [default: 536870912].
    #[arg(long, env = "GITSTATE_MAX_STATE_BYTES")]
    max_state_bytes: Option<usize> {
        file: "max_state_bytes",
        apply: |_s, config, value, _what| { config.max_state_bytes = value; },
    }
    /// Largest answer accepted from a git server (a pack), in bytes [default: 2147483648].
    #[arg(long, env = "GITSTATE_MAX_ANSWER_BYTES")]
    max_answer_bytes: Option<u64> {
        file: "max_answer_bytes",
        apply: |_s, config, value, _what| { config.max_answer_bytes = value; },
    }
    /// How long a write may wait for its turn and retry before it is answered 503 with nothing
    /// written, in seconds [default: 30].
    #[arg(long, env = "GITSTATE_WRITE_BUDGET_SECONDS")]
    write_budget_seconds: Option<u64> {
        file: "write_budget_seconds",
        apply: |_s, config, value, _what| { config.write_budget_seconds = value; },
    }
    /// Encryption at rest: "all" values or only secrets, keeping the "structure" readable
    /// [default: all].
    #[arg(long, env = "GITSTATE_ENCRYPTION_MODE")]
    encryption_mode: Option<String> {
        file: "encryption",
        apply: |_s, config, value, _what| { config.encryption.mode = value; },
    }
    /// AWS KMS key ARN new state versions are wrapped for (repeatable, or comma-separated in the
    /// variable, as sops reads it); replaces the file's `encryption.kms_arns`.
    #[arg(
        long = "kms-arn",
        value_name = "ARN",
        env = "SOPS_KMS_ARN",
        value_delimiter = ','
    )]
    kms_arns: Vec<String> {
        file: "encryption",
        tbg: "TF_BACKEND_HTTP_SOPS_AWS_KMS_ARNS",
        apply: |_s, config, value, _what| { config.encryption.kms_arns = value; },
    }
    /// KMS encryption context as KEY=VALUE (repeatable, or comma-separated in the variable);
    /// replaces the file's `encryption.kms_context`.
    #[arg(
        long = "kms-context",
        value_name = "KEY=VALUE",
        env = "GITSTATE_KMS_CONTEXT",
        value_delimiter = ','
    )]
    kms_context: Vec<String> {
        file: "encryption",
        tbg: "TF_BACKEND_HTTP_SOPS_AWS_KMS_CONTEXT",
        apply: |_s, config, value, what| {
            config.encryption.kms_context =
                crate::config::key_value_pairs(value.iter().map(String::as_str), &what())?;
        },
    }
    /// KMS key ARN that may still read older versions (rotation; repeatable).
    #[arg(
        long = "fallback-kms-arn",
        value_name = "ARN",
        env = "GITSTATE_FALLBACK_KMS_ARNS",
        value_delimiter = ','
    )]
    fallback_kms_arns: Vec<String> {
        file: "encryption",
        apply: |_s, config, value, _what| { config.encryption.fallback_kms_arns = value; },
    }
    /// age recipient new state versions are wrapped for (repeatable, or comma-separated in the
    /// variable, as sops reads it). Identities for reading come from SOPS_AGE_KEY_FILE or
    /// SOPS_AGE_KEY.
    #[arg(
        long = "age-recipient",
        value_name = "AGE1…",
        env = "SOPS_AGE_RECIPIENTS",
        value_delimiter = ','
    )]
    age_recipients: Vec<String> {
        file: "encryption",
        tbg: "TF_BACKEND_HTTP_SOPS_AGE_RECIPIENTS",
        apply: |_s, config, value, _what| { config.encryption.age_recipients = value; },
    }
    /// PGP key fingerprint new state versions are wrapped for through gpg (repeatable, or
    /// comma-separated in the variable, as sops reads it); replaces the file's
    /// `encryption.pgp_fingerprints`. The secret key in gpg's keyring (GNUPGHOME) reads.
    #[arg(
        long = "pgp-fingerprint",
        value_name = "FINGERPRINT",
        env = "SOPS_PGP_FP",
        value_delimiter = ','
    )]
    pgp_fingerprints: Vec<String> {
        file: "encryption",
        tbg: "TF_BACKEND_HTTP_SOPS_PGP_FP",
        apply: |_s, config, value, _what| { config.encryption.pgp_fingerprints = value; },
    }
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
    vault_uris: Vec<String> {
        file: "encryption",
        tbg: "TF_BACKEND_HTTP_SOPS_HC_VAULT_URIS",
        apply: |_s, config, value, _what| { config.encryption.vault_uris = value; },
    }
    /// GCP KMS key (projects/P/locations/L/keyRings/R/cryptoKeys/K) new state versions are
    /// wrapped for (repeatable, or comma-separated in the variable, as sops reads it); replaces
    /// the file's `encryption.gcp_kms_keys`.
    #[arg(
        long = "gcp-kms-key",
        value_name = "RESOURCE_ID",
        env = "SOPS_GCP_KMS_IDS",
        value_delimiter = ','
    )]
    gcp_kms_keys: Vec<String> {
        file: "encryption",
        tbg: "TF_BACKEND_HTTP_SOPS_GCP_KMS_KEYS",
        apply: |_s, config, value, _what| { config.encryption.gcp_kms_keys = value; },
    }
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(
        long,
        value_name = "PEM",
        env = "GITSTATE_TLS_CERT",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf> {
        file: "tls",
        apply: |s, config, value, _what| {
            // clap requires both halves.
            if let Some(key_file) = &s.tls_key {
                let client_ca_file = config.tls.as_ref().and_then(|t| t.client_ca_file.clone());
                config.tls = Some(TlsConfig { cert_file: value, key_file: key_file.clone(), client_ca_file });
            }
        },
    }
    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        value_name = "PEM",
        env = "GITSTATE_TLS_KEY",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf> {
        file: "tls",
        apply: |_s, _config, _value, _what| { /* read by --tls-cert */ },
    }
    /// mTLS: CA certificates (PEM) that every client's certificate must chain to; a client
    /// without one, or with one from another CA, fails the TLS handshake. Needs --tls-cert and
    /// --tls-key (or the file's `tls` block); replaces the file's `tls.client_ca_file`.
    #[arg(long, value_name = "PEM", env = "GITSTATE_TLS_CLIENT_CA")]
    tls_client_ca: Option<PathBuf> {
        file: "tls",
        apply: |_s, config, value, _what| {
            match config.tls.as_mut() {
                Some(tls) => tls.client_ca_file = Some(value),
                None => return Err(ConfigError::BadValue(
                    "--tls-client-ca (GITSTATE_TLS_CLIENT_CA) needs HTTPS: give --tls-cert and --tls-key, or a tls block in the file".into(),
                )),
            }
        },
    }
    /// DynamoDB table of the catalog (states, locks, audit trail); replaces the file's
    /// `catalog.dynamodb_table` [default: no catalog].
    #[arg(long, value_name = "TABLE", env = "GITSTATE_CATALOG_TABLE")]
    catalog_table: Option<String> {
        file: "catalog",
        apply: |_s, config, value, _what| {
            let audit_ttl_days = config.catalog.as_ref().map_or(90, |c| c.audit_ttl_days);
            let kms_arn = config.catalog.as_ref().and_then(|c| c.kms_arn.clone());
            config.catalog = Some(crate::config::CatalogConfig {
                dynamodb_table: value,
                audit_ttl_days,
                kms_arn,
            });
        },
    }
    /// KMS key that makes the catalog's resource index key (identifiers are stored as keyed
    /// hashes under it); replaces the file's `catalog.kms_arn` [default: the first of
    /// encryption.kms_arns; without any, nothing is indexed].
    #[arg(long, value_name = "ARN", env = "GITSTATE_CATALOG_KMS_ARN")]
    catalog_kms_arn: Option<String> {
        file: "catalog",
        apply: |_s, config, value, _what| {
            if let Some(catalog) = config.catalog.as_mut() {
                catalog.kms_arn = Some(value);
            }
        },
    }
    /// terraform-backend-git's encryption provider: "sops" (needs a key: --kms-arn,
    /// --age-recipient) or "aes" (needs the legacy passphrase; its files are read, and written
    /// back with the sops keys, or as plaintext without keys). Also read from
    /// TF_BACKEND_HTTP_ENCRYPTION_PROVIDER.
    #[arg(long, value_name = "sops|aes", env = "GITSTATE_ENCRYPTION_PROVIDER")]
    encryption_provider: Option<String> {
        file: "encryption",
        tbg: "TF_BACKEND_HTTP_ENCRYPTION_PROVIDER",
        apply: |_s, config, value, _what| { config.encryption.provider = Some(value); },
    }
    /// A file holding the passphrase terraform-backend-git's aes provider encrypted states with
    /// (read only, never written in that format). The passphrase itself can be given in
    /// GITSTATE_LEGACY_AES_PASSPHRASE or TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE, never as a flag.
    #[arg(long, value_name = "PATH", env = "GITSTATE_LEGACY_AES_PASSPHRASE_FILE")]
    legacy_aes_passphrase_file: Option<PathBuf> {
        file: "encryption",
        apply: |_s, config, value, _what| { config.encryption.legacy_aes_passphrase_file = Some(value); },
    }
    /// Refuse to start without an encryption key, so plaintext is never stored.
    #[arg(long, env = "GITSTATE_ENCRYPTION_ENFORCED", num_args = 0..=1, default_missing_value = "true")]
    encryption_enforced: Option<bool> {
        file: "encryption",
        apply: |_s, config, value, _what| { config.encryption.enforced = value; },
    }
    /// A host name browsers may use for a server listening on loopback, besides localhost and
    /// loopback addresses (repeatable, or comma-separated in the variable); any other Host
    /// header is refused (DNS rebinding). Replaces the file's `allowed_hosts`.
    #[arg(
        long = "allowed-host",
        value_name = "NAME",
        env = "GITSTATE_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String> {
        file: "allowed_hosts",
        apply: |_s, config, value, _what| { config.allowed_hosts = value; },
    }
    /// Serve on a non-loopback address with auth mode "server": anyone who reaches the address
    /// reads and writes every state with the server's git credential. Refused without this.
    #[arg(
        long,
        env = "GITSTATE_INSECURE_NO_AUTH_ON_PUBLIC_ADDRESS",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    insecure_no_auth_on_public_address: Option<bool> {
        file: "insecure_no_auth_on_public_address",
        apply: |_s, config, value, _what| { config.insecure_no_auth_on_public_address = value; },
    }
    /// The state guard: refuse (409) a POST that would replace a state with another lineage or
    /// an older serial, unless its address says `?force=true`. On by default.
    #[arg(long, env = "GITSTATE_STATE_GUARD", num_args = 0..=1, default_missing_value = "true")]
    state_guard: Option<bool> {
        file: "state_guard",
        apply: |_s, config, value, _what| { config.state_guard = value; },
    }
    /// Stale locks: a LOCK takes over another holder's lock once it is older than this by its
    /// `Created` (e.g. "30m", "2h"), answers `X-Gitstate-Took-Over` with the old ID, and logs
    /// and records a force-unlock; a repository block's `lock_ttl` overrides it [default: never].
    #[arg(long, env = "GITSTATE_LOCK_TTL", value_name = "DURATION")]
    lock_ttl: Option<String> {
        file: "lock_ttl",
        apply: |_s, config, value, _what| { config.lock_ttl = Some(crate::config::parse_lock_ttl(&value)?); },
    }
    /// The name gitstate's commits are written under, as author and committer (a named bot that
    /// a protected branch admits); a repository block's `committer_name` overrides it
    /// [default: gitstate].
    #[arg(long, env = "GITSTATE_COMMITTER_NAME", value_name = "NAME")]
    committer_name: Option<String> {
        file: "committer_name",
        apply: |_s, config, value, _what| { config.committer_name = Some(value); },
    }
    /// The e-mail gitstate's commits are written under [default: gitstate@localhost].
    #[arg(long, env = "GITSTATE_COMMITTER_EMAIL", value_name = "EMAIL")]
    committer_email: Option<String> {
        file: "committer_email",
        apply: |_s, config, value, _what| { config.committer_email = Some(value); },
    }
    /// A key file that signs every commit gitstate writes: an OpenSSH ed25519 private key (SSH
    /// signatures, which GitHub and GitLab verify) or an armored OpenPGP secret
    /// key (through gpg), without a passphrase; a repository block's `signing_key` overrides it
    /// [default: unsigned].
    #[arg(long, env = "GITSTATE_SIGNING_KEY", value_name = "FILE")]
    signing_key: Option<PathBuf> {
        file: "signing_key",
        apply: |_s, config, value, _what| { config.signing_key = Some(value); },
    }
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
        let tbg = crate::compat::apply(&self.tbg, self, &mut config)?;
        Ok((config, tbg))
    }

    /// gitstate's own settings over its file over the defaults.
    fn resolve_own(&self) -> Result<Config, ConfigError> {
        self.resolve_own_in(&|name| std::env::var_os(name))
    }

    /// [`Settings::resolve_own`], with the secrets that only variables hold read from `env`.
    fn resolve_own_in(
        &self,
        env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Config, ConfigError> {
        let mut config = match (&self.config, &self.config_text) {
            (Some(path), _) => Config::from_file(path)?,
            (None, Some(text)) => {
                Config::from_hcl(text).map_err(|message| ConfigError::Invalid {
                    path: "GITSTATE_CONFIG_TEXT".into(),
                    message,
                })?
            }
            (None, None) => Config::default(),
        };
        self.overlay(&mut config)?;
        // The legacy passphrase itself is never a flag: only a variable (or the file above).
        if !self.given("legacy_aes_passphrase_file") {
            if let Some(passphrase) = crate::sealing::legacy_aes_passphrase_from_env(env)? {
                config.encryption.legacy_aes_passphrase = Some(passphrase);
                config.encryption.legacy_aes_passphrase_file = None;
            }
        }
        // So is the run key: GITSTATE_RUN_KEY, below --run-key-file and its variable, above the
        // file's auth.run_key_file.
        if !self.given("run_key_file") {
            if let Some(key) =
                crate::run_key::RunKey::from_env(env).map_err(ConfigError::BadValue)?
            {
                config.auth.run_key = Some(key);
                config.auth.run_key_file = None;
            }
        }
        Ok(config)
    }

    /// How the setting `id` is spelled: `--flag / VARIABLE`, from clap's declaration.
    pub fn spelling(id: &str) -> String {
        let command = <Settings as clap::Args>::augment_args(clap::Command::new("settings"));
        let Some(arg) = command.get_arguments().find(|a| a.get_id() == id) else {
            return id.to_owned();
        };
        let flag = arg.get_long().map(|l| format!("--{l}"));
        let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
        [flag, env]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" / ")
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;

    const FLAG_KEY: &str = "flag-key-0123456789abcdef0123456789";
    const VARIABLE_KEY: &str = "variable-key-0123456789abcdef012345";
    const FILE_KEY: &str = "file-key-0123456789abcdef0123456789";

    /// The run key: `--run-key-file` (or its variable) > `GITSTATE_RUN_KEY` > the file's
    /// `auth.run_key_file`, as every setting (flags > environment > file); the key never shows
    /// in the configuration's `Debug`, and a short one stops the start with a sentence naming
    /// the variable, not the value.
    #[test]
    fn the_run_key_comes_from_the_flag_then_the_variable_then_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (flag_file, file_file) = (dir.path().join("flag.key"), dir.path().join("file.key"));
        std::fs::write(&flag_file, format!("{FLAG_KEY}\n")).unwrap();
        std::fs::write(&file_file, format!("{FILE_KEY}\n")).unwrap();
        let hcl = dir.path().join("gitstate.hcl");
        std::fs::write(
            &hcl,
            format!("auth {{\n  run_key_file = {:?}\n}}\n", file_file.display()),
        )
        .unwrap();
        let no_variable = |_: &str| None;
        let variable = |value: &'static str| {
            move |name: &str| (name == "GITSTATE_RUN_KEY").then(|| OsString::from(value))
        };
        let from_file = Settings {
            config: Some(hcl.clone()),
            ..Settings::default()
        };
        let with_flag = Settings {
            run_key_file: Some(flag_file.clone()),
            ..from_file.clone()
        };

        let config = from_file.resolve_own_in(&no_variable).unwrap();
        assert_eq!(config.auth.run_key_file.as_ref(), Some(&file_file));
        assert_eq!(config.auth.run_key, None);

        let config = from_file.resolve_own_in(&variable(VARIABLE_KEY)).unwrap();
        assert_eq!(
            config.auth.run_key_file, None,
            "the variable wins over the file"
        );
        let key = config.auth.run_key.as_ref().expect("the variable's key");
        assert_eq!(key.source, "environment GITSTATE_RUN_KEY");
        assert_eq!(
            key.mark("t"),
            crate::run_key::RunKey::new(VARIABLE_KEY.as_bytes(), "")
                .unwrap()
                .mark("t")
        );
        let shown = format!("{config:?}");
        assert!(!shown.contains(VARIABLE_KEY), "{shown}");

        let config = with_flag.resolve_own_in(&variable(VARIABLE_KEY)).unwrap();
        assert_eq!(config.auth.run_key, None, "the flag wins over the variable");
        assert_eq!(config.auth.run_key_file.as_ref(), Some(&flag_file));

        let refused = from_file
            .resolve_own_in(&variable("too-short"))
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("GITSTATE_RUN_KEY") && refused.contains("32 bytes"),
            "{refused}"
        );
        assert!(!refused.contains("too-short"), "{refused}");
    }
}
