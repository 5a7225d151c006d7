//! Team users: names with a password hash, as `htpasswd` writes them (`NAME:$2y$…` bcrypt, for
//! passwords people choose) or `NAME:sha256:<hex>` (for random tokens), and the bounded pool
//! their bcrypt checks run in.
//!
//! A password hash is slow on purpose (tens of milliseconds of CPU at cost 10), so it is the
//! price an anonymous caller can make the server pay. The rules that keep that price low:
//! - no hash runs unless some configured credential could match: without bcrypt users, a
//!   refused password costs a SHA-256 at most; a Bearer token (user [`BEARER`]) is never a
//!   user's password;
//! - with bcrypt users, every named credential costs one hash, whether the name exists or not
//!   (an unknown name is checked against a configured user's hash, so it costs what that user's
//!   check costs and timing does not tell which names exist);
//! - at most [`HashPool`]'s few hashes run at once, off the async workers, with a short queue;
//!   past it the request is refused as busy (503 with `Retry-After`) instead of taking every core;
//! - a successful check is remembered for a while, so a Terraform run pays it once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::tokens::{matches, parse_hash, Recent};

/// The user name a `Bearer` credential stands for (the HTTP layer's reading of
/// `Authorization: Bearer …`): reserved, so that a Bearer token is never checked as a user's
/// password.
pub const BEARER: &str = "bearer";

/// How a user's password is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Secret {
    /// `sha256:<hex>`: for random tokens, where a fast hash is enough.
    Sha256([u8; 32]),
    /// `$2a$`, `$2b$` or `$2y$` bcrypt (`htpasswd -nB NAME`, which asks for the password): for
    /// passwords people choose.
    Bcrypt(String),
}

/// Why a password could not be checked now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too many password checks are under way on this server; retry in a moment")]
pub struct Saturated;

/// The configured team users (`NAME:HASH`), the verifications that succeeded recently, and the
/// pool bcrypt runs in.
#[derive(Debug, Default)]
pub struct Users {
    users: HashMap<String, Secret>,
    /// The configured bcrypt hashes, in the order given: an unknown name is checked against
    /// one of them ([`Users::stand_in`]).
    bcrypt: Vec<String>,
    /// SHA-256 of (name, password, hash) of recent successful bcrypt checks: a Terraform run
    /// sends several requests.
    verified: Recent,
    pool: HashPool,
}

impl Users {
    /// Parses `NAME:HASH` entries; errors name the entry by its user name, never the hash.
    pub fn parse(entries: &[String]) -> Result<Users, String> {
        let mut users = HashMap::new();
        let mut bcrypt = Vec::new();
        for entry in entries {
            let (name, hash) = entry.split_once(':').ok_or_else(|| {
                "a team user must look like NAME:HASH, e.g. the output of `htpasswd -nB NAME` (it asks for the password)".to_owned()
            })?;
            if name.is_empty() {
                return Err("a team user has an empty name".into());
            }
            if name == BEARER {
                return Err(format!(
                    "the user name '{BEARER}' is reserved: 'Authorization: Bearer …' carries a team or OIDC token, never a user's password; choose another name"
                ));
            }
            let secret = if hash.starts_with("sha256:") {
                Secret::Sha256(parse_hash(hash).map_err(|e| format!("user {name}: {e}"))?)
            } else if ["$2a$", "$2b$", "$2y$"].iter().any(|p| hash.starts_with(p))
                && hash.len() == 60
            {
                bcrypt.push(hash.to_owned());
                Secret::Bcrypt(hash.to_owned())
            } else {
                return Err(format!(
                    "user {name}: the password hash must be bcrypt ($2y$…, from `htpasswd -nB`) or sha256:<64 hex digits>"
                ));
            };
            if users.insert(name.to_owned(), secret).is_some() {
                return Err(format!("user {name} is configured twice"));
            }
        }
        Ok(Users {
            users,
            bcrypt,
            ..Users::default()
        })
    }

