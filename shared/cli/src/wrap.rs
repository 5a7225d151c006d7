//! `gitstate wrap`: run Terraform (or OpenTofu) with the http backend served in-process for the
//! duration of one command.
//!
//! 1. The settings resolve exactly as for `serve` (flags > `GITSTATE_*` > `gitstate.hcl` >
//!    defaults); the address must be free, or nothing else happens.
//! 2. The same router and registry as `serve` listen on that address, protected by a token made for
//!    this run: the server admits only callers presenting it (team mode with that one token's
//!    hash), and the child gets it in `TF_HTTP_PASSWORD` (read by every Terraform from 1.0 and by
//!    OpenTofu). The backend configuration written to disk holds no credential, so it is the same
//!    on every run and Terraform never asks to re-initialize.
//! 3. `gitstate_backend_override.tf.json` (with the `backend "http"` block) is written in the
//!    directory Terraform reads (the current one, or `-chdir=DIR`), the program runs, and the file
//!    is removed when it ends, whatever the outcome.
//! 4. While the program runs the wrapper survives SIGINT/SIGQUIT (the terminal sends them to the
//!    whole process group, so Terraform gets them itself and stops gracefully) and forwards
//!    SIGTERM and SIGHUP. Afterwards the server finishes its requests in flight and the wrapper
//!    exits with the program's exit code (128 + N when signal N killed it).

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use gitstate_app::config::{AuthConfig, DEFAULT_REPOSITORY};
use gitstate_app::{AuthMode, Config, Settings};
use gitstate_core::StatePath;
use gitstate_url::redact_in_text;
use tokio::signal::unix::{signal, SignalKind};

/// Name of the generated backend file. An `_override` file, so it also replaces a `backend` block
/// the configuration may have, and Terraform's usual `.gitignore` already ignores it.
pub const OVERRIDE_FILE: &str = "gitstate_backend_override.tf.json";
/// The start of the `//` comment that marks the file as gitstate's.
const MARKER: &str = "Written by gitstate wrap";

/// Exit code for the wrapper's own failures (as `env`, `timeout` and `docker run` do), so that it
/// differs from Terraform's 1.
pub const EXIT_WRAPPER: u8 = 125;
/// The program exists but could not be started.
pub const EXIT_CANNOT_RUN: u8 = 126;
/// The program was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// How long the server may take to finish requests in flight once the program has exited.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// `gitstate wrap` arguments.
#[derive(Args, Debug)]
pub struct WrapArgs {
    #[command(flatten)]
    pub settings: Settings,
    /// Path of the state file in the repository, e.g. envs/prod.tfstate.
    #[arg(long, value_name = "PATH", env = "GITSTATE_STATE")]
    pub state: String,
    /// Log format of the backend's own messages: text or json (RUST_LOG sets the level; default
    /// warn, so Terraform's output stays readable).
    #[arg(long, env = "GITSTATE_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
    /// The program to run and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    pub command: Vec<String>,
}

/// A failure of the wrapper itself: one sentence, and the exit code.
#[derive(Debug)]
pub struct WrapError {
    pub message: String,
    pub code: u8,
}

impl WrapError {
    fn new(message: impl Into<String>) -> Self {
        WrapError {
            message: message.into(),
            code: EXIT_WRAPPER,
        }
    }
}

/// `--repository URL` means `default=URL`; `NAME=URL` (as for `serve`) is accepted too.
fn normalize_repository(spec: &str) -> String {
    if spec.is_empty() {
        return String::new();
    }
    match spec.split_once('=') {
        Some((name, _))
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) =>
        {
            spec.to_owned()
        }
        _ => format!("{DEFAULT_REPOSITORY}={spec}"),
    }
}

