//! The `gitstate` command: `gitstate serve` runs the Terraform http backend on a git repository
//! (the embedded default `./.gitstate/default.git` when none is configured); `gitstate wrap` runs
//! one Terraform command with that backend served in-process (see [`wrap`]).

mod admin;
mod catalog;
mod client_cert;
mod compat;
mod config_show;
mod logfields;
mod migrate;
mod output;
mod pidfile;
mod tls;
mod wrap;

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use gitstate_app::{Deployment, Runtime, Settings};
use gitstate_core::StoreRegistry;
use gitstate_http::{router, RequestGuard};

/// Terraform/OpenTofu remote state in git, with locking.
#[derive(Parser, Debug)]
#[command(name = "gitstate", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the http backend.
    ///
    /// With no repository configured, states go to the embedded bare repository
    /// ./.gitstate/default.git, named "default":
    ///
    ///   gitstate serve
    ///   # terraform { backend "http" { address = "http://127.0.0.1:6061/state/default/prod.tfstate"
    ///   #   lock_address = "…same…"  unlock_address = "…same…" } }
    ///
    /// A remote repository (credentials from GIT_USERNAME + GIT_PASSWORD, or GITHUB_TOKEN):
    ///
    ///   gitstate serve --repository default=https://github.com/acme/tf-state.git
    #[command(verbatim_doc_comment)]
    Serve(ServeArgs),
    /// Run terraform (or tofu) with the backend served in-process for that one command.
    ///
    /// gitstate listens on a fixed loopback address (--listen, default 127.0.0.1:6061), writes
    /// gitstate_backend_override.tf.json (a backend "http" block for --state) in the directory
    /// Terraform reads (the current one, or -chdir=DIR), runs the program, removes the file and
    /// exits with the program's exit code. It works with a `backend "http" {}` block and with no
    /// backend block at all. Only the program it starts can use the backend: it gets a token made
    /// for this run in TF_HTTP_USERNAME/TF_HTTP_PASSWORD, and the file holds no credential, so it
    /// is the same on every run and `terraform init` is needed only once. Keep the same --listen
    /// address for a project: Terraform records it at init.
    ///
    ///   export GIT_USERNAME=me GIT_PASSWORD=token          # or GITHUB_TOKEN
    ///   gitstate wrap --repository https://git.example.com/acme/tf-state.git \
    ///       --state envs/prod.tfstate -- terraform init
    ///   gitstate wrap --repository https://git.example.com/acme/tf-state.git \
    ///       --state envs/prod.tfstate -- terraform apply
    ///
    /// Ctrl+C reaches Terraform directly (it stops gracefully and releases its lock); the wrapper
    /// waits for it, forwards SIGTERM and SIGHUP, and cleans up in every case. Exit codes: the
    /// program's (128+N when signal N killed it); 125 when gitstate itself fails (e.g. the address
    /// is in use), 126/127 when the program cannot be run / is not found.
    #[command(
        verbatim_doc_comment,
        override_usage = "gitstate wrap [OPTIONS] --state <PATH> [--] <PROGRAM> [ARGS]...",
        mut_arg("repositories", |a| a
            .value_name("URL")
            .help("The git repository holding the state: URL or local bare repository path (NAME=URL also accepted) [default: the configuration file's, else ./.gitstate/default.git]")),
        mut_arg("auth_mode", |a| a.hide(true)),
        mut_arg("token_hashes", |a| a.hide(true)),
        mut_arg("users", |a| a.hide(true)),
        mut_arg("allow", |a| a.hide(true)),
        mut_arg("allow_with_credential", |a| a.hide(true)),
        mut_arg("insecure_no_auth_on_public_address", |a| a.hide(true)),
    )]
    Wrap(wrap::WrapArgs),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Stop a server started with --pid-file: SIGTERM, then wait while it finishes the requests in
    /// flight (no push is cut halfway).
    ///
    ///   gitstate serve --pid-file /run/gitstate.pid &
    ///   gitstate stop --pid-file /run/gitstate.pid
    #[command(verbatim_doc_comment)]
    Stop(StopArgs),
    /// Query the DynamoDB catalog of states, locks and their audit trail.
    #[command(subcommand)]
    Catalog(catalog::CatalogCommand),
    /// List the versions of a state: serial, commit, who, when, size (newest first).
    ///
    ///   gitstate history default prod.tfstate
    ///   gitstate history default prod.tfstate --json | jq '.[0]'
    ///   curl -s http://127.0.0.1:6061/state/default/prod.tfstate?version=12   # one version
    #[command(verbatim_doc_comment)]
    History(admin::HistoryArgs),
    /// Write an earlier version of a state back as a new commit with the next serial. A held
    /// lock refuses it (pass --lock-id if you hold the lock).
    ///
    ///   gitstate history default prod.tfstate
    ///   gitstate restore default prod.tfstate --version 12     # a serial
    ///   gitstate restore default prod.tfstate --version 3f2a9c1 # or a commit id
    #[command(verbatim_doc_comment)]
    Restore(admin::RestoreArgs),
    /// List the held locks with holder, operation and age.
    ///
    ///   gitstate locks                 # every configured repository
    ///   gitstate locks default --json
    ///   gitstate locks --stale 2h      # older than two hours (what a lock_ttl of 2h takes over)
    #[command(verbatim_doc_comment)]
    Locks(admin::LocksArgs),
    /// Force-release the lock of a state after showing its holder and asking (like `terraform
    /// force-unlock`, without needing the lock ID).
    ///
    ///   gitstate unlock default prod.tfstate
    ///   gitstate unlock default prod.tfstate --yes    # no question (scripts)
    #[command(verbatim_doc_comment)]
    Unlock(admin::UnlockArgs),
    /// Re-seal every state of a repository with the configured sops keys: terraform-backend-git's
    /// legacy aes states (with its passphrase) and plaintext states, one commit per state
    /// (compare-and-swap, never forced). Sealed states and other files are left as they are;
    /// locked states are skipped and reported.
    ///
    ///   export TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE=…  SOPS_AGE_RECIPIENTS=age1…
    ///   gitstate migrate --repository default=https://git.example.com/acme/tf-state.git --dry-run
    ///   gitstate migrate --repository default=https://git.example.com/acme/tf-state.git
    #[command(verbatim_doc_comment)]
    Migrate(migrate::MigrateArgs),
    /// terraform-backend-git's command line (the same as running gitstate under the name
    /// terraform-backend-git, e.g. through a symlink): its flags, TF_BACKEND_GIT_* variables and
    /// terraform-backend-git.hcl, mapped onto serve, wrap and stop.
    ///
    ///   gitstate compat git --repository https://git.example.com/acme/tf-state.git \
    ///       --state envs/prod.tfstate terraform apply
    ///   gitstate compat --address 127.0.0.1:6061          # its standalone server
    ///   gitstate compat --help                            # its options
    #[command(verbatim_doc_comment, disable_help_flag = true)]
    Compat {
        /// terraform-backend-git's arguments.
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<std::ffi::OsString>,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the effective configuration and where each value came from (flag, environment
    /// variable, configuration file, default); credentials are never printed.
    ///
    ///   gitstate config show --config gitstate.hcl
    ///   GITSTATE_LISTEN=0.0.0.0:8080 gitstate config show
    #[command(verbatim_doc_comment)]
    Show(ShowArgs),
}

#[derive(Args, Debug)]
struct StopArgs {
    /// The pid file the server was started with.
    #[arg(long, value_name = "PATH", env = "GITSTATE_PID_FILE")]
    pid_file: std::path::PathBuf,
    /// How long to wait for requests in flight.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    wait: u64,
}

#[derive(Args, Debug)]
struct ShowArgs {
    #[command(flatten)]
    settings: Settings,
    /// Show the configuration terraform-backend-git's standalone command line would use: its
    /// terraform-backend-git.hcl (home, then current directory) is read too.
    #[arg(long)]
    as_terraform_backend_git: bool,
}

#[derive(Args, Debug)]
struct ServeArgs {
    #[command(flatten)]
    settings: Settings,
    /// Write the server's process id here (removed at exit); `gitstate stop --pid-file` uses it.
    #[arg(long, value_name = "PATH", env = "GITSTATE_PID_FILE")]
    pid_file: Option<std::path::PathBuf>,
    /// Log format: text or json.
    #[arg(long, env = "GITSTATE_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

fn init_logging(format: &str, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        // JSON strings escape every control character already.
        builder.json().init();
    } else {
        builder.fmt_fields(logfields::escaping_fields()).init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}

/// Files this process creates are readable by its user only (umask 077): the git cache under
/// `$GITSTATE_CACHE_DIR` and the embedded repository hold states, which hold secrets, and gix
/// creates its files and directories with the process's umask. Returns the previous umask, for
/// programs this process starts (`wrap` gives Terraform its caller's umask back).
pub(crate) fn restrict_umask() -> libc::mode_t {
    // SAFETY: umask only swaps the process's file mode creation mask; it cannot fail.
    unsafe { libc::umask(0o077) }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let config = args.settings.resolve().map_err(|e| e.to_string())?;
    let deployment = Deployment::build(&config, Runtime::Server)
        .await
        .map_err(|e| e.to_string())?;
    let names = deployment.registry.names();
    // TLS material is checked before binding, so a bad file is reported before anything listens.
    let tls = match &config.tls {
        Some(tls) => Some(tls::server_config(
            &tls.cert_file,
            &tls.key_file,
            tls.client_ca_file.as_deref(),
        )?),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    // No open server on a public address: refused before the first connection is accepted.
    gitstate_app::boundary::check_listen(&config, local).map_err(|e| e.to_string())?;
    let app =
        router(deployment.app_state(RequestGuard::for_listener(local, &config.allowed_hosts)));
    let _pid_file = match &args.pid_file {
        Some(path) => Some(pidfile::PidFile::create(path)?),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(address = %local, %scheme, repositories = ?names, "gitstate is serving");
    eprintln!(
        "gitstate listening on {scheme}://{local} (repositories: {}); example address: {scheme}://{local}/state/{}/prod.tfstate",
        names.join(", "),
        names.first().map(String::as_str).unwrap_or("default"),
    );
    let served = match tls {
        Some(tls) => {
            let listener = tls::TlsListener::new(listener, tls)
                .map_err(|e| format!("cannot listen on {local}: {e}"))?;
            let registry: Arc<dyn StoreRegistry> = deployment.registry.clone();
            let app = app
                .layer(axum::middleware::from_fn_with_state(
                    registry,
                    client_cert::certificate_caller,
                ))
                .into_make_service_with_connect_info::<client_cert::ClientSubject>();
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown_signal())
                .await
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown_signal())
                .await
        }
    };
    served.map_err(|e| format!("the server failed: {e}"))
}

/// Prints a command's output, or its error after the command's name.
fn finish(command: &str, result: Result<String, String>) -> ExitCode {
    match result {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{command}: {message}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // Before any thread or file: the cache and the embedded repository are this user's only.
    let inherited_umask = restrict_umask();
    // terraform-backend-git's SSH_PRIVATE_KEY and sops AWS profile, for ssh and the AWS SDK,
    // before anything connects anywhere.
    for (name, value) in gitstate_app::compat::process_environment() {
        std::env::set_var(name, value);
    }
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let argv = match as_terraform_backend_git(argv) {
        Ok(tbg_argv) => return run_compat(tbg_argv, inherited_umask).await,
        Err(argv) => argv,
    };
    let matches = Cli::command().get_matches_from(argv);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Stop(args) => finish(
            "gitstate stop",
            pidfile::stop(&args.pid_file, std::time::Duration::from_secs(args.wait)),
        ),
        Command::Catalog(command) => finish("gitstate catalog", catalog::run(command).await),
        Command::History(args) => finish("gitstate history", admin::history(args).await),
        Command::Restore(args) => finish("gitstate restore", admin::restore(args).await),
        Command::Locks(args) => finish("gitstate locks", admin::locks(args).await),
        Command::Unlock(args) => finish("gitstate unlock", admin::unlock(args).await),
        Command::Migrate(args) => finish("gitstate migrate", migrate::run(args).await),
        // Handled before parsing (its arguments are terraform-backend-git's).
        Command::Compat { .. } => ExitCode::FAILURE,
        Command::Config(ConfigCommand::Show(args)) => show_config(args, &matches),
        Command::Serve(args) => {
            init_logging(&args.log_format, "info");
            finish("gitstate", serve(args).await.map(|()| String::new()))
        }
        Command::Wrap(args) => {
            // Quiet by default: the program's output is what the user reads.
            init_logging(&args.log_format, "warn");
            run_wrap("gitstate wrap", args, inherited_umask).await
        }
    }
}

/// terraform-backend-git's command line: `Ok` with its arguments when the binary runs under its
/// name (argv[0]) or as `gitstate compat …`, else `Err` with `argv` unchanged.
fn as_terraform_backend_git(
    mut argv: Vec<std::ffi::OsString>,
) -> Result<Vec<std::ffi::OsString>, Vec<std::ffi::OsString>> {
    if compat::invoked_as_tbg(argv.first()) {
        return Ok(argv);
    }
    if argv.get(1).is_some_and(|a| a == "compat") {
        argv.remove(1);
        argv[0] = compat::BINARY.into();
        return Ok(argv);
    }
    Err(argv)
}

/// `gitstate config show`, reading terraform-backend-git's file too when asked.
fn show_config(args: ShowArgs, matches: &clap::ArgMatches) -> ExitCode {
    let shown = matches
        .subcommand_matches("config")
        .and_then(|m| m.subcommand_matches("show"));
    let mut settings = args.settings;
    if args.as_terraform_backend_git {
        settings.tbg = gitstate_app::compat::TbgInput {
            file: gitstate_app::compat::TbgFile::Search,
            standalone: true,
            ..Default::default()
        };
    }
    finish("gitstate", config_show::run(&settings, shown))
}

async fn run_wrap(name: &str, args: wrap::WrapArgs, umask: libc::mode_t) -> ExitCode {
    match wrap::run(args, umask).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("{name}: {}", e.message);
            ExitCode::from(e.code)
        }
    }
}

