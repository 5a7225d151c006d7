//! terraform-backend-git (plumber-cd) spellings mapped onto gitstate's settings, so its users
//! switch by changing the binary's name: its environment variables (`TF_BACKEND_GIT_*`,
//! `TF_BACKEND_HTTP_SOPS_*`, `SSH_PRIVATE_KEY`), its file `terraform-backend-git.hcl` and the
//! flags of its command line (parsed by the CLI into [`TbgFlags`]).
//!
//! Precedence, as terraform-backend-git's (viper: flag > environment > file) inside gitstate's:
//! its flags > gitstate's flags and `GITSTATE_*` variables > its variables > gitstate's file >
//! its file > defaults. Its file is read only when gitstate's own (`--config`) is not given.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{AuthMode, Config, ConfigError, TlsConfig, DEFAULT_REPOSITORY};

/// terraform-backend-git's file name (its viper config name with type `hcl`).
pub const FILE_NAME: &str = "terraform-backend-git.hcl";
/// terraform-backend-git's branch when none is given (`--ref`'s default, and its query
/// addresses' without `ref=`).
pub const TBG_DEFAULT_REF: &str = "master";

/// Which terraform-backend-git file to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TbgFile {
    /// None (gitstate's own commands).
    #[default]
    Off,
    /// Look for `terraform-backend-git.hcl` as it did: in the home directory, then the current
    /// directory (viper's search order: the first found is used).
    Search,
    /// Its `--config FILE`.
    Path(PathBuf),
}

/// terraform-backend-git's command-line flags (the highest precedence).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TbgFlags {
    /// `--address`/`-a`.
    pub address: Option<String>,
    /// `--access-logs`/`-l`.
    pub access_logs: bool,
    /// `git --repository`/`-r`.
    pub repository: Option<String>,
    /// `git --ref`/`-b`.
    pub git_ref: Option<String>,
    /// `git --state`/`-s`.
    pub state: Option<String>,
    /// `git --amend`.
    pub amend: bool,
    /// `git --dir`/`-d`.
    pub dir: Option<String>,
    /// `terraform --tf`/`-t`.
    pub tf: Option<String>,
}

/// What the CLI hands to [`Settings::resolve`] in terraform-backend-git mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TbgInput {
    /// Its file.
    pub file: TbgFile,
    /// Its flags.
    pub flags: TbgFlags,
    /// Its standalone server (no `git` subcommand): query addresses naming its repository
    /// (`git.repository`) are served with this server's git credential, as it served them.
    pub standalone: bool,
}

/// What this mapping needs to know of gitstate's own settings (which come first): implemented
/// by [`crate::Settings`] from its table, so that this module does not depend on it.
pub trait OwnSettings {
    /// Whether gitstate's setting `id` was given (flag or variable, not empty).
    fn given(&self, id: &str) -> bool;
    /// gitstate's `--ref` / `GITSTATE_REF`, when given.
    fn git_ref(&self) -> Option<String>;
    /// gitstate's `--auth-mode` / `GITSTATE_AUTH_MODE`, when given.
    fn auth_mode(&self) -> Option<String>;
    /// The settings with a terraform-backend-git alias: (setting, its variable).
    fn aliases(&self) -> Vec<(&'static str, &'static str)>;
    /// Sets setting `id` in `config` from `raw`, the text of its alias `name`.
    fn apply_alias(
        &self,
        id: &str,
        raw: &str,
        name: &str,
        config: &mut Config,
    ) -> Result<(), ConfigError>;
}

/// The wrapper-only values of terraform-backend-git's configuration, and where every value that
/// came from one of its spellings came from (for `gitstate config show`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TbgConfig {
    /// The state path (`git.state`), for the wrapper.
    pub state: Option<String>,
    /// The directory the wrapper changes to first (`git.dir`).
    pub dir: Option<String>,
    /// The program the wrapper runs (`wrapper.tf.bin`).
    pub tf: Option<String>,
    /// `git.amend`: accepted; the writes are normal commits.
    pub amend: bool,
    /// `accessLogs`: a line per request (the wrapper logs at info).
    pub access_logs: bool,
    /// The file read, if any.
    pub file: Option<PathBuf>,
    /// gitstate setting (`repository`, `ref`, `listen`, …) → the spelling it came from.
    pub sources: BTreeMap<String, String>,
}

