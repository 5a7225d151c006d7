//! terraform-backend-git's command line, for its users to switch by changing the binary's name
//! (a symlink named `terraform-backend-git`, or `gitstate compat …`). It is parsed here into
//! gitstate's own `serve`, `wrap` and `stop`; the mapping of its settings is
//! `gitstate_app::compat`.
//!
//! ```text
//! terraform-backend-git [-c FILE] [-a ADDRESS] [-l]                      # standalone server
//! terraform-backend-git [...] git -r REPO [-b REF] -s STATE [--amend] [-d DIR] \
//!     terraform [--tf tofu] ARGS…                                       # wrapper
//! terraform-backend-git stop | version
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use gitstate_app::compat::{TbgFile, TbgFlags, TbgInput};
use gitstate_app::Settings;

use crate::wrap::WrapArgs;

/// The name terraform-backend-git's binary had.
pub const BINARY: &str = "terraform-backend-git";

/// Whether this process was started under terraform-backend-git's name (argv[0]'s file name).
pub fn invoked_as_tbg(argv0: Option<&OsString>) -> bool {
    argv0
        .map(std::path::Path::new)
        .and_then(|p| p.file_name())
        .is_some_and(|name| name == BINARY)
}

/// Terraform HTTP backend implementation that uses Git as storage (gitstate, under
/// terraform-backend-git's command line).
#[derive(Parser, Debug)]
#[command(
    name = BINARY,
    version,
    about = "Terraform HTTP backend that uses git as storage: gitstate under terraform-backend-git's command line",
    long_about = None
)]
struct TbgCli {
    /// config file (default is terraform-backend-git.hcl in the home or current directory).
    #[arg(short = 'c', long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Specify the listen address [default: 127.0.0.1:6061].
    #[arg(short = 'a', long, global = true)]
    address: Option<String>,
    /// Log HTTP requests to the console.
    #[arg(short = 'l', long = "access-logs", global = true)]
    access_logs: bool,
    #[command(subcommand)]
    command: Option<TbgCommand>,
}

#[derive(Subcommand, Debug)]
enum TbgCommand {
    /// Start backend in Git storage mode and execute the wrapper.
    #[command(arg_required_else_help = true)]
    Git(GitArgs),
    /// Stop the currently running backend.
    Stop,
    /// Print version.
    Version,
}

#[derive(Args, Debug)]
struct GitArgs {
    /// Repository to use as storage.
    #[arg(short = 'r', long, global = true)]
    repository: Option<String>,
    /// Ref (branch) to use [default: master].
    #[arg(short = 'b', long = "ref", global = true)]
    git_ref: Option<String>,
    /// Path of the state file in the repository.
    #[arg(short = 's', long, global = true)]
    state: Option<String>,
    /// Accepted; gitstate writes a normal commit (never amends, never force-pushes).
    #[arg(long, global = true)]
    amend: bool,
    /// Change current working directory.
    #[arg(short = 'd', long, global = true)]
    dir: Option<String>,
    #[command(subcommand)]
    wrapper: Option<Wrapper>,
}

#[derive(Subcommand, Debug)]
enum Wrapper {
    /// Run terraform while storage is running.
    Terraform(TfArgs),
    /// Run tofu while storage is running (as `terraform --tf tofu`).
    Tofu(TfArgs),
}

