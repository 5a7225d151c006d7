//! Which OIDC token took a lock (DESIGN §6, "A run outlives its token"): the lock is sealed with
//! the token's mark, a trailer of the lock commit bound to the lock's repository, path and ID,
//! and once the token has expired it may still finish that run, and nothing else. The seal is
//! checked here, from what the lock commit records; the mark comes from the app, which holds the
//! deployment's run key, so this module never sees a key.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::lock::LockInfo;
use crate::seal::Place;

/// The trailer of a lock commit whose lock an OIDC token took: the lock's seal by that token.
pub const LOCK_TOKEN_TRAILER: &str = "Gitstate-Lock-Token";

/// How a seal is written in the trailer (`hmac-sha256:<64 hex digits>`). Any other form (the
/// `sha256:` of earlier versions, or anything a pusher wrote) seals nothing.
const SEAL_PREFIX: &str = "hmac-sha256:";

/// What a seal is computed over, before the lock's repository, path and ID (each
/// length-prefixed, so no two locks have the same input).
const SEAL_DOMAIN: &[u8] = b"gitstate lock token v1\0";

/// A token's mark: HMAC-SHA256 of the OIDC token under the deployment's run key, computed where
/// the token is admitted (`gitstate-app`). Only gitstate holds it: neither the token nor the
/// lock commits give it, so only gitstate can seal a lock with it. Secret: zeroed when dropped,
/// never printed.
#[derive(Clone)]
pub struct Mark(zeroize::Zeroizing<[u8; 32]>);

impl Mark {
    /// The mark whose bytes are `bytes` (zeroed with it when dropped).
    pub fn new(bytes: [u8; 32]) -> Mark {
        Mark(zeroize::Zeroizing::new(bytes))
    }

    /// The MAC, keyed by this mark, over the lock of `lock_id` at `at`, before it is finished.
    fn seal(&self, at: &Place, lock_id: &str) -> Hmac<Sha256> {
        // HMAC pads a key shorter than its block with zeros (RFC 2104): keyed with the mark so
        // padded, it is HMAC keyed by the mark, and nothing can fail.
        let mut key = hmac::digest::Key::<Hmac<Sha256>>::default();
        for (to, from) in key.iter_mut().zip(self.0.iter()) {
            *to = *from;
        }
        let mut mac = <Hmac<Sha256> as Mac>::new(&key);
        zeroize::Zeroize::zeroize(key.as_mut_slice());
        mac.update(SEAL_DOMAIN);
        for part in [at.repository.as_str(), at.path.as_str(), lock_id] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }
}

/// Compared in constant time.
impl PartialEq for Mark {
    fn eq(&self, other: &Mark) -> bool {
        let differences = self.0.iter().zip(other.0.iter());
        differences.fold(0u8, |any, (a, b)| any | (a ^ b)) == 0
    }
}

impl Eq for Mark {}

impl std::fmt::Debug for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mark(<redacted>)")
    }
}

/// What a caller's OIDC token says about locks (DESIGN §6, "A run outlives its token"): a lock
/// it takes is sealed with its mark (the trailer of the lock commit, bound to the lock's
/// repository, path and ID), and once it has expired it may still finish the run whose lock it
/// took (writes under that lock's ID, the holder's UNLOCK, reads while it is held), and nothing
/// else.
#[derive(Debug, Clone)]
pub struct LockToken {
    /// The token's mark under the deployment's run key.
    pub mark: Mark,
    /// The token has expired (within the issuer's `max_run`).
    pub expired: bool,
}

/// What a request of the http protocol begins, as an expired token's rights see it
/// ([`LockToken::may_begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// A GET; `version`: of an earlier version (`?version=`).
    Read { version: bool },
    /// A POST or DELETE; `names_lock`: with a lock ID (`?ID=`).
    Write { names_lock: bool },
    /// A LOCK.
    Lock,
    /// An UNLOCK.
    Unlock,
}

