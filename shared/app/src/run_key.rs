//! The run key (DESIGN §6, "A run outlives its token"): a secret of the deployment that marks
//! each OIDC token it admits, `HMAC-SHA256(run key, token)`. The lock such a token takes is
//! sealed with that mark (`gitstate_core::LockToken`), so a lock commit's trailer counts only
//! where gitstate wrote it: someone with push access who holds a stolen token cannot make one.
//! Every process that serves the same repositories (every Lambda container) needs the same key
//! for a run whose token expires to finish through any of them; without one, each process makes
//! its own and says so.
//!
//! It is configured as `GITSTATE_RUN_KEY` (the value) or a file (`--run-key-file`,
//! `GITSTATE_RUN_KEY_FILE`, `auth { run_key_file = "…" }`), read at start; no flag or file key
//! holds the key itself. It is zeroed when dropped and never printed: `Debug` and `gitstate
//! config show` give only where it came from.

use std::ffi::OsString;
use std::path::Path;

use gitstate_core::Mark;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// The variable that holds the run key itself.
pub const RUN_KEY: &str = "GITSTATE_RUN_KEY";

/// The shortest run key accepted, in bytes.
pub const MIN_RUN_KEY_BYTES: usize = 32;

/// Where a run key can be configured, for the sentences that ask for one.
const RUN_KEY_SETTINGS: &str =
    "GITSTATE_RUN_KEY, or a file: --run-key-file, GITSTATE_RUN_KEY_FILE or auth.run_key_file";

/// SHA-256's block: HMAC's key is made this long (RFC 2104).
const BLOCK: usize = 64;

/// The deployment's run key, and where it was configured.
#[derive(Clone, PartialEq, Eq)]
pub struct RunKey {
    /// HMAC's block-sized key (K0 of RFC 2104): the key, hashed when longer than a block,
    /// padded with zeros. Kept in this form so that marking a token cannot fail.
    block: Zeroizing<[u8; BLOCK]>,
    /// Where it was configured, e.g. `environment GITSTATE_RUN_KEY`; `random` for a key this
    /// process made.
    pub source: String,
}

impl RunKey {
    /// The run key `value`, configured by `source`: a trailing newline is trimmed, and at least
    /// [`MIN_RUN_KEY_BYTES`] bytes must remain, else a sentence naming `source` (never the
    /// value).
    pub fn new(value: &[u8], source: impl Into<String>) -> Result<RunKey, String> {
        let source = source.into();
        let mut end = value.len();
        while end > 0 && matches!(value[end - 1], b'\n' | b'\r') {
            end -= 1;
        }
        let key = &value[..end];
        if key.len() < MIN_RUN_KEY_BYTES {
            return Err(format!(
                "the run key from {source} is shorter than {MIN_RUN_KEY_BYTES} bytes; make one with `openssl rand -hex 32` and give every gitstate process that serves these repositories the same"
            ));
        }
        Ok(RunKey::from_key(key, source))
    }

    /// `key` (any length) in HMAC's block form.
    fn from_key(key: &[u8], source: String) -> RunKey {
        let mut block = Zeroizing::new([0u8; BLOCK]);
        let hashed;
        let key = if key.len() > BLOCK {
            hashed = Zeroizing::new(<[u8; 32]>::from(Sha256::digest(key)));
            &hashed[..]
        } else {
            key
        };
        for (to, from) in block.iter_mut().zip(key) {
            *to = *from;
        }
        RunKey { block, source }
    }

    /// The run key in the file `file`, read now.
    pub fn read(file: &Path) -> Result<RunKey, String> {
        let value = Zeroizing::new(std::fs::read(file).map_err(|e| {
            format!(
                "cannot read the run key file {} (--run-key-file, GITSTATE_RUN_KEY_FILE or auth.run_key_file): {e}",
                file.display()
            )
        })?);
        RunKey::new(&value, format!("the file {}", file.display()))
    }

    /// The run key `GITSTATE_RUN_KEY` holds in the environment `env` reads, when it is set and
    /// not empty.
    pub fn from_env(env: &dyn Fn(&str) -> Option<OsString>) -> Result<Option<RunKey>, String> {
        let Some(value) = env(RUN_KEY).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let value = Zeroizing::new(value.into_string().map_err(|_| {
            format!("{RUN_KEY} is not UTF-8; give the run key as text (`openssl rand -hex 32`)")
        })?);
        RunKey::new(value.as_bytes(), format!("environment {RUN_KEY}")).map(Some)
    }

    /// A random key of this process only.
    pub fn random() -> RunKey {
        let value = Zeroizing::new(rand::random::<[u8; MIN_RUN_KEY_BYTES]>());
        RunKey::from_key(&value[..], "random".into())
    }