/// terraform-backend-git's command line, run as gitstate's `serve`, `wrap` or `stop`.
async fn run_compat(argv: Vec<std::ffi::OsString>, umask: libc::mode_t) -> ExitCode {
    let name = compat::BINARY;
    let plan = match compat::parse(argv) {
        Ok(Ok(plan)) => plan,
        Ok(Err(message)) => {
            eprintln!("{name}: {message}");
            return ExitCode::from(wrap::EXIT_WRAPPER);
        }
        Err(e) => e.exit(),
    };
    match plan {
        compat::Plan::Print(text) => finish(name, Ok(text)),
        compat::Plan::Stop(pid_file) if !pid_file.exists() => ExitCode::SUCCESS,
        compat::Plan::Stop(pid_file) => finish(
            name,
            pidfile::stop(&pid_file, std::time::Duration::from_secs(60)),
        ),
        compat::Plan::Serve { settings, pid_file } => {
            init_logging("text", "info");
            let args = ServeArgs {
                settings,
                pid_file: Some(pid_file),
                log_format: "text".into(),
            };
            finish(name, serve(args).await.map(|()| String::new()))
        }
        compat::Plan::Wrap { args, access_logs } => {
            init_logging(&args.log_format, if access_logs { "info" } else { "warn" });
            run_wrap(name, args, umask).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of every subcommand (duplicate names, conflicting flags), which would
    /// otherwise only fail when a user runs that subcommand.
    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