    /// Whether no user is configured.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Whether `name` is a configured user whose password is `password`, checked now. bcrypt runs
    /// in the pool on a blocking thread, never on the async workers; an unknown name costs what
    /// a known one costs, and nothing at all when no user has a bcrypt hash. `Err` when the pool
    /// is saturated: nothing was checked.
    pub async fn verify(&self, name: &str, password: &str) -> Result<bool, Saturated> {
        let (hash, known) = match self.users.get(name) {
            Some(Secret::Sha256(hash)) => return Ok(matches(hash, password)),
            Some(Secret::Bcrypt(hash)) => (hash.clone(), true),
            None => match self.stand_in(name) {
                Some(hash) => (hash.to_owned(), false),
                None => return Ok(false),
            },
        };
        let key = remembered_key(name, password, &hash);
        if known && self.verified.contains(&key) {
            return Ok(true);
        }
        let password = zeroize::Zeroizing::new(password.to_owned());
        let checked = self
            .pool
            .run(move || bcrypt::verify(password.as_str(), &hash).unwrap_or(false))
            .await;
        let result = match checked {
            Ok(true) if known => "admitted",
            Ok(_) => "refused",
            Err(Saturated) => "busy",
        };
        metrics::counter!(gitstate_core::metrics::PASSWORD_CHECKS, "result" => result).increment(1);
        // `?` before `&&`: a saturated pool is busy for unknown names too.
        let checked = checked?;
        let ok = known && checked;
        if ok {
            self.verified.insert(key);
        }
        Ok(ok)
    }

    /// Whether `name` is a configured user whose password is `password`, from what is at hand:
    /// a SHA-256 user's hash, or a bcrypt check [`Users::verify`] made a moment ago. Never
    /// hashes: every request is verified first, so a user refused here was refused there.
    pub fn admits(&self, name: &str, password: &str) -> bool {
        match self.users.get(name) {
            Some(Secret::Sha256(hash)) => matches(hash, password),
            Some(Secret::Bcrypt(hash)) => self
                .verified
                .contains(&remembered_key(name, password, hash)),
            None => false,
        }
    }

    /// How many password hashes this process has run (for tests and benchmarks).
    pub fn hashes_run(&self) -> u64 {
        self.pool.hashed.load(Ordering::Relaxed)
    }

    /// The bcrypt hash an unknown `name` is checked against: one of the configured users', the
    /// same for the same name, so that its cost is a real user's; `None` without bcrypt users
    /// (or for [`BEARER`], which is never a user): nothing to compare with, nothing to hash.
    fn stand_in(&self, name: &str) -> Option<&str> {
        if self.bcrypt.is_empty() || name == BEARER || name.is_empty() {
            return None;
        }
        let digest = Sha256::digest(name.as_bytes());
        let pick = u64::from_le_bytes(digest[..8].try_into().unwrap_or_default());
        let index = usize::try_from(pick % self.bcrypt.len() as u64).unwrap_or(0);
        self.bcrypt.get(index).map(String::as_str)
    }
}

/// The memory key of a successful bcrypt check: SHA-256 of name, password and hash.
fn remembered_key(name: &str, password: &str, hash: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([0])
        .chain_update(password.as_bytes())
        .chain_update([0])
        .chain_update(hash.as_bytes())
        .finalize()
        .into()
}

/// Where password hashes run: at most [`HashPool::running`] at once (half the cores, at least
/// one), each on a blocking thread; at most [`QUEUED_PER_RUNNING`] times as many wait, for at
/// most [`LONGEST_WAIT`]. Anything past that is [`Saturated`].
#[derive(Debug)]
pub(crate) struct HashPool {
    running: usize,
    permits: tokio::sync::Semaphore,
    /// Checks running or waiting.
    admitted: AtomicUsize,
    /// Hashes run so far.
    hashed: AtomicU64,
}

/// Checks that may wait per check that may run.
const QUEUED_PER_RUNNING: usize = 4;
/// The longest a check waits for its turn.
const LONGEST_WAIT: Duration = Duration::from_secs(2);