    /// The mark of the OIDC token `token`: HMAC-SHA256 keyed by the run key.
    pub fn mark(&self, token: &str) -> Mark {
        let mut key = hmac::digest::Key::<Hmac<Sha256>>::default();
        for (to, from) in key.iter_mut().zip(self.block.iter()) {
            *to = *from;
        }
        let mut mac = <Hmac<Sha256> as Mac>::new(&key);
        zeroize::Zeroize::zeroize(key.as_mut_slice());
        mac.update(token.as_bytes());
        Mark::new(mac.finalize().into_bytes().into())
    }
}

impl std::fmt::Debug for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunKey")
            .field("key", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

/// The run key at start: the `value` configured (`auth.run_key`), else the `file`
/// (`auth.run_key_file`), read now; else a random key of this process, with one INFO line when
/// OIDC issuers are configured (`oidc`): a run whose token expires can then finish only through
/// this process.
pub fn load(value: Option<&RunKey>, file: Option<&Path>, oidc: bool) -> Result<RunKey, String> {
    if let Some(key) = value {
        return Ok(key.clone());
    }
    if let Some(file) = file {
        return RunKey::read(file);
    }
    if oidc {
        tracing::info!(
            "no run key is configured ({RUN_KEY_SETTINGS}): this process made its own, so a run whose OIDC token expires can finish only through this process; give every process the same key"
        );
    }
    Ok(RunKey::random())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_key_needs_32_bytes_after_its_trailing_newline() {
        assert!(RunKey::new(KEY.as_bytes(), "test").is_ok());
        let with_newline = format!("{KEY}\n");
        assert_eq!(
            RunKey::new(with_newline.as_bytes(), "a").unwrap().mark("t"),
            RunKey::new(KEY.as_bytes(), "b").unwrap().mark("t"),
            "the trailing newline is not part of the key"
        );
        let short = format!("{}\r\n", &KEY[..31]);
        let refused = RunKey::new(short.as_bytes(), "environment GITSTATE_RUN_KEY").unwrap_err();
        assert!(
            refused.contains("environment GITSTATE_RUN_KEY") && refused.contains("32 bytes"),
            "{refused}"
        );
        assert!(!refused.contains(&KEY[..31]), "the value in {refused}");
    }

    #[test]
    fn a_mark_is_hmac_sha256_of_the_token_under_the_key() {
        for key in [KEY.to_owned(), KEY.repeat(2), KEY.repeat(5)] {
            let mut reference = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).unwrap();
            reference.update(b"a.token.here");
            let expected: [u8; 32] = reference.finalize().into_bytes().into();
            assert_eq!(
                RunKey::new(key.as_bytes(), "test")
                    .unwrap()
                    .mark("a.token.here"),
                Mark::new(expected),
                "a key of {} bytes",
                key.len()
            );
        }
        assert_ne!(RunKey::random().mark("t"), RunKey::random().mark("t"));
    }

    #[test]
    fn a_key_file_is_read_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run-key");
        std::fs::write(&file, format!("{KEY}\n")).unwrap();
        let key = RunKey::read(&file).unwrap();
        assert_eq!(key.source, format!("the file {}", file.display()));
        assert_eq!(
            key.mark("t"),
            RunKey::new(KEY.as_bytes(), "").unwrap().mark("t")
        );
        let missing = dir.path().join("missing");
        let refused = RunKey::read(&missing).unwrap_err();
        assert!(
            refused.contains(&missing.display().to_string()) && refused.contains("--run-key-file"),
            "{refused}"
        );
        std::fs::write(&file, "short\n").unwrap();
        let refused = RunKey::read(&file).unwrap_err();
        assert!(refused.contains("shorter than 32 bytes"), "{refused}");
    }

    #[test]
    fn the_start_reads_the_configured_key_or_stops_or_makes_one() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let refused = load(None, Some(&missing), true).unwrap_err();
        assert!(
            refused.contains(&missing.display().to_string()),
            "{refused}"
        );
        let configured = RunKey::new(KEY.as_bytes(), "environment GITSTATE_RUN_KEY").unwrap();
        assert_eq!(
            load(Some(&configured), Some(&missing), true).unwrap(),
            configured,
            "the value, not the file"
        );
        let made = load(None, None, true).unwrap();
        assert_eq!(made.source, "random");
        assert_ne!(made.mark("t"), load(None, None, true).unwrap().mark("t"));
    }

    #[test]
    fn the_key_is_never_in_debug() {
        let key = RunKey::new(KEY.as_bytes(), "environment GITSTATE_RUN_KEY").unwrap();
        let shown = format!("{key:?} {:?}", key.mark("token"));
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
