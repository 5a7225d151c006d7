//! `gitstate config show`: the effective configuration, each value with where it came from
//! (flag, environment variable, configuration file, default), secrets redacted.

use clap::parser::ValueSource;
use clap::ArgMatches;
use gitstate_app::compat::TbgConfig;
use gitstate_app::config::format_lock_ttl;
use gitstate_app::settings::SETTINGS;
use gitstate_app::{Config, Settings};
use gitstate_url::redact_in_text;

/// Which top-level keys (attributes and blocks) a configuration file sets.
fn file_keys(path: &std::path::Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let Ok(body) = hcl::parse(&text) else {
        return Vec::new();
    };
    body.attributes()
        .map(|a| a.key().to_owned())
        .chain(body.blocks().map(|b| b.identifier().to_owned()))
        .collect()
}

/// Where the value of setting `id` (a `Settings` field) came from.
struct Sources<'a> {
    matches: &'a ArgMatches,
    file: Option<String>,
    file_keys: Vec<String>,
}

impl Sources<'_> {
    /// The source of setting `id`: its flag or variable (from the command line's matches), else
    /// the file when it sets the setting's key ([`SETTINGS`]; `id` itself for a file-only key),
    /// else the default.
    fn of(&self, id: &str) -> String {
        let file_key = SETTINGS
            .iter()
            .find(|s| s.id == id)
            .map_or(id, |s| s.file_key);
        let command = <Settings as clap::Args>::augment_args(clap::Command::new("settings"));
        let arg = command.get_arguments().find(|a| a.get_id() == id);
        // Only settings with a flag have a source in the matches (asking for others panics).
        let source = arg.and_then(|_| self.matches.value_source(id));
        match source {
            Some(ValueSource::CommandLine) => {
                format!("flag --{}", arg.and_then(|a| a.get_long()).unwrap_or(id))
            }
            Some(ValueSource::EnvVariable) => format!(
                "environment {}",
                arg.and_then(|a| a.get_env())
                    .map(|e| e.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            _ if self.file_keys.iter().any(|k| k == file_key) => {
                format!("file {}", self.file.as_deref().unwrap_or("?"))
            }
            _ => "default".to_owned(),
        }
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|i| quoted(i)).collect();
    format!("[{}]", items.join(", "))
}

/// `gitstate config show`: the effective configuration of `settings`, each value with where it
/// came from (`matches` are the subcommand's own).
pub fn run(settings: &Settings, matches: Option<&ArgMatches>) -> Result<String, String> {
    let (config, tbg) = settings.resolve_all().map_err(|e| e.to_string())?;
    let matches = matches.ok_or("the command line of `config show` was not kept (a bug)")?;
    Ok(render(&config, &tbg, settings, matches))
}

/// The source of a value that came from terraform-backend-git's spelling `key`, if it did.
fn tbg_source(tbg: &TbgConfig, keys: &[&str]) -> Option<String> {
    let found: Vec<&String> = keys.iter().filter_map(|k| tbg.sources.get(*k)).collect();
    (!found.is_empty()).then(|| {
        let names: Vec<&str> = found.iter().map(|s| s.as_str()).collect();
        format!("{} (terraform-backend-git's spelling)", names.join("; "))
    })
}

/// Renders `config` as annotated HCL-like lines.
pub fn render(
    config: &Config,
    tbg: &TbgConfig,
    settings: &Settings,
    matches: &ArgMatches,
) -> String {
    let sources = Sources {
        matches,
        file: settings.config.as_ref().map(|p| p.display().to_string()),
        file_keys: settings
            .config
            .as_deref()
            .map(file_keys)
            .unwrap_or_default(),
    };
    let mut lines: Vec<(String, String)> = vec![
        (
            format!("listen = {}", quoted(&config.listen)),
            tbg_source(tbg, &["listen"]).unwrap_or_else(|| sources.of("listen")),
        ),
        (
            format!(
                "data_dir = {}",
                quoted(&config.data_dir.display().to_string())
            ),
            sources.of("data_dir"),
        ),
        (
            format!(
                "cache_dir = {}",
                quoted(&config.cache_dir.display().to_string())
            ),
            sources.of("cache_dir"),
        ),
        (
            format!("max_state_bytes = {}", config.max_state_bytes),
            sources.of("max_state_bytes"),
        ),
        (
            format!("max_answer_bytes = {}", config.max_answer_bytes),
            sources.of("max_answer_bytes"),
        ),
        (
            format!("git_timeout_seconds = {}", config.git_timeout_seconds),
            sources.of("git_timeout_seconds"),
        ),
        (
            format!("allow = {}", list(&config.allow)),
            sources.of("allow"),
        ),
        (
            format!(
                "allow_with_credential = {}",
                list(&config.allow_with_credential)
            ),
            tbg_source(tbg, &["allow_with_credential"])
                .unwrap_or_else(|| sources.of("allow_with_credential")),
        ),
        (
            format!("allowed_hosts = {}", list(&config.allowed_hosts)),
            sources.of("allowed_hosts"),
        ),
        (
            format!(
                "insecure_no_auth_on_public_address = {}",
                config.insecure_no_auth_on_public_address
            ),
            sources.of("insecure_no_auth_on_public_address"),
        ),
        (
            format!("state_guard = {}", config.state_guard),
            sources.of("state_guard"),
        ),
        (
            format!(
                "committer = {}",
                quoted(&{
                    let committer = config.committer();
                    format!("{} <{}>", committer.name, committer.email)
                })
            ),
            format!(
                "{} / {}",
                sources.of("committer_name"),
                sources.of("committer_email")
            ),
        ),
        (
            match &config.signing_key {
                Some(key) => format!("signing_key = {}", quoted(&key.display().to_string())),
                None => "# signing_key: commits are unsigned".into(),
            },
            sources.of("signing_key"),
        ),
        (
            match config.lock_ttl {
                Some(ttl) => format!("lock_ttl = {}", quoted(&format_lock_ttl(ttl))),
                None => "# lock_ttl: locks never expire".into(),
            },
            sources.of("lock_ttl"),
        ),
    ];
    if config.repositories.is_empty() {
        lines.push((
            "# no repository: the embedded default ./.gitstate/default.git, named \"default\""
                .into(),
            String::new(),
        ));
    }
    for (name, repository) in &config.repositories {
        lines.push((
            format!(
                "repository {} {{ url = {}, ref = {}{} }}",
                quoted(name),
                quoted(&redact_in_text(&repository.url)),
                quoted(&repository.git_ref),
                match repository.lock_ttl {
                    Some(ttl) => format!(", lock_ttl = {}", quoted(&format_lock_ttl(ttl))),
                    None => String::new(),
                }
            ),
            tbg_source(tbg, &["repository", "ref"]).unwrap_or_else(|| sources.of("repositories")),
        ));
    }
    // Parsed as the server parses them: one entry may span several comma-separated pieces.
    let tokens = gitstate_app::tokens::parse_tokens(&config.auth.token_hashes, &config.auth.tokens)
        .unwrap_or_default();
    lines.push((
        format!(
            "auth {{ mode = {}, token_hashes = {} configured{}, users = [{}] }}",
            quoted(&format!("{:?}", config.auth.mode).to_lowercase()),
            tokens.len(),
            match tokens
                .iter()
                .filter(|(_, scope)| scope.is_limited())
                .count()
            {
                0 => String::new(),
                n => format!(" ({n} scoped)"),
            },
            config
                .auth
                .users
                .iter()
                .map(|u| quoted(u.split(':').next().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        tbg_source(tbg, &["auth"]).unwrap_or_else(|| sources.of("auth_mode")),
    ));
    lines.extend(run_key_line(config, &sources));
    let e = &config.encryption;
    lines.push((
        format!(
            "encryption {{ mode = {}, kms_arns = {}, kms_context = {} keys, fallback_kms_arns = {}, age_recipients = {}, enforced = {} }}",
            quoted(&e.mode),
            list(&e.kms_arns),
            e.kms_context.len(),
            list(&e.fallback_kms_arns),
            list(&e.age_recipients),
            e.enforced
        ),
        tbg_source(tbg, &["kms_arns", "kms_context", "age_recipients"])
            .unwrap_or_else(|| sources.of("kms_arns")),
    ));
    if !e.pgp_fingerprints.is_empty() || !e.vault_uris.is_empty() || !e.gcp_kms_keys.is_empty() {
        lines.push((
            format!(
                "encryption keys {{ pgp_fingerprints = {}, vault_uris = {}, gcp_kms_keys = {} }}",
                list(&e.pgp_fingerprints),
                list(&e.vault_uris),
                list(&e.gcp_kms_keys)
            ),
            tbg_source(tbg, &["pgp_fingerprints", "vault_uris", "gcp_kms_keys"])
                .unwrap_or_else(|| sources.of("pgp_fingerprints")),
        ));
    }
    lines.extend(legacy_encryption_lines(config, tbg, &sources));
    if let Some(tls) = &config.tls {
        lines.push((
            format!(
                "tls {{ cert_file = {}, key_file = {} }}",
                quoted(&tls.cert_file.display().to_string()),
                quoted(&tls.key_file.display().to_string())
            ),
            tbg_source(tbg, &["tls"]).unwrap_or_else(|| sources.of("tls_cert")),
        ));
    }
    lines.extend(tbg_wrapper_lines(tbg));
    lines.push((
        format!("# git credential: {}", git_credential_summary()),
        String::new(),
    ));

    let width = lines
        .iter()
        .map(|(l, _)| l.len())
        .filter(|n| *n <= 64)
        .max()
        .unwrap_or(0);
    let mut out = String::from(
        "# effective configuration: flags > GITSTATE_* environment > terraform-backend-git's variables > configuration file > defaults\n",
    );
    for (line, source) in lines {
        if source.is_empty() {
            out.push_str(&format!("{line}\n"));
        } else {
            out.push_str(&format!("{line:<width$}  # {source}\n"));
        }
    }
    out
}

/// The run key (never its value), with its source; without one, what a process does when OIDC
/// issuers are configured.
fn run_key_line(config: &Config, sources: &Sources) -> Option<(String, String)> {
    let auth = &config.auth;
    match (&auth.run_key, &auth.run_key_file) {
        (Some(key), _) => Some(("auth.run_key = (hidden)".into(), key.source.clone())),
        (None, Some(file)) => Some((
            format!(
                "auth.run_key_file = {}",
                quoted(&file.display().to_string())
            ),
            sources.of("run_key_file"),
        )),
        (None, None) if !auth.oidc.is_empty() => Some((
            "# auth.run_key: none, each process makes its own (a run whose OIDC token expires finishes only through the process that took its lock)".into(),
            String::new(),
        )),
        (None, None) => None,
    }
}

/// terraform-backend-git's encryption settings: the provider and the legacy aes passphrase
/// (never its value), each with its source, naming terraform-backend-git's spellings.
fn legacy_encryption_lines(
    config: &Config,
    tbg_config: &TbgConfig,
    sources: &Sources,
) -> Vec<(String, String)> {
    let tbg = |name: &str| format!("environment {name} (terraform-backend-git's name)");
    let e = &config.encryption;
    let mut lines = Vec::new();
    if let Some(provider) = &e.provider {
        let source = match tbg_config
            .sources
            .get("encryption_provider")
            .and_then(|s| s.strip_prefix("environment "))
        {
            Some(name) => tbg(name),
            None => sources.of("encryption_provider"),
        };
        lines.push((
            format!("encryption.provider = {}", quoted(provider)),
            source,
        ));
    }
    match (&e.legacy_aes_passphrase, &e.legacy_aes_passphrase_file) {
        (Some(passphrase), _) => {
            let source = match passphrase.source.strip_prefix("environment ") {
                Some(name) if name.starts_with("TF_BACKEND_") => tbg(name),
                _ => passphrase.source.clone(),
            };
            lines.push(("encryption.legacy_aes_passphrase = (hidden)".into(), source));
        }
        (None, Some(file)) => lines.push((
            format!(
                "encryption.legacy_aes_passphrase_file = {}",
                quoted(&file.display().to_string())
            ),
            sources.of("legacy_aes_passphrase_file"),
        )),
        (None, None) => {}
    }
    lines
}

/// terraform-backend-git's wrapper settings (state, dir, program, amend, access logs), each
/// with its source.
fn tbg_wrapper_lines(tbg: &TbgConfig) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    let mut add = |key: &str, value: String| {
        if let Some(source) = tbg_source(tbg, &[key]) {
            lines.push((format!("terraform-backend-git.{key} = {value}"), source));
        }
    };
    add("state", quoted(tbg.state.as_deref().unwrap_or_default()));
    add("dir", quoted(tbg.dir.as_deref().unwrap_or_default()));
    add("tf", quoted(tbg.tf.as_deref().unwrap_or_default()));
    add(
        "amend",
        format!(
            "{} (written as normal commits, never force-pushed)",
            tbg.amend
        ),
    );
    add("access_logs", tbg.access_logs.to_string());
    if let Some(file) = &tbg.file {
        lines.push((
            format!(
                "# terraform-backend-git's file: {}",
                quoted(&file.display().to_string())
            ),
            String::new(),
        ));
    }
    lines
}

/// Which variables provide the server's git credential, never their values.
fn git_credential_summary() -> String {
    let set = |name: &str| {
        std::env::var_os(name).is_some_and(|v| !v.is_empty())
            || std::env::var_os(format!("{name}_FILE")).is_some()
    };
    let user = std::env::var("GIT_USERNAME").ok().filter(|u| !u.is_empty());
    let password = ["GIT_PASSWORD_KMS", "GIT_PASSWORD", "GITHUB_TOKEN"]
        .into_iter()
        .find(|name| set(name));
    let http = match (password, user) {
        (Some(var), Some(user)) => format!("user {user}, secret from {var} (hidden)"),
        (Some(var), None) => format!("secret from {var} (hidden)"),
        (None, _) => "none (anonymous, or the caller's in passthrough mode)".into(),
    };
    let ssh: Vec<&str> = ["SSH_PRIVATE_KEY", "SSH_AUTH_SOCK"]
        .into_iter()
        .filter(|name| set(name))
        .collect();
    if ssh.is_empty() {
        http
    } else {
        format!("{http}; ssh: {} set (hidden)", ssh.join(" and "))
    }
}
