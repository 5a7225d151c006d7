//! gitstate's repository URLs and the network policy around them, in one place: a URL is parsed
//! and normalised once ([`RepoUrl`]), and everything after works from that value: what is shown
//! in logs and messages (no credential, [`redact`]), which ad-hoc URLs a deployment contacts
//! ([`policy`], on the [`glob`] matcher), which addresses lie inside the deployment's network
//! ([`address`]), what the transport enforces when it connects ([`NetworkGuard`]), and the git
//! credential it may send ([`Credentials`]). The rule of a state path, the `{path}` of a
//! gitstate address, is here too ([`state_path`]): core's `StatePath` and the state-file
//! checker's reading of a `terraform_remote_state` address both stand on it.
//!
//! It never opens a connection, resolves a name or reads configuration: it decides, and the
//! transport (shared/git) and the configuration (shared/app) act. It depends on no other gitstate
//! crate, so the protocol core and the git transport can both stand on it without one reaching
//! into the other.

pub mod address;
pub mod credentials;
pub mod glob;
pub mod guard;
pub mod model;
pub mod policy;
pub mod redact;
pub mod state_path;

pub use credentials::Credentials;
pub use guard::NetworkGuard;
pub use model::{Host, RepoUrl, Scheme, UrlError};
pub use policy::{Admission, AllowPattern, UrlPolicy};
pub use redact::redact_in_text;
