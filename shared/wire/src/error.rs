//! [`WireError`]: why a conversation with a git server failed, in the categories a caller acts
//! on (ask for credentials, refuse, retry, report). The sentences are the ones the stores'
//! errors carry: gitstate-git maps each category to the `StoreError` of the same name
//! (`errors::from_wire`), so what a caller reads does not depend on the layer that failed.

use thiserror::Error;

/// A failed exchange with a git server, or with the local pack machinery under it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WireError {
    /// The git server wants credentials, or other ones.
    #[error("the git server asked for credentials: {0}")]
    Unauthorized(String),
    /// The git server refused the caller.
    #[error("the git server refused access: {0}")]
    Forbidden(String),
    /// The network guard refused the repository's address when connecting (e.g. its name
    /// resolved to an internal address). Not worth retrying. The text, the address and the
    /// rule it broke, is a sentence a caller may read.
    #[error("the repository's address is refused: {0}")]
    Refused(String),
    /// Could not reach the git server, or it timed out. Worth retrying.
    #[error("the git server could not be reached: {0}")]
    Unavailable(String),
    /// The git server answered, with an error.
    #[error("the git server answered with an error: {0}")]
    Remote(String),
    /// A bug, or local data the protocol could not use.
    #[error("internal error in the state store: {0}")]
    Internal(String),
}