/// A value and the spelling it came from.
#[derive(Debug, Clone)]
struct Sourced {
    value: String,
    source: String,
}

/// The keys of terraform-backend-git's file, lower-case (viper's keys are case-insensitive), each
/// with its value as text.
type FileValues = BTreeMap<String, String>;

/// terraform-backend-git's variable for a viper key: prefix `TF_BACKEND_GIT`, `.` → `_`.
fn env_name(key: &str) -> String {
    format!("TF_BACKEND_GIT_{}", key.replace('.', "_").to_uppercase())
}

/// A variable's value; empty counts as unset (the project's rule, and viper's default).
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Reads terraform-backend-git's HCL file. Both spellings it accepted (HCL 1 through viper) are
/// read: dotted keys (`git.repository = "…"`) and blocks (`git { repository = "…" }`).
pub fn read_file(path: &Path) -> Result<FileValues, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_file(&text).map_err(|message| ConfigError::Invalid {
        path: path.to_owned(),
        message,
    })
}

/// The separator a dotted key's dots become before HCL 2 parsing (HCL 1 allowed dots in
/// identifiers, HCL 2 does not).
const DOT: &str = "__dot__";

fn parse_file(text: &str) -> Result<FileValues, String> {
    // `git.repository = "…"` → `git__dot__repository = "…"`: only the key before the `=` of a
    // line that starts with one, so values are never touched.
    let rewritten: Vec<String> = text
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let key_len = trimmed
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
                .unwrap_or(trimmed.len());
            let (key, rest) = trimmed.split_at(key_len);
            if key.contains('.') && rest.trim_start().starts_with('=') {
                format!(
                    "{}{}{rest}",
                    &line[..line.len() - trimmed.len()],
                    key.replace('.', DOT)
                )
            } else {
                line.to_owned()
            }
        })
        .collect();
    // hcl-rs's message quotes the line, which may hold a credential: position and reason only.
    let body = hcl::parse(&rewritten.join("\n"))
        .map_err(|e| crate::config::one_line_parse_error(&e.to_string()))?;
    let mut values = FileValues::new();
    flatten(&body, "", &mut values)?;
    Ok(values)
}

fn flatten(body: &hcl::Body, prefix: &str, out: &mut FileValues) -> Result<(), String> {
    for attribute in body.attributes() {
        let key = format!("{prefix}{}", attribute.key().replace(DOT, ".")).to_lowercase();
        let value = match attribute.expr() {
            hcl::Expression::String(s) => s.clone(),
            hcl::Expression::Bool(b) => b.to_string(),
            hcl::Expression::Number(n) => n.to_string(),
            _ => return Err(format!("{key}: expected a string, a number or true/false")),
        };
        out.insert(key, value);
    }
    for block in body.blocks() {
        let prefix = format!("{prefix}{}.", block.identifier());
        flatten(block.body(), &prefix, out)?;
    }
    Ok(())
}

/// The file to read for `input`, if any (and whether it exists: a missing `--config` file is an
/// error, a missing searched one is not).
fn file_path(input: &TbgFile) -> Option<PathBuf> {
    match input {
        TbgFile::Off => None,
        TbgFile::Path(path) => Some(path.clone()),
        TbgFile::Search => {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let cwd = std::env::current_dir().ok();
            home.into_iter()
                .chain(cwd)
                .map(|dir| dir.join(FILE_NAME))
                .find(|p| p.is_file())
        }
    }
}

/// The keys of its file this mapping reads; others are reported once (it ignored them).
const FILE_KEYS: &[&str] = &[
    "git.repository",
    "git.ref",
    "git.state",
    "git.amend",
    "git.dir",
    "address",
    "accesslogs",
    "wrapper.tf.bin",
];

/// How variables are read (the process environment; a map in tests).
type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Its configuration, one key: flag > its variable > its file.
struct Layers<'a> {
    file: &'a FileValues,
    file_shown: String,
    env: Lookup<'a>,
}

