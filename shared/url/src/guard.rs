//! [`NetworkGuard`]: what a transport enforces on the network for one repository, decided by
//! the URL policy ([`crate::policy::Admission::network`]) and applied by the transport to every
//! address it connects to.

use std::net::IpAddr;

use crate::address::internal_address_rule;

/// What a transport enforces on the network for one repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkGuard {
    /// Refuse to connect to an address inside the deployment's network
    /// ([`internal_address_rule`]), checked on every address a name resolves to, at connect time.
    pub refuse_internal: bool,
    /// Follow HTTP redirects (to the same scheme or https). Off for ad-hoc repositories: a
    /// redirect would lead the transport where the policy never looked.
    pub follow_redirects: bool,
}

impl NetworkGuard {
    /// A repository the operator configured: no address rule, redirects followed as git does.
    pub const TRUSTED: NetworkGuard = NetworkGuard {
        refuse_internal: false,
        follow_redirects: true,
    };

    /// `Err` with the rule when the guard refuses to connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), &'static str> {
        match internal_address_rule(ip) {
            Some(rule) if self.refuse_internal => Err(rule),
            _ => Ok(()),
        }
    }
}

impl Default for NetworkGuard {
    fn default() -> Self {
        NetworkGuard::TRUSTED
    }
}