impl LockToken {
    /// The trailer line that seals the lock of `lock_id` at `at` with this token:
    /// `Gitstate-Lock-Token: hmac-sha256:<hex>`, the MAC keyed by the token's mark over the
    /// lock's repository, path and ID.
    pub fn trailer(&self, at: &Place, lock_id: &str) -> String {
        let seal = self.mark.seal(at, lock_id).finalize().into_bytes();
        let hex: String = seal.iter().map(|b| format!("{b:02x}")).collect();
        format!("{LOCK_TOKEN_TRAILER}: {SEAL_PREFIX}{hex}")
    }

    /// The seal a lock commit's `message` records, if any (its form is checked when it is
    /// verified). The subject is one line of escaped caller text, so a trailer line gitstate
    /// wrote is the last one; anyone with push access can write one too, which is why it is
    /// verified ([`LockToken::admits`]).
    pub fn recorded(message: &str) -> Option<String> {
        message.lines().rev().find_map(|line| {
            let value = line.strip_prefix(LOCK_TOKEN_TRAILER)?.strip_prefix(": ")?;
            Some(value.trim_end().to_owned())
        })
    }

    /// Whether a request of kind `request` may begin with `token`: always with a token that has
    /// not expired (or none); with an expired one only what finishes the run whose lock it took
    /// (a write or delete naming a lock ID, the state read back without `?version=`, an UNLOCK),
    /// each then admitted only under that very lock ([`LockToken::admits`]). The HTTP layer asks
    /// this before reading anything, so the rest is refused at once. Every other request (a list
    /// across states, a workspace's create, tags, delete or lock) refuses an expired token
    /// outright ([`crate::Authenticated::expired`]).
    pub fn may_begin(token: Option<&LockToken>, request: Begun) -> bool {
        if !token.is_some_and(|t| t.expired) {
            return true;
        }
        match request {
            Begun::Write { names_lock } => names_lock,
            // Terraform reads a new state back before its first write (no lock ID on a GET).
            Begun::Read { version } => !version,
            Begun::Unlock => true,
            Begun::Lock => false,
        }
    }

    /// Whether this caller may act on the state at `at` while the lock file `held` is held there
    /// (`None`: nothing is), its lock commit recording `recorded`: always for a token that has
    /// not expired; an expired one only under a lock, and only when `recorded` is its own seal
    /// of exactly that lock: its repository, path and the held lock's own ID (compared in
    /// constant time). A seal of another repository, path or lock ID, another token's, or one
    /// in another form (the `sha256:` of earlier versions) admits nothing.
    pub fn admits(
        token: Option<&LockToken>,
        at: &Place,
        held: Option<&[u8]>,
        recorded: Option<&str>,
    ) -> bool {
        match token {
            Some(token) if token.expired => match (held, recorded) {
                (Some(held), Some(recorded)) => {
                    let id = LockInfo::stored(held).id;
                    !id.is_empty() && token.sealed(at, &id, recorded)
                }
                _ => false,
            },
            _ => true,
        }
    }

    /// Whether this token sealed the lock file `held` at `at`, its lock commit recording
    /// `recorded`: `recorded` is its seal of exactly that lock (the held lock's own ID). The
    /// workspace API's rule of "the same caller" (DESIGN §10): a lock it took is sealed by the
    /// caller's credential, whatever its kind.
    pub fn holds(&self, at: &Place, held: &[u8], recorded: Option<&str>) -> bool {
        let id = LockInfo::stored(held).id;
        !id.is_empty() && recorded.is_some_and(|recorded| self.sealed(at, &id, recorded))
    }

    /// Whether `recorded` is this token's seal of the lock of `lock_id` at `at`.
    fn sealed(&self, at: &Place, lock_id: &str, recorded: &str) -> bool {
        let Some(hex) = recorded.strip_prefix(SEAL_PREFIX) else {
            return false;
        };
        let Some(bytes) = hex_32(hex) else {
            return false;
        };
        self.mark.seal(at, lock_id).verify_slice(&bytes).is_ok()
    }
}

