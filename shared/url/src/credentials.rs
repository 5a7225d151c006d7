//! [`Credentials`]: the git credential sent to a repository's host (a basic-auth pair or a
//! token), whether the deployment's own or a caller's passed through. It lives beside the URL
//! model because it is what the network policy decides may be sent to a host
//! ([`crate::policy::Admission::server_credential`]) and what the transport sends there; it is
//! not a URL's user info ([`crate::model::UserInfo`]), which an ad-hoc URL may never carry.

use std::fmt;

/// A git credential (basic-auth pair or token). `Debug` never shows the secret, and both parts
/// are overwritten with zeros when the value is dropped (copies a `String` left behind when it
/// grew are out of reach; the values are built once and never grown).
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name (for tokens, anything the server accepts, e.g. `x-access-token`).
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl Drop for Credentials {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.username.zeroize();
        self.password.zeroize();
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}