impl Layers<'_> {
    /// The variable, else the file's value of viper key `key`.
    fn env_or_file(&self, key: &str) -> Option<Sourced> {
        let name = env_name(key);
        if let Some(value) = (self.env)(&name).filter(|v| !v.is_empty()) {
            return Some(Sourced {
                value,
                source: format!("environment {name}"),
            });
        }
        self.file
            .get(&key.to_lowercase())
            .filter(|v| !v.is_empty())
            .map(|value| Sourced {
                value: value.clone(),
                source: format!("file {} key {key}", self.file_shown),
            })
    }

    /// `flag` (its command line) over [`Layers::env_or_file`].
    fn get(&self, flag: &Option<String>, long: &str, key: &str) -> Option<Sourced> {
        match flag.as_ref().filter(|v| !v.is_empty()) {
            Some(value) => Some(Sourced {
                value: value.clone(),
                source: format!("flag --{long}"),
            }),
            None => self.env_or_file(key),
        }
    }
}

fn truthy(value: &str, what: &str) -> Result<bool, ConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "t" => Ok(true),
        "false" | "0" | "f" => Ok(false),
        other => Err(ConfigError::BadValue(format!(
            "{what} takes true or false, not '{other}'"
        ))),
    }
}

/// Applies terraform-backend-git's spellings to `config` (already resolved from gitstate's own
/// settings, its file and defaults; `given` says which of those settings were given) with the
/// precedence in the module's documentation.
pub fn apply(
    input: &TbgInput,
    settings: &dyn OwnSettings,
    config: &mut Config,
) -> Result<TbgConfig, ConfigError> {
    apply_with(input, settings, config, &env)
}