/// The repository the state lives in: the only one configured, or the one named "default".
fn chosen_repository(config: &Config) -> Result<String, WrapError> {
    if config.repositories.is_empty() || config.repositories.contains_key(DEFAULT_REPOSITORY) {
        return Ok(DEFAULT_REPOSITORY.to_owned());
    }
    if config.repositories.len() == 1 {
        return Ok(config
            .repositories
            .keys()
            .next()
            .cloned()
            .unwrap_or_default());
    }
    Err(WrapError::new(format!(
        "the configuration names several repositories ({}) and none is called \"default\"; choose one with --repository URL",
        config.repositories.keys().cloned().collect::<Vec<_>>().join(", ")
    )))
}

/// The directory Terraform reads its configuration from: `-chdir=DIR` among the global options
/// (before the subcommand), else the current directory.
pub fn configuration_dir(command: &[String]) -> PathBuf {
    for arg in command.iter().skip(1) {
        if let Some(dir) = arg
            .strip_prefix("-chdir=")
            .or_else(|| arg.strip_prefix("--chdir="))
        {
            return PathBuf::from(dir);
        }
        if !arg.starts_with('-') {
            break;
        }
    }
    PathBuf::from(".")
}

/// The backend file's content: addresses only, no credential, identical on every run with the
/// same settings (Terraform hashes the backend block at `init`).
fn override_json(state_url: &str) -> String {
    let doc = serde_json::json!({
        "//": format!(
            "{MARKER} (pid {}) for one command; it removes this file when the command ends. Do not edit or commit it.",
            std::process::id()
        ),
        "terraform": {
            "backend": {
                "http": {
                    "address": state_url,
                    "lock_address": state_url,
                    "unlock_address": state_url,
                    "lock_method": "LOCK",
                    "unlock_method": "UNLOCK",
                }
            }
        }
    });
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}

/// The pid recorded in a file gitstate wrote, or None when the file is not gitstate's.
fn marker_pid(text: &str) -> Option<Option<i32>> {
    let doc: serde_json::Value = serde_json::from_str(text).ok()?;
    let comment = doc.get("//")?.as_str()?;
    let rest = comment.strip_prefix(MARKER)?;
    let pid = rest
        .strip_prefix(" (pid ")
        .and_then(|r| r.split_once(')'))
        .and_then(|(n, _)| n.parse().ok());
    Some(pid)
}

/// The generated file; removed on drop (normal end, error, panic).
struct BackendFile {
    path: PathBuf,
}

impl BackendFile {
    /// Writes `content` to `dir/OVERRIDE_FILE`. An existing file is replaced only when gitstate
    /// wrote it and the wrap that wrote it is gone (killed before it could clean up).
    fn create(dir: &Path, content: &str) -> Result<Self, WrapError> {
        let path = dir.join(OVERRIDE_FILE);
        let shown = path.display().to_string();
        for _ in 0..2 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    let file_guard = BackendFile { path: path.clone() };
                    file.write_all(content.as_bytes())
                        .and_then(|()| file.sync_all())
                        .map_err(|e| WrapError::new(format!("cannot write {shown}: {e}")))?;
                    return Ok(file_guard);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    let existing = std::fs::read_to_string(&path).unwrap_or_default();
                    match marker_pid(&existing) {
                        None => {
                            return Err(WrapError::new(format!(
                                "{shown} already exists and gitstate did not write it; move it away (gitstate wrap writes its backend configuration there)"
                            )))
                        }
                        Some(Some(pid)) if pid != std::process::id() as i32 && pid > 0 && gitstate_core::process::alive(pid as u32) => {
                            return Err(WrapError::new(format!(
                                "{shown} belongs to another gitstate wrap that is still running (pid {pid}); wait for it to end, or delete the file if no gitstate wrap runs there"
                            )))
                        }
                        Some(_) => {
                            eprintln!("gitstate wrap: replacing {shown}, left behind by a gitstate wrap that did not end normally");
                            std::fs::remove_file(&path).map_err(|e| {
                                WrapError::new(format!("cannot replace {shown}: {e}"))
                            })?;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(WrapError::new(format!(
                        "cannot write {shown}: the directory {} does not exist",
                        dir.display()
                    )))
                }
                Err(e) => return Err(WrapError::new(format!("cannot write {shown}: {e}"))),
            }
        }
        Err(WrapError::new(format!(
            "cannot write {shown}: another process keeps creating it"
        )))
    }
}