impl Default for HashPool {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        HashPool::new((cores / 2).max(1))
    }
}

impl HashPool {
    pub(crate) fn new(running: usize) -> HashPool {
        HashPool {
            running,
            permits: tokio::sync::Semaphore::new(running),
            admitted: AtomicUsize::new(0),
            hashed: AtomicU64::new(0),
        }
    }

    /// Runs `hash` when a place is free, or refuses at once when too many wait already.
    async fn run(&self, hash: impl FnOnce() -> bool + Send + 'static) -> Result<bool, Saturated> {
        let most = self.running * (1 + QUEUED_PER_RUNNING);
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= most {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return Err(Saturated);
        }
        let _admitted = Admitted(&self.admitted);
        let _permit = tokio::time::timeout(LONGEST_WAIT, self.permits.acquire())
            .await
            .map_err(|_| Saturated)?
            .map_err(|_| Saturated)?;
        self.hashed.fetch_add(1, Ordering::Relaxed);
        Ok(tokio::task::spawn_blocking(hash).await.unwrap_or(false))
    }
}

/// A check counted in [`HashPool::admitted`] until it ends, however it ends.
struct Admitted<'a>(&'a AtomicUsize);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::hash_of;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn users_with_bcrypt_and_sha256() {
        let bcrypt_hash = bcrypt::hash("correct horse", 4).unwrap();
        let users = Users::parse(&[
            format!("alice:{bcrypt_hash}"),
            format!("ci:{}", hash_of("tok-123")),
        ])
        .unwrap();
        runtime().block_on(async {
            assert_eq!(users.verify("alice", "correct horse").await, Ok(true));
            assert_eq!(users.verify("alice", "wrong").await, Ok(false));
            assert_eq!(users.verify("bob", "correct horse").await, Ok(false));
            assert_eq!(users.verify("ci", "tok-123").await, Ok(true));
            assert_eq!(users.verify("ci", "nope").await, Ok(false));
            assert_eq!(users.verify("alice", "tok-123").await, Ok(false));
        });
        assert!(users.admits("alice", "correct horse"), "remembered");
        assert!(!users.admits("alice", "wrong"));
        assert!(!users.admits("bob", "correct horse"));
        assert!(users.admits("ci", "tok-123"));
        for bad in ["alice", ":$2y$", "alice:md5:x", "alice:$2y$10$short"] {
            let e = Users::parse(&[bad.to_owned()]).unwrap_err();
            assert!(!e.contains("$2y$10$short"), "{e}");
        }
        assert!(Users::parse(&[format!("a:{bcrypt_hash}"), format!("a:{bcrypt_hash}")]).is_err());
        let reserved = Users::parse(&[format!("bearer:{bcrypt_hash}")]).unwrap_err();
        assert!(reserved.contains("reserved"), "{reserved}");
    }

    /// Junk costs no hash where nothing could match it (issue 55): without bcrypt users, no
    /// name and no password is hashed; with them, a Bearer token, an empty name and a
    /// remembered success are not either, while any other name costs exactly one hash, known or
    /// not, against a hash of the same cost.
    #[test]
    fn a_hash_runs_only_where_a_configured_user_could_match() {
        let cheap = Users::parse(&[format!("ci:{}", hash_of("tok"))]).unwrap();
        let bcrypt_hash = bcrypt::hash("pw", 4).unwrap();
        let with_bcrypt = Users::parse(&[
            format!("alice:{bcrypt_hash}"),
            format!("ci:{}", hash_of("tok")),
        ])
        .unwrap();
        runtime().block_on(async {
            for (name, password) in [("ci", "x"), ("mallory", "x"), (BEARER, "junk"), ("", "x")] {
                assert_eq!(cheap.verify(name, password).await, Ok(false));
            }
            assert_eq!(cheap.hashes_run(), 0, "no user has a bcrypt hash");

            for (name, password) in [(BEARER, "junk"), ("", "x"), ("ci", "x")] {
                assert_eq!(with_bcrypt.verify(name, password).await, Ok(false));
            }
            assert_eq!(
                with_bcrypt.hashes_run(),
                0,
                "a Bearer token is never a password"
            );
            assert_eq!(with_bcrypt.verify("mallory", "pw").await, Ok(false));
            assert_eq!(with_bcrypt.hashes_run(), 1, "an unknown name costs a hash");
            assert_eq!(with_bcrypt.verify("alice", "wrong").await, Ok(false));
            assert_eq!(with_bcrypt.hashes_run(), 2, "as a known one does");
            assert_eq!(with_bcrypt.verify("alice", "pw").await, Ok(true));
            assert_eq!(with_bcrypt.verify("alice", "pw").await, Ok(true));
            assert_eq!(with_bcrypt.hashes_run(), 3, "a success is remembered");
        });
        assert_eq!(
            with_bcrypt.stand_in("mallory"),
            Some(bcrypt_hash.as_str()),
            "the stand-in is a configured user's hash: the same cost"
        );
    }

    /// bcrypt runs on a blocking thread: on a runtime with a single worker thread, a ticker keeps
    /// ticking while a slow check (cost 10: tens of milliseconds optimised, about a second in a
    /// debug build) is under way. Run on the worker, the check would hold it and the ticker would
    /// not tick at all.
    #[test]
    fn bcrypt_runs_off_the_async_workers() {
        let slow = bcrypt::hash("correct horse", 10).unwrap();
        let users = std::sync::Arc::new(Users::parse(&[format!("alice:{slow}")]).unwrap());
        let (ticks, ok, wrong) = runtime().block_on(async {
            let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counter = ticks.clone();
            let ticker = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
            tokio::task::yield_now().await;
            let wrong = users.verify("alice", "wrong").await;
            let during = ticks.load(Ordering::Relaxed);
            let ok = users.verify("alice", "correct horse").await;
            ticker.abort();
            (during, ok, wrong)
        });
        assert_eq!(ok, Ok(true), "the right password was refused");
        assert_eq!(wrong, Ok(false), "a wrong password was admitted");
        assert!(
            ticks >= 3,
            "the async worker was blocked during bcrypt (the ticker ticked {ticks} times)"
        );
        // Remembered now: the synchronous check answers from memory.
        assert!(users.admits("alice", "correct horse"));
    }

    /// The pool runs at most its size at once and lets a few more wait; the rest are refused
    /// at once, without a hash.
    #[test]
    fn a_saturated_pool_refuses_without_hashing() {
        let pool = std::sync::Arc::new(HashPool::new(1));
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Arc::new(std::sync::Mutex::new(gate));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let results = runtime.block_on(async {
            let most = 1 + QUEUED_PER_RUNNING;
            let mut held = Vec::new();
            for _ in 0..most {
                let (pool, gate) = (pool.clone(), gate.clone());
                held.push(tokio::spawn(async move {
                    pool.run(move || gate.lock().map(|g| g.recv().is_ok()).unwrap_or(false))
                        .await
                }));
            }
            while pool.admitted.load(Ordering::Acquire) < most
                || pool.hashed.load(Ordering::Relaxed) < 1
            {
                tokio::task::yield_now().await;
            }
            let refused = pool.run(|| true).await;
            assert_eq!(
                pool.hashed.load(Ordering::Relaxed),
                1,
                "one runs, the rest wait"
            );
            for _ in 0..most {
                release.send(()).unwrap();
            }
            let mut answers = Vec::new();
            for task in held {
                answers.push(task.await.unwrap());
            }
            (refused, answers)
        });
        assert_eq!(results.0, Err(Saturated));
        assert!(results.1.iter().all(|r| *r == Ok(true)), "{:?}", results.1);
        assert_eq!(pool.hashed.load(Ordering::Relaxed), 5);
        assert_eq!(pool.admitted.load(Ordering::Acquire), 0);
    }
}