#[derive(Args, Debug)]
struct TfArgs {
    /// Path to terraform binary [default: terraform].
    #[arg(short = 't', long)]
    tf: Option<String>,
    /// Terraform's arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

/// What to run, in gitstate's terms.
pub enum Plan {
    /// `gitstate serve` with these settings and this pid file.
    Serve {
        settings: Settings,
        pid_file: PathBuf,
    },
    /// `gitstate wrap`.
    Wrap { args: WrapArgs, access_logs: bool },
    /// `gitstate stop --pid-file`.
    Stop(PathBuf),
    /// Print this.
    Print(String),
}

/// Where its standalone server kept its pid (`$TMPDIR/.terraform-backend-git.pid`), so `stop`
/// finds a server either started.
pub fn pid_file() -> PathBuf {
    std::env::temp_dir().join(".terraform-backend-git.pid")
}

/// gitstate's settings from its own variables (`GITSTATE_*`, `SOPS_*`) alone: no gitstate flag
/// exists on this command line.
fn settings_from_env() -> Result<Settings, String> {
    let command = <Settings as Args>::augment_args(clap::Command::new(BINARY));
    let matches = command
        .try_get_matches_from([BINARY])
        .map_err(|e| e.to_string())?;
    Settings::from_arg_matches(&matches).map_err(|e| e.to_string())
}

/// Parses terraform-backend-git's command line (`argv[0]` included). `Err` is clap's own
/// outcome (help, version, a usage error), to be shown with `exit()`.
pub fn parse(argv: Vec<OsString>) -> Result<Result<Plan, String>, clap::Error> {
    let matches = TbgCli::command().try_get_matches_from(argv)?;
    let cli = TbgCli::from_arg_matches(&matches)?;
    Ok(plan(cli))
}

fn plan(cli: TbgCli) -> Result<Plan, String> {
    let mut settings = settings_from_env()?;
    let file = match &cli.config {
        Some(path) => TbgFile::Path(path.clone()),
        None => TbgFile::Search,
    };
    let flags = TbgFlags {
        address: cli.address.clone(),
        access_logs: cli.access_logs,
        ..TbgFlags::default()
    };
    match cli.command {
        None => {
            settings.tbg = TbgInput {
                file,
                flags,
                standalone: true,
            };
            // Its access log is gitstate's "request handled" line, logged at info here anyway.
            Ok(Plan::Serve {
                settings,
                pid_file: pid_file(),
            })
        }
        Some(TbgCommand::Stop) => Ok(Plan::Stop(pid_file())),
        Some(TbgCommand::Version) => Ok(Plan::Print(format!(
            "{BINARY} (gitstate {})\n",
            env!("CARGO_PKG_VERSION")
        ))),
        Some(TbgCommand::Git(git)) => {
            let (tf, wrapper_program) = match git.wrapper {
                Some(Wrapper::Terraform(tf)) => (tf, None),
                Some(Wrapper::Tofu(tf)) => (tf, Some("tofu")),
                None => {
                    return Err(format!(
                        "{BINARY} git needs a program to run: {BINARY} git --repository URL --state PATH terraform ARGS…"
                    ))
                }
            };
            settings.tbg = TbgInput {
                file,
                flags: TbgFlags {
                    repository: git.repository,
                    git_ref: git.git_ref,
                    state: git.state,
                    amend: git.amend,
                    dir: git.dir,
                    tf: tf.tf.or(wrapper_program.map(str::to_owned)),
                    ..flags
                },
                standalone: false,
            };
            let (_, tbg) = settings.resolve_all().map_err(|e| e.to_string())?;
            // The file found now is the one used after `--dir` changes the directory.
            settings.tbg.file = match tbg.file.as_ref().map(std::path::absolute) {
                Some(Ok(path)) => TbgFile::Path(path),
                Some(Err(e)) => return Err(format!("cannot resolve its configuration file: {e}")),
                None => TbgFile::Off,
            };
            let state = tbg
                .state
                .clone()
                .ok_or("state must be set (--state, TF_BACKEND_GIT_GIT_STATE or git.state)")?;
            if !tbg.sources.contains_key("repository") {
                return Err(
                    "repository must be set (--repository, TF_BACKEND_GIT_GIT_REPOSITORY or git.repository)"
                        .into(),
                );
            }
            if let Some(dir) = &tbg.dir {
                std::env::set_current_dir(dir)
                    .map_err(|e| format!("cannot change to the directory {dir}: {e}"))?;
            }
            if tbg.amend {
                eprintln!("{BINARY}: amend is accepted; gitstate writes each state as a normal commit and never force-pushes");
            }
            let program = tbg.tf.clone().unwrap_or_else(|| "terraform".to_owned());
            let mut command = vec![program];
            command.extend(tf.args);
            Ok(Plan::Wrap {
                args: WrapArgs {
                    settings,
                    state,
                    log_format: std::env::var("GITSTATE_LOG_FORMAT")
                        .unwrap_or_else(|_| "text".to_owned()),
                    command,
                },
                access_logs: tbg.access_logs,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> TbgCli {
        let argv: Vec<OsString> = std::iter::once(BINARY)
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let matches = TbgCli::command().try_get_matches_from(argv).unwrap();
        TbgCli::from_arg_matches(&matches).unwrap()
    }

    #[test]
    fn its_command_line_parses_as_it_did() {
        TbgCli::command().debug_assert();
        let c = cli(&["-a", "127.0.0.1:7000", "-l"]);
        assert_eq!(c.address.as_deref(), Some("127.0.0.1:7000"));
        assert!(c.access_logs && c.command.is_none());
        // Root flags after the subcommands, storage flags after `terraform`, then its args.
        let c = cli(&[
            "git",
            "-r",
            "https://h/a.git",
            "terraform",
            "-s",
            "x.json",
            "--tf",
            "tofu",
            "plan",
            "-out=p",
            "-l",
        ]);
        let Some(TbgCommand::Git(git)) = c.command else {
            panic!("not git")
        };
        assert_eq!(git.repository.as_deref(), Some("https://h/a.git"));
        assert_eq!(git.state.as_deref(), Some("x.json"));
        let Some(Wrapper::Terraform(tf)) = git.wrapper else {
            panic!("not terraform")
        };
        assert_eq!(tf.tf.as_deref(), Some("tofu"));
        assert_eq!(tf.args, vec!["plan", "-out=p", "-l"]);
        assert!(!c.access_logs);
    }

    #[test]
    fn its_name_is_recognised() {
        assert!(invoked_as_tbg(Some(&OsString::from(
            "/usr/local/bin/terraform-backend-git"
        ))));
        assert!(!invoked_as_tbg(Some(&OsString::from("gitstate"))));
        assert!(!invoked_as_tbg(None));
    }
}