impl Drop for BackendFile {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => eprintln!(
                "gitstate wrap: could not remove {}: {e}; delete it by hand",
                self.path.display()
            ),
        }
    }
}

/// A token for this run: 32 random bytes from the kernel, hex-encoded.
fn run_token() -> Result<zeroize::Zeroizing<String>, WrapError> {
    let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: writes at most the remaining length into the buffer.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(WrapError::new(format!(
                "cannot make a token for this run: {e}"
            )));
        }
        filled += n as usize;
    }
    let mut token = zeroize::Zeroizing::new(String::with_capacity(64));
    for b in bytes.iter() {
        use std::fmt::Write;
        let _ = write!(token, "{b:02x}");
    }
    Ok(token)
}

/// The host:port Terraform should use for `local` (a wildcard listen address means loopback).
fn client_authority(local: std::net::SocketAddr) -> String {
    let ip = match local.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        }
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        ip => ip,
    };
    std::net::SocketAddr::new(ip, local.port()).to_string()
}

fn bind(listen: &str) -> Result<std::net::TcpListener, WrapError> {
    match std::net::TcpListener::bind(listen) {
        Ok(listener) => Ok(listener),
        Err(e) if e.kind() == ErrorKind::AddrInUse => Err(WrapError::new(format!(
            "{listen} is already in use (another gitstate wrap or serve?); give this project its own address with --listen or GITSTATE_LISTEN, and keep using it, since Terraform records the address at init"
        ))),
        Err(e) => Err(WrapError::new(format!("cannot listen on {listen}: {e}"))),
    }
}

/// The exit code that reports `status` to our caller.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        _ => EXIT_WRAPPER,
    }
}