/// [`apply`] with variables read by `env`.
fn apply_with(
    input: &TbgInput,
    settings: &dyn OwnSettings,
    config: &mut Config,
    env: Lookup,
) -> Result<TbgConfig, ConfigError> {
    let file_path = if settings.given("config") {
        if let TbgFile::Path(path) = &input.file {
            return Err(ConfigError::BadValue(format!(
                "both --config {} (terraform-backend-git's file) and GITSTATE_CONFIG (gitstate's) are given; use one",
                path.display()
            )));
        }
        None
    } else {
        file_path(&input.file)
    };
    let file = match &file_path {
        Some(path) => read_file(path)?,
        None => FileValues::new(),
    };
    let shown = file_path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    for key in file.keys().filter(|k| !FILE_KEYS.contains(&k.as_str())) {
        tracing::warn!(file = %shown, %key, "terraform-backend-git's file sets a key gitstate does not read; it is ignored");
    }
    let layers = Layers {
        file: &file,
        file_shown: shown,
        env,
    };
    let flags = &input.flags;
    if input.standalone {
        // Its query addresses without `ref=` were on master: they stay there.
        config.query_default_ref = TBG_DEFAULT_REF.to_owned();
    }
    let mut out = TbgConfig {
        file: file_path.clone(),
        ..TbgConfig::default()
    };
    let gitstate_listen = settings.given("listen");
    let gitstate_repository = settings.given("repositories");
    let gitstate_ref = settings.given("git_ref");

    // Listen address: its flag over GITSTATE_LISTEN over its variable over the files.
    if let Some(address) = layers.get(&flags.address, "address", "address") {
        if flags.address.is_some() || !gitstate_listen {
            config.listen = address.value;
            out.sources.insert("listen".into(), address.source);
        }
    }

    // The repository, and its ref: master when the repository is its and no ref is given.
    let tbg_ref = layers.get(&flags.git_ref, "ref", "git.ref");
    let repository = layers.get(&flags.repository, "repository", "git.repository");
    match repository {
        Some(repository) if flags.repository.is_some() || !gitstate_repository => {
            let (git_ref, ref_source) = match (&tbg_ref, gitstate_ref) {
                (Some(r), false) => (r.value.clone(), format!("ref: {}", r.source)),
                (Some(r), true) if flags.git_ref.is_some() => {
                    (r.value.clone(), format!("ref: {}", r.source))
                }
                (_, true) => (
                    settings.git_ref().unwrap_or_default(),
                    "ref: --ref or GITSTATE_REF".into(),
                ),
                (None, false) => (
                    TBG_DEFAULT_REF.to_owned(),
                    format!("ref: its default {TBG_DEFAULT_REF}"),
                ),
            };
            config.repositories.clear();
            config.add_repository_flag(
                &format!("{DEFAULT_REPOSITORY}={}", repository.value),
                &git_ref,
            )?;
            if input.standalone {
                // Exactly this repository (no wildcard), for its query addresses.
                let url = gitstate_url::redact_in_text(&repository.value);
                match gitstate_url::AllowPattern::parse(&url) {
                    Ok(_) if url == repository.value => {
                        config.allow_with_credential.push(url);
                        out.sources.insert(
                            "allow_with_credential".into(),
                            format!("its standalone server's repository, {}", repository.source),
                        );
                    }
                    _ => {
                        tracing::warn!(repository = %url, "query addresses naming this repository are refused (it is not a URL an allow pattern can name exactly); use /state/default/PATH")
                    }
                }
            }
            out.sources.insert("repository".into(), repository.source);
            out.sources.insert("ref".into(), ref_source);
        }
        _ => {
            // gitstate's own repository: its ref applies where --ref would.
            if let Some(r) = tbg_ref.filter(|_| gitstate_repository && !gitstate_ref) {
                for repository in config.repositories.values_mut() {
                    repository.git_ref = r.value.clone();
                }
                out.sources
                    .insert("ref".into(), format!("ref: {}", r.source));
            }
        }
    }

    if let Some(state) = layers.get(&flags.state, "state", "git.state") {
        out.state = Some(state.value);
        out.sources.insert("state".into(), state.source);
    }
    if let Some(dir) = layers.get(&flags.dir, "dir", "git.dir") {
        out.dir = Some(dir.value);
        out.sources.insert("dir".into(), dir.source);
    }
    if let Some(tf) = layers.get(&flags.tf, "tf", "wrapper.tf.bin") {
        out.tf = Some(tf.value);
        out.sources.insert("tf".into(), tf.source);
    }
    let flag_bool = |set: bool| set.then(|| "true".to_owned());
    if let Some(amend) = layers.get(&flag_bool(flags.amend), "amend", "git.amend") {
        out.amend = truthy(&amend.value, &amend.source)?;
        out.sources.insert("amend".into(), amend.source);
    }
    if let Some(logs) = layers.get(&flag_bool(flags.access_logs), "access-logs", "accessLogs") {
        out.access_logs = truthy(&logs.value, &logs.source)?;
        out.sources.insert("access_logs".into(), logs.source);
    }

    apply_http(settings, config, &mut out, env)?;
    apply_aliases(settings, config, &mut out, env)?;
    check_sops(env)?;
    Ok(out)
}

