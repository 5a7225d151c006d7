//! Team-mode callers: tokens whose SHA-256 hashes (`sha256:<hex>`) are configured, checked in
//! constant time; and named users with a password hash, as `htpasswd` writes them
//! (`NAME:$2y$…` bcrypt, for passwords people choose) or `NAME:sha256:<hex>` (for random tokens).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Decodes `sha256:<64 hex digits>`; the error names the rule, never the value.
pub fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let hex = text.strip_prefix("sha256:").ok_or_else(|| {
        "a token hash must look like sha256:<64 hex digits> (printf %s TOKEN | sha256sum)"
            .to_owned()
    })?;
    if hex.len() != 64 {
        return Err("a token hash must have 64 hex digits after 'sha256:'".into());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| "a token hash may hold only hex digits after 'sha256:'".to_owned())?;
    }
    Ok(out)
}

/// The `sha256:<hex>` form of `token`'s hash, as configured for team mode (the wrapper configures
/// its per-run token this way).
pub fn hash_of(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .fold(String::from("sha256:"), |mut out, b| {
            out.push_str(&format!("{b:02x}"));
            out
        })
}

/// True when `token` hashes to `hash`, compared in constant time.
pub fn matches(hash: &[u8; 32], token: &str) -> bool {
    let digest = Sha256::digest(token.as_bytes());
    bool::from(digest.as_slice().ct_eq(hash))
}

/// How a user's password is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Secret {
    /// `sha256:<hex>`: for random tokens, where a fast hash is enough.
    Sha256([u8; 32]),
    /// `$2a$`, `$2b$` or `$2y$` bcrypt (`htpasswd -nbB NAME PASSWORD`): for passwords people
    /// choose.
    Bcrypt(String),
}

/// The configured team users (`NAME:HASH`), and the verifications that succeeded recently.
#[derive(Debug, Default)]
pub struct Users {
    users: HashMap<String, Secret>,
    /// SHA-256 of (name, password, hash) of recent successful bcrypt checks → when: bcrypt is
    /// slow on purpose (tens of milliseconds), and a Terraform run sends several requests.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
}

/// How long a successful bcrypt check is remembered.
const VERIFIED_FOR: Duration = Duration::from_secs(300);
/// Most remembered checks.
const VERIFIED_MAX: usize = 1024;

impl Users {
    /// Parses `NAME:HASH` entries; errors name the entry by its user name, never the hash.
    pub fn parse(entries: &[String]) -> Result<Users, String> {
        let mut users = HashMap::new();
        for entry in entries {
            let (name, hash) = entry.split_once(':').ok_or_else(|| {
                "a team user must look like NAME:HASH, e.g. the output of `htpasswd -nbB NAME PASSWORD`".to_owned()
            })?;
            if name.is_empty() {
                return Err("a team user has an empty name".into());
            }
            let secret = if hash.starts_with("sha256:") {
                Secret::Sha256(parse_hash(hash).map_err(|e| format!("user {name}: {e}"))?)
            } else if ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p))
                && hash.len() == 60
            {
                Secret::Bcrypt(hash.to_owned())
            } else {
                return Err(format!(
                    "user {name}: the password hash must be bcrypt ($2y$…, from `htpasswd -nbB`) or sha256:<64 hex digits>"
                ));
            };
            if users.insert(name.to_owned(), secret).is_some() {
                return Err(format!("user {name} is configured twice"));
            }
        }
        Ok(Users {
            users,
            verified: Mutex::new(HashMap::new()),
        })
    }

    /// Whether no user is configured.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `name` is a configured user whose password is `password`.
    pub fn admits(&self, name: &str, password: &str) -> bool {
        match self.users.get(name) {
            Some(Secret::Sha256(hash)) => matches(hash, password),
            Some(Secret::Bcrypt(hash)) => {
                let key: [u8; 32] = Sha256::new()
                    .chain_update(name.as_bytes())
                    .chain_update([0])
                    .chain_update(password.as_bytes())
                    .chain_update([0])
                    .chain_update(hash.as_bytes())
                    .finalize()
                    .into();
                if let Ok(verified) = self.verified.lock() {
                    if verified
                        .get(&key)
                        .is_some_and(|at| at.elapsed() < VERIFIED_FOR)
                    {
                        return true;
                    }
                }
                let ok = bcrypt::verify(password, hash).unwrap_or(false);
                if ok {
                    if let Ok(mut verified) = self.verified.lock() {
                        if verified.len() >= VERIFIED_MAX {
                            verified.retain(|_, at| at.elapsed() < VERIFIED_FOR);
                            if verified.len() >= VERIFIED_MAX {
                                verified.clear();
                            }
                        }
                        verified.insert(key, Instant::now());
                    }
                }
                ok
            }
            None => {
                // The same work for an unknown name, so timing does not tell which names exist.
                let _ = bcrypt::verify(password, UNKNOWN_USER_HASH);
                false
            }
        }
    }
}

/// A bcrypt hash (cost 10) no password matches in practice; verified for unknown names.
const UNKNOWN_USER_HASH: &str = "$2b$10$aaaaaaaaaaaaaaaaaaaaaOzQyCqQ7VxHXzG1bq8mEC1nmQ9lzKwAa";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_matches() {
        let real = format!("sha256:{}", hex(&Sha256::digest(b"s3cret")));
        let hash = parse_hash(&real).unwrap();
        assert!(matches(&hash, "s3cret"));
        assert!(!matches(&hash, "s3cret "));
        assert!(!matches(&hash, ""));
        assert!(parse_hash("md5:abc").is_err());
        assert!(parse_hash("sha256:xyz").is_err());
        assert!(parse_hash(&format!("sha256:{}", "g".repeat(64))).is_err());
        assert_eq!(hash_of("s3cret"), real);
    }

    #[test]
    fn users_with_bcrypt_and_sha256() {
        let bcrypt_hash = bcrypt::hash("correct horse", 4).unwrap();
        let users = Users::parse(&[
            format!("alice:{bcrypt_hash}"),
            format!("ci:{}", hash_of("tok-123")),
        ])
        .unwrap();
        assert!(users.admits("alice", "correct horse"));
        assert!(users.admits("alice", "correct horse"), "remembered");
        assert!(!users.admits("alice", "wrong"));
        assert!(!users.admits("bob", "correct horse"));
        assert!(users.admits("ci", "tok-123"));
        assert!(!users.admits("alice", "tok-123"));
        for bad in ["alice", ":$2y$", "alice:md5:x", "alice:$2y$10$short"] {
            let e = Users::parse(&[bad.to_owned()]).unwrap_err();
            assert!(!e.contains("$2y$10$short"), "{e}");
        }
        assert!(Users::parse(&[format!("a:{bcrypt_hash}"), format!("a:{bcrypt_hash}")]).is_err());
        // Unknown names cost a real bcrypt check too.
        assert!(matches!(bcrypt::verify("x", UNKNOWN_USER_HASH), Ok(false)));
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
