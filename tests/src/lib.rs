//! Test support: starting real git servers, the gitstate binary and terraform.
//!
//! Everything here talks to real programs, installed by `scripts/install-test-deps.sh` into
//! `$GITSTATE_TOOLS` (default `~/.cache/gitstate-tools`). A missing tool is a test *failure*
//! whose message says to run that script; nothing is skipped silently.
//!
//! Every server binds 127.0.0.1 only, and every helper that starts a process kills it (and
//! removes its temporary files) on `Drop`.
//!
//! | helper | what |
//! |---|---|
//! | [`free_port`] | an unused TCP port on 127.0.0.1 |
//! | [`GitHttpServer`] | lighttpd + `git http-backend` (smart HTTP, basic auth) |
//! | [`GitDaemon`] | `git daemon` with receive-pack (git://) |
//! | [`DulwichServer`], [`JGitServer`] | smart HTTP by dulwich (Python) and JGit (Java), not git's |
//! | [`ReplayAdvertisementServer`] | issue 16's advertisement replayed in front of [`GitHttpServer`] |
//! | [`StateRepo`], [`terraform_lock_scenario`] | a server's states checked with plain git; the Terraform scenario |
//! | [`bare_repo`] | `git init --bare` with initial branch `main` |
//! | [`Gitstate`] | the `gitstate serve` binary, waited on until `/_/health` answers |
//! | [`Terraform`] | the installed Terraform versions, run against a directory |
//! | [`HttpBackend`], [`write_main_tf`] | a `main.tf` with an `http` backend and `null_resource`s |
//! | [`http`], [`lock_info`] | direct requests to the backend (LOCK/UNLOCK/GET/POST) |
//! | [`not_one_sentence`], [`request_id_of`] | what an error answer must be (DESIGN §2) |
//! | [`git`], [`git_log_subjects`], [`ls_remote`] | plain git, to check what is stored |
//! | [`certs::signed_by_a_ca`] | a CA and the certificates it signs (openssl) |
//! | [`oidc::Issuer`] | an OIDC issuer's keys (openssl), its JWKS file and the tokens it signs |
//!
//! The gitstate binary is found at `$GITSTATE_BIN`, else `$CARGO_TARGET_DIR/debug/gitstate`, else
//! next to the running test executable (`target/debug/deps/..` → `target/debug/gitstate`). Build it
//! first with `cargo build -p gitstate`, as scripts/test.sh does; scripts/check-shipped.sh builds a
//! release one and points `GITSTATE_BIN` at it, as a user runs it.

pub mod browser;
pub mod certs;
pub mod crypto;
pub mod keys;
pub mod oidc;
pub mod proxy;
pub mod workspace_host;

mod direct;
mod git;
mod gitstate;
mod interop_servers;
mod process;
mod servers;
mod state_repo;
mod terraform;
mod terraform_config;
mod wrap;

pub use direct::*;
pub use git::*;
pub use gitstate::*;
pub use interop_servers::*;
pub use process::*;
pub use servers::*;
pub use state_repo::*;
pub use terraform::*;
pub use terraform_config::*;
pub use wrap::*;

pub use tempfile::TempDir;

/// The message every missing-tool failure carries.
pub const INSTALL_HINT: &str =
    "run scripts/install-test-deps.sh (it installs into $GITSTATE_TOOLS, default ~/.cache/gitstate-tools)";