/// Its endpoint's basic auth and HTTPS (`TF_BACKEND_GIT_HTTP_*`, `TF_BACKEND_GIT_HTTPS_*`).
fn apply_http(
    settings: &dyn OwnSettings,
    config: &mut Config,
    out: &mut TbgConfig,
    env: Lookup,
) -> Result<(), ConfigError> {
    let env = |name: &str| env(name).filter(|v| !v.is_empty());
    const USER: &str = "TF_BACKEND_GIT_HTTP_USERNAME";
    const PASSWORD: &str = "TF_BACKEND_GIT_HTTP_PASSWORD";
    match (env(USER), zeroize::Zeroizing::new(env(PASSWORD))) {
        (Some(user), password) if password.is_some() => {
            let password = password.as_deref().unwrap_or_default();
            let gitstate_mode = settings.auth_mode();
            let gitstate_mode = gitstate_mode.as_deref();
            match gitstate_mode {
                None | Some("team") => {}
                Some(other) => {
                    return Err(ConfigError::BadValue(format!(
                        "{USER} and {PASSWORD} ask for basic auth on the endpoint, but the auth mode is \"{other}\"; unset one of them"
                    )))
                }
            }
            if user.contains(':') {
                return Err(ConfigError::BadValue(format!(
                    "{USER} must not contain ':' (basic auth cannot carry it)"
                )));
            }
            config.auth.mode = AuthMode::Team;
            config
                .auth
                .users
                .push(format!("{user}:{}", crate::tokens::hash_of(password)));
            out.sources
                .insert("auth".into(), format!("environment {USER} and {PASSWORD}"));
        }
        (None, password) if password.is_some() => {
            return Err(ConfigError::BadValue(format!(
            "{PASSWORD} is set without {USER}; set both for basic auth on the endpoint, or neither"
        )))
        }
        (Some(_), _) => {
            return Err(ConfigError::BadValue(format!(
            "{USER} is set without {PASSWORD}; set both for basic auth on the endpoint, or neither"
        )))
        }
        _ => {}
    }
    const CERT: &str = "TF_BACKEND_GIT_HTTPS_CERT";
    const KEY: &str = "TF_BACKEND_GIT_HTTPS_KEY";
    if !settings.given("tls_cert") {
        match (env(CERT), env(KEY)) {
            (Some(cert), Some(key)) => {
                let client_ca_file = config.tls.as_ref().and_then(|t| t.client_ca_file.clone());
                config.tls = Some(TlsConfig {
                    cert_file: cert.into(),
                    key_file: key.into(),
                    client_ca_file,
                });
                out.sources
                    .insert("tls".into(), format!("environment {CERT} and {KEY}"));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(ConfigError::BadValue(format!(
                    "HTTPS needs both {CERT} and {KEY}; one of them is not set"
                )))
            }
            (None, None) => {}
        }
    }
    Ok(())
}

/// Its variables that are aliases of gitstate's settings (the `tbg` column of
/// [`crate::settings::SETTINGS`]: its sops master keys `TF_BACKEND_HTTP_SOPS_*`, its encryption
/// provider), each under gitstate's own flag and variable.
fn apply_aliases(
    settings: &dyn OwnSettings,
    config: &mut Config,
    out: &mut TbgConfig,
    env: Lookup,
) -> Result<(), ConfigError> {
    for (id, name) in settings.aliases() {
        let Some(raw) = env(name).filter(|v| v.split(',').any(|item| !item.trim().is_empty()))
        else {
            continue;
        };
        if !settings.given(id) {
            settings.apply_alias(id, &raw, name, config)?;
            out.sources.insert(id.into(), format!("environment {name}"));
        }
    }
    Ok(())
}

/// Its sops settings gitstate cannot honour stop the start: a Shamir threshold above 1.
fn check_sops(env: Lookup) -> Result<(), ConfigError> {
    const SHAMIR: &str = "TF_BACKEND_HTTP_SOPS_SHAMIR_THRESHOLD";
    let Some(threshold) = env(SHAMIR).filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    match threshold.trim().parse::<u32>() {
        Ok(0 | 1) => Ok(()),
        Ok(n) => Err(ConfigError::BadValue(format!(
            "{SHAMIR}={n} asks for {n} key groups to open a state, but gitstate wraps each data key for every configured key in one group (any one key opens it); unset it, or set it to 1"
        ))),
        Err(_) => Err(ConfigError::BadValue(format!(
            "{SHAMIR} must be a whole number, not '{threshold}'"
        ))),
    }
}

/// Variables the process should set for the libraries and programs it uses, translated from
/// terraform-backend-git's: `SSH_PRIVATE_KEY` (a key file's path) and `StrictHostKeyChecking=no`
/// become `GIT_SSH_COMMAND` (`ssh -i PATH -o StrictHostKeyChecking=no
/// -o UserKnownHostsFile=/dev/null`, when neither `GIT_SSH_COMMAND` nor `GIT_SSH` is set; the ssh
/// agent of `SSH_AUTH_SOCK` is still asked first, as it did), and
/// `TF_BACKEND_HTTP_SOPS_AWS_PROFILE` becomes `AWS_PROFILE` (when that is not set).
pub fn process_environment() -> Vec<(&'static str, String)> {
    let mut vars = Vec::new();
    if let Some(command) = ssh_command(&env) {
        vars.push(("GIT_SSH_COMMAND", command));
    }
    if let Some(profile) = env("TF_BACKEND_HTTP_SOPS_AWS_PROFILE") {
        if env("AWS_PROFILE").is_none() {
            vars.push(("AWS_PROFILE", profile));
        }
    }
    vars
}