fn forward(pid: Option<u32>, sig: libc::c_int) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()).filter(|p| *p > 0) {
        // SAFETY: sends a signal to our own child, whose pid is not reaped yet.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// Runs `gitstate wrap`; returns the exit code. The program runs with `umask` (the caller's
/// umask; gitstate's own files use 077).
pub async fn run(mut args: WrapArgs, umask: libc::mode_t) -> Result<u8, WrapError> {
    if args.command.is_empty() {
        return Err(WrapError::new(
            "no program given; usage: gitstate wrap --state PATH -- terraform init",
        ));
    }
    args.settings.repositories = args
        .settings
        .repositories
        .iter()
        .map(|spec| normalize_repository(spec))
        .collect();
    let mut config = args
        .settings
        .resolve()
        .map_err(|e| WrapError::new(e.to_string()))?;
    let state = StatePath::parse(&args.state)
        .map_err(|e| WrapError::new(format!("--state {}: {e}", args.state)))?;
    let repository = chosen_repository(&config)?;

    // Only Terraform started by this wrapper may use the backend: a per-run token, checked by the
    // registry exactly as team mode checks team tokens. Git itself uses the server credential.
    let token = run_token()?;
    config.auth = AuthConfig {
        mode: AuthMode::Team,
        token_hashes: vec![gitstate_app::tokens::hash_of(&token)],
        users: Vec::new(),
        tokens: Vec::new(),
        certificates: Vec::new(),
        oidc: Vec::new(),
        ..AuthConfig::default()
    };

    // The address first: a busy port must stop everything before any file is written.
    let (listener, local) = listen(&config.listen)?;
    // Encryption at rest applies in wrap mode too (and an enforced one without a key stops here).
    let deployment = gitstate_app::Deployment::build(&config, gitstate_app::Runtime::Wrap)
        .await
        .map_err(|e| WrapError::new(e.to_string()))?;
    let app = gitstate_http::router(deployment.app_state(
        gitstate_http::RequestGuard::for_listener(local, &config.allowed_hosts),
    ));
    let state_url = format!(
        "http://{}/state/{repository}/{}",
        client_authority(local),
        state.as_str()
    );
    // Handlers before the file exists: from here on these signals no longer end the wrapper
    // (so it can always remove the file); a signal that arrives before the program starts stops
    // the run instead.
    let mut signals = Signals::install()?;
    let backend_file = BackendFile::create(
        &configuration_dir(&args.command),
        &override_json(&state_url),
    )?;
    let program = program_name(&args.command[0]);
    eprintln!(
        "gitstate wrap: {state_url} serves {} of {} to {program}",
        state.as_str(),
        shown_repository(&config, &repository)
    );
    let server = Served::start(listener, app);

    let mut command = program_command(&args.command, &token, umask);
    if let Some(sig) = signals.pending() {
        drop(backend_file);
        server.stop(&mut signals).await;
        eprintln!("gitstate wrap: stopped by signal {sig} before {program} started");
        return Ok((128 + sig) as u8);
    }
    let spawned = command.spawn();
    drop(token);
    let status = match spawned {
        Ok(child) => signals.supervise(child).await,
        Err(e) => {
            drop(backend_file);
            server.stop(&mut signals).await;
            return Err(WrapError {
                message: format!("cannot run {}: {e}", args.command[0]),
                code: if e.kind() == ErrorKind::NotFound {
                    EXIT_NOT_FOUND
                } else {
                    EXIT_CANNOT_RUN
                },
            });
        }
    };
    drop(backend_file);
    server.stop(&mut signals).await;
    status
        .map(exit_code)
        .map_err(|e| WrapError::new(format!("lost track of {}: {e}", args.command[0])))
}

/// Binds `address` (a busy port is an error naming it) for tokio.
fn listen(address: &str) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), WrapError> {
    let listener = bind(address)?;
    let local = listener
        .local_addr()
        .map_err(|e| WrapError::new(format!("cannot read the listening address: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| WrapError::new(format!("cannot listen on {local}: {e}")))?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| WrapError::new(format!("cannot listen on {local}: {e}")))?;
    Ok((listener, local))
}

/// The repository as the start-up line shows it (no credential).
fn shown_repository(config: &Config, repository: &str) -> String {
    config
        .repositories
        .get(repository)
        .map(|r| format!("{} ({})", redact_in_text(&r.url), r.git_ref))
        .unwrap_or_else(|| config.data_dir.join("default.git").display().to_string())
}

/// The program's file name, for messages.
fn program_name(program: &str) -> String {
    Path::new(program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.to_owned())
}

/// The wrapped program: its arguments, the backend's credentials in its environment (never on
/// argv), and its caller's `umask`.
fn program_command(argv: &[String], token: &str, umask: libc::mode_t) -> tokio::process::Command {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "terraform".to_owned());
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env("TF_HTTP_USERNAME", user)
        .env("TF_HTTP_PASSWORD", token);
    // SAFETY: between fork and exec the child only resets its umask (async-signal-safe), so
    // Terraform creates its files as its caller expects, not with gitstate's 077.
    unsafe {
        command.pre_exec(move || {
            libc::umask(umask);
            Ok(())
        });
    }
    command
}

/// The signals the wrapper handles while the program runs.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals, WrapError> {
        let handle = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| WrapError::new(format!("cannot handle {name}: {e}")))
        };
        Ok(Signals {
            interrupt: handle(SignalKind::interrupt(), "SIGINT")?,
            quit: handle(SignalKind::quit(), "SIGQUIT")?,
            terminate: handle(SignalKind::terminate(), "SIGTERM")?,
            hangup: handle(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// A signal that arrived already (before the program started), if any.
    fn pending(&mut self) -> Option<i32> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        for (signal, number) in [
            (&mut self.interrupt, libc::SIGINT),
            (&mut self.terminate, libc::SIGTERM),
            (&mut self.hangup, libc::SIGHUP),
            (&mut self.quit, libc::SIGQUIT),
        ] {
            if signal.poll_recv(&mut cx).is_ready() {
                return Some(number);
            }
        }
        None
    }

    /// Waits for `child`, forwarding SIGTERM and SIGHUP to it.
    async fn supervise(&mut self, mut child: tokio::process::Child) -> std::io::Result<ExitStatus> {
        let pid = child.id();
        loop {
            tokio::select! {
                status = child.wait() => return status,
                // The terminal delivers these to the whole foreground process group: the
                // program has them already, and a second SIGINT would make Terraform abort
                // without releasing its lock. Keep running until it has finished.
                _ = self.interrupt.recv() => {}
                _ = self.quit.recv() => {}
                _ = self.terminate.recv() => forward(pid, libc::SIGTERM),
                _ = self.hangup.recv() => forward(pid, libc::SIGHUP),
            }
        }
    }
}

/// The backend server of one run.
struct Served {
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    fn start(listener: tokio::net::TcpListener, app: axum::Router) -> Served {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
        });
        Served { stop, server }
    }

    /// Stops accepting, and lets requests in flight finish (at most [`SHUTDOWN_GRACE`], or
    /// until another SIGINT).
    async fn stop(self, signals: &mut Signals) {
        let _ = self.stop.send(());
        tokio::select! {
            finished = tokio::time::timeout(SHUTDOWN_GRACE, self.server) => {
                match finished {
                    Ok(Ok(Ok(()))) => {}
                    Ok(Ok(Err(e))) => eprintln!("gitstate wrap: the backend failed: {e}"),
                    Ok(Err(e)) => eprintln!("gitstate wrap: the backend failed: {e}"),
                    Err(_) => eprintln!("gitstate wrap: requests were still in flight after {SHUTDOWN_GRACE:?}; stopping anyway"),
                }
            }
            _ = signals.interrupt.recv() => eprintln!("gitstate wrap: interrupted while finishing requests in flight; stopping now"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finds_chdir() {
        assert_eq!(
            configuration_dir(&strings(&["terraform", "-chdir=envs/prod", "plan"])),
            PathBuf::from("envs/prod")
        );
        assert_eq!(
            configuration_dir(&strings(&["terraform", "plan", "-chdir=x"])),
            PathBuf::from(".")
        );
        assert_eq!(
            configuration_dir(&strings(&["tofu", "init"])),
            PathBuf::from(".")
        );
    }

    #[test]
    fn repository_forms() {
        assert_eq!(
            normalize_repository("https://git.example.com/a/b.git"),
            "default=https://git.example.com/a/b.git"
        );
        assert_eq!(
            normalize_repository("https://h/x?y=z"),
            "default=https://h/x?y=z"
        );
        assert_eq!(
            normalize_repository("lab=git://h/x.git"),
            "lab=git://h/x.git"
        );
        assert_eq!(normalize_repository("/srv/s.git"), "default=/srv/s.git");
    }

    #[test]
    fn marker_round_trip() {
        let text = override_json("http://127.0.0.1:6061/state/default/p.tfstate");
        assert_eq!(marker_pid(&text), Some(Some(std::process::id() as i32)));
        assert_eq!(marker_pid("{\"terraform\":{}}"), None);
        assert_eq!(marker_pid("not json"), None);
        assert!(!text.contains("password"));
    }

    #[test]
    fn exit_codes() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGINT)), 130);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }

    #[test]
    fn wildcard_listen_means_loopback() {
        assert_eq!(
            client_authority("0.0.0.0:6061".parse().unwrap()),
            "127.0.0.1:6061"
        );
        assert_eq!(client_authority("[::]:7000".parse().unwrap()), "[::1]:7000");
        assert_eq!(
            client_authority("127.0.0.1:6061".parse().unwrap()),
            "127.0.0.1:6061"
        );
    }
}