/// 64 hex digits as 32 bytes.
fn hex_32(hex: &str) -> Option<[u8; 32]> {
    let digits = hex.as_bytes();
    if digits.len() != 64 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    let mut bytes = [0u8; 32];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expired_token_begins_only_what_finishes_its_run() {
        let token = |expired: bool| LockToken {
            mark: Mark::new([7; 32]),
            expired,
        };
        let all = [
            Begun::Read { version: false },
            Begun::Read { version: true },
            Begun::Write { names_lock: true },
            Begun::Write { names_lock: false },
            Begun::Lock,
            Begun::Unlock,
        ];
        for request in all {
            assert!(LockToken::may_begin(None, request), "{request:?}");
            assert!(
                LockToken::may_begin(Some(&token(false)), request),
                "{request:?}"
            );
        }
        let expired = token(true);
        let begins: Vec<bool> = all
            .iter()
            .map(|r| LockToken::may_begin(Some(&expired), *r))
            .collect();
        assert_eq!(begins, [true, false, true, false, false, true]);
    }

    #[test]
    fn a_seal_binds_its_mark_repository_path_and_id() {
        let path = |p: &str| crate::path::StatePath::parse(p).unwrap();
        let at = Place::new("r", &path("a/b.tfstate"));
        let token = |mark: u8, expired: bool| LockToken {
            mark: Mark::new([mark; 32]),
            expired,
        };
        let held = br#"{"ID":"id-1"}"#;
        let trailer = token(1, false).trailer(&at, "id-1");
        let seal = LockToken::recorded(&format!("Lock a/b.tfstate: apply\n\n{trailer}"))
            .expect("the trailer is read back");
        assert!(
            seal.starts_with("hmac-sha256:") && seal.len() == 12 + 64,
            "{seal}"
        );
        let admits = |t: &LockToken, at: &Place, held: Option<&[u8]>, recorded: Option<&str>| {
            LockToken::admits(Some(t), at, held, recorded)
        };
        let expired = token(1, true);
        assert!(admits(&expired, &at, Some(held), Some(&seal)));
        assert!(
            admits(&token(2, false), &at, None, None),
            "a live token is not held to a lock"
        );
        assert!(LockToken::admits(None, &at, None, None));
        for (what, at, held, recorded) in [
            ("no lock", &at, None, Some(seal.as_str())),
            ("no seal", &at, Some(&held[..]), None),
            (
                "another ID",
                &at,
                Some(&br#"{"ID":"id-2"}"#[..]),
                Some(seal.as_str()),
            ),
            (
                "a lock without ID",
                &at,
                Some(&b"{}"[..]),
                Some(seal.as_str()),
            ),
            (
                "another path",
                &Place::new("r", &path("a/c.tfstate")),
                Some(&held[..]),
                Some(seal.as_str()),
            ),
            (
                "another repository",
                &Place::new("s", &path("a/b.tfstate")),
                Some(&held[..]),
                Some(seal.as_str()),
            ),
        ] {
            assert!(!admits(&expired, at, held, recorded), "{what}");
        }
        assert!(
            !admits(&token(2, true), &at, Some(held), Some(&seal)),
            "another mark"
        );
        let upper = seal.to_uppercase().replace("HMAC-SHA256:", "hmac-sha256:");
        assert!(
            admits(&expired, &at, Some(held), Some(&upper)),
            "hex in either case"
        );
        for forged in [
            format!("sha256:{}", &seal[12..]),
            format!("{seal}0"),
            seal[..seal.len() - 1].to_owned(),
            format!("hmac-sha256:+{}", &seal[13..]),
        ] {
            assert!(
                !admits(&expired, &at, Some(held), Some(&forged)),
                "{forged}"
            );
        }
        assert_eq!(format!("{:?}", Mark::new([0xab; 32])), "Mark(<redacted>)");
    }
}