/// The ssh command for its `SSH_PRIVATE_KEY` and `StrictHostKeyChecking=no`, if either is set
/// and no ssh command is configured.
fn ssh_command(env: Lookup) -> Option<String> {
    if env("GIT_SSH_COMMAND").is_some() || env("GIT_SSH").is_some() {
        return None;
    }
    let key = env("SSH_PRIVATE_KEY").filter(|k| !k.is_empty());
    let unchecked = env("StrictHostKeyChecking").is_some_and(|v| v == "no");
    if key.is_none() && !unchecked {
        return None;
    }
    let mut command = String::from("ssh");
    if let Some(key) = key {
        command.push_str(&format!(" -i {}", shell_quoted(&key)));
    }
    if unchecked {
        command.push_str(" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null");
    }
    Some(command)
}

/// `s` as one POSIX shell word.
fn shell_quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Settings;

    #[test]
    fn reads_both_spellings_of_its_file() {
        let values = parse_file(
            "git.repository = \"https://h/a.git\"\ngit.state = \"s.json\"\naddress = \"127.0.0.1:7000\"\naccessLogs = true\n",
        )
        .unwrap();
        assert_eq!(values["git.repository"], "https://h/a.git");
        assert_eq!(values["git.state"], "s.json");
        assert_eq!(values["address"], "127.0.0.1:7000");
        assert_eq!(values["accesslogs"], "true");
        let values =
            parse_file("git {\n  repository = \"https://h/b.git\"\n  ref = \"states\"\n}\n")
                .unwrap();
        assert_eq!(values["git.repository"], "https://h/b.git");
        assert_eq!(values["git.ref"], "states");
        // A value with a dot and an `=` is left alone.
        let values = parse_file("git.state = \"a.b=c.json\"\n").unwrap();
        assert_eq!(values["git.state"], "a.b=c.json");
        assert!(parse_file("git.repository = [1, 2]\n").is_err());
    }

    #[test]
    fn its_variables_follow_vipers_names() {
        assert_eq!(env_name("git.repository"), "TF_BACKEND_GIT_GIT_REPOSITORY");
        assert_eq!(env_name("accessLogs"), "TF_BACKEND_GIT_ACCESSLOGS");
        assert_eq!(env_name("wrapper.tf.bin"), "TF_BACKEND_GIT_WRAPPER_TF_BIN");
    }

    /// `apply` with `vars` as the environment and `file_text` as its file.
    fn applied(
        vars: &[(&str, &str)],
        file_text: Option<&str>,
        flags: TbgFlags,
        settings: Settings,
    ) -> Result<(Config, TbgConfig), ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let file = match file_text {
            Some(text) => {
                let path = dir.path().join(FILE_NAME);
                std::fs::write(&path, text).unwrap();
                TbgFile::Path(path)
            }
            None => TbgFile::Off,
        };
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |name: &str| vars.get(name).cloned();
        let input = TbgInput {
            file,
            flags,
            standalone: false,
        };
        let mut config = Config::default();
        let tbg = apply_with(&input, &settings, &mut config, &lookup)?;
        Ok((config, tbg))
    }

    const FILE: &str = "git.repository = \"https://file.example/a.git\"\ngit.ref = \"states\"\ngit.state = \"file.tfstate\"\naddress = \"127.0.0.1:7001\"\naccessLogs = true\n";

    #[test]
    fn its_file_alone_configures_repository_ref_state_address() {
        let (config, tbg) =
            applied(&[], Some(FILE), TbgFlags::default(), Settings::default()).unwrap();
        let default = &config.repositories[DEFAULT_REPOSITORY];
        assert_eq!(default.url, "https://file.example/a.git");
        assert_eq!(default.git_ref, "states");
        assert_eq!(config.listen, "127.0.0.1:7001");
        assert_eq!(tbg.state.as_deref(), Some("file.tfstate"));
        assert!(tbg.access_logs);
        assert!(
            tbg.sources["repository"].contains("key git.repository"),
            "{tbg:?}"
        );
    }

    #[test]
    fn its_variables_win_over_its_file_and_its_flags_over_both() {
        let vars = [
            ("TF_BACKEND_GIT_GIT_REPOSITORY", "https://env.example/b.git"),
            ("TF_BACKEND_GIT_GIT_STATE", "env.tfstate"),
            ("TF_BACKEND_GIT_ADDRESS", "127.0.0.1:7002"),
            ("TF_BACKEND_GIT_ACCESSLOGS", "false"),
        ];
        let (config, tbg) =
            applied(&vars, Some(FILE), TbgFlags::default(), Settings::default()).unwrap();
        let default = &config.repositories[DEFAULT_REPOSITORY];
        assert_eq!(default.url, "https://env.example/b.git");
        assert_eq!(default.git_ref, "states", "the file's ref still applies");
        assert_eq!(config.listen, "127.0.0.1:7002");
        assert_eq!(tbg.state.as_deref(), Some("env.tfstate"));
        assert!(!tbg.access_logs);
        assert_eq!(
            tbg.sources["repository"],
            "environment TF_BACKEND_GIT_GIT_REPOSITORY"
        );

        let flags = TbgFlags {
            repository: Some("https://flag.example/c.git".into()),
            git_ref: Some("flagref".into()),
            address: Some("127.0.0.1:7003".into()),
            ..TbgFlags::default()
        };
        let (config, tbg) = applied(&vars, Some(FILE), flags, Settings::default()).unwrap();
        let default = &config.repositories[DEFAULT_REPOSITORY];
        assert_eq!(default.url, "https://flag.example/c.git");
        assert_eq!(default.git_ref, "flagref");
        assert_eq!(config.listen, "127.0.0.1:7003");
        assert_eq!(tbg.sources["listen"], "flag --address");
    }

    #[test]
    fn its_repository_without_a_ref_stays_on_master() {
        let vars = [("TF_BACKEND_GIT_GIT_REPOSITORY", "https://env.example/b.git")];
        let (config, _) = applied(&vars, None, TbgFlags::default(), Settings::default()).unwrap();
        assert_eq!(
            config.repositories[DEFAULT_REPOSITORY].git_ref,
            TBG_DEFAULT_REF
        );
        // gitstate's own --ref applies to its repository too.
        let given = Settings {
            git_ref: Some("trunk".into()),
            ..Settings::default()
        };
        let (config, _) = applied(&vars, None, TbgFlags::default(), given).unwrap();
        assert_eq!(config.repositories[DEFAULT_REPOSITORY].git_ref, "trunk");
    }

    #[test]
    fn gitstates_own_settings_come_before_its_variables_and_its_file_is_one_or_the_other() {
        let vars = [
            ("TF_BACKEND_GIT_ADDRESS", "127.0.0.1:7002"),
            ("TF_BACKEND_GIT_GIT_REPOSITORY", "https://env.example/b.git"),
        ];
        let given = Settings {
            listen: Some("127.0.0.1:7009".into()),
            repositories: vec!["default=https://own.example/a.git".into()],
            ..Settings::default()
        };
        let (config, tbg) = applied(&vars, None, TbgFlags::default(), given).unwrap();
        assert_eq!(config.listen, Config::default().listen);
        assert!(config.repositories.is_empty());
        assert!(!tbg.sources.contains_key("repository"));
        let given = Settings {
            config: Some("gitstate.hcl".into()),
            ..Settings::default()
        };
        // Its --config and GITSTATE_CONFIG together: one file at a time.
        let err = applied(&[], Some(FILE), TbgFlags::default(), given).unwrap_err();
        assert!(err.to_string().contains("use one"), "{err}");
    }

    #[test]
    fn its_basic_auth_is_a_team_user_and_needs_both_halves() {
        let vars = [
            ("TF_BACKEND_GIT_HTTP_USERNAME", "bob"),
            ("TF_BACKEND_GIT_HTTP_PASSWORD", "hunter2"),
        ];
        let (config, _) = applied(&vars, None, TbgFlags::default(), Settings::default()).unwrap();
        assert_eq!(config.auth.mode, AuthMode::Team);
        assert_eq!(
            config.auth.users,
            vec![format!("bob:{}", crate::tokens::hash_of("hunter2"))]
        );
        let err = applied(&vars[1..], None, TbgFlags::default(), Settings::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("without TF_BACKEND_GIT_HTTP_USERNAME"),
            "{err}"
        );
        assert!(!err.to_string().contains("hunter2"));
        let given = Settings {
            auth_mode: Some("passthrough".into()),
            ..Settings::default()
        };
        let err = applied(&vars, None, TbgFlags::default(), given).unwrap_err();
        assert!(err.to_string().contains("\"passthrough\""), "{err}");
    }

    #[test]
    fn its_sops_keys_map_and_unsupported_ones_stop_the_start() {
        let vars = [
            (
                "TF_BACKEND_HTTP_SOPS_AWS_KMS_ARNS",
                "arn:aws:kms:eu-west-1:1:key/a,arn:aws:kms:eu-west-1:1:key/b",
            ),
            (
                "TF_BACKEND_HTTP_SOPS_AWS_KMS_CONTEXT",
                "team=payments,env=prod",
            ),
            ("TF_BACKEND_HTTP_SOPS_AGE_RECIPIENTS", "age1xyz"),
            ("TF_BACKEND_HTTP_SOPS_SHAMIR_THRESHOLD", "1"),
        ];
        let (config, tbg) = applied(&vars, None, TbgFlags::default(), Settings::default()).unwrap();
        let e = &config.encryption;
        assert_eq!(e.kms_arns.len(), 2);
        assert_eq!(e.kms_context["team"], "payments");
        assert_eq!(e.age_recipients, vec!["age1xyz".to_owned()]);
        assert!(tbg.sources["kms_arns"].contains("TF_BACKEND_HTTP_SOPS_AWS_KMS_ARNS"));
        for (name, value, setting) in [
            ("TF_BACKEND_HTTP_SOPS_PGP_FP", "FP1,FP2", "pgp_fingerprints"),
            (
                "TF_BACKEND_HTTP_SOPS_GCP_KMS_KEYS",
                "projects/p/locations/l/keyRings/r/cryptoKeys/k",
                "gcp_kms_keys",
            ),
            (
                "TF_BACKEND_HTTP_SOPS_HC_VAULT_URIS",
                "https://vault:8200/v1/transit/keys/k",
                "vault_uris",
            ),
        ] {
            let (config, tbg) = applied(
                &[(name, value)],
                None,
                TbgFlags::default(),
                Settings::default(),
            )
            .expect("its key variables are taken");
            let e = &config.encryption;
            let got = match setting {
                "pgp_fingerprints" => &e.pgp_fingerprints,
                "gcp_kms_keys" => &e.gcp_kms_keys,
                _ => &e.vault_uris,
            };
            assert_eq!(got.join(","), value, "{name}");
            assert!(tbg.sources[setting].contains(name), "{name}");
        }
        let err = applied(
            &[("TF_BACKEND_HTTP_SOPS_SHAMIR_THRESHOLD", "2")],
            None,
            TbgFlags::default(),
            Settings::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("SHAMIR_THRESHOLD=2"), "{err}");
    }

    #[test]
    fn its_ssh_key_and_host_key_choice_become_an_ssh_command() {
        let lookup = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let key = lookup(&[("SSH_PRIVATE_KEY", "/k/id rsa")]);
        assert_eq!(ssh_command(&key).as_deref(), Some("ssh -i '/k/id rsa'"));
        let both = lookup(&[
            ("SSH_PRIVATE_KEY", "/k/id"),
            ("StrictHostKeyChecking", "no"),
        ]);
        assert_eq!(
            ssh_command(&both).as_deref(),
            Some("ssh -i '/k/id' -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null")
        );
        let own = lookup(&[("SSH_PRIVATE_KEY", "/k/id"), ("GIT_SSH_COMMAND", "ssh -v")]);
        assert_eq!(ssh_command(&own), None);
        assert_eq!(ssh_command(&lookup(&[])), None);
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quoted("/k/id rsa"), "'/k/id rsa'");
        assert_eq!(shell_quoted("a'b"), r"'a'\''b'");
    }
}
