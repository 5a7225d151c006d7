//! PGP as a sops master key, through the user's `gpg` binary like sops 3.x does (its fallback and,
//! with GnuPG 2.1+ keyboxes, its only working path): the data key is encrypted to a fingerprint as
//! an ASCII-armored PGP message, entries are `pgp: [{created_at, enc, fp}]`.
//!
//! The data key goes to and comes from `gpg` through pipes only (never argv, never a file). The
//! GnuPG home is sops' choice: `$GNUPGHOME`, else `~/.gnupg`; the binary is `gpg`, or
//! `$SOPS_GPG_EXEC` when that is an absolute path. Unlike sops, gpg runs with `--batch` and
//! `--pinentry-mode error`: a server never waits for a passphrase prompt (a key whose passphrase is
//! not cached in gpg-agent fails with gpg's reason instead).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use gitstate_sops::{now_rfc3339, KeyEntry, MasterKey, Node, SopsError, Zeroizing};

use crate::SealConfigError;

/// sops' variable naming another gpg binary (used only when it is an absolute path).
pub const SOPS_GPG_EXEC: &str = "SOPS_GPG_EXEC";

/// One PGP key, by fingerprint, used through `gpg`.
#[derive(Debug, Clone)]
pub struct PgpKey {
    fingerprint: String,
    gpg: PathBuf,
    home: PathBuf,
    timeout: std::time::Duration,
}

/// How long one gpg run may take before it is stopped.
pub const GPG_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Upper-case hex without spaces (sops removes spaces; fingerprints compare case-insensitively).
pub fn normalize_fingerprint(fp: &str) -> String {
    fp.chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_uppercase()
}

impl PgpKey {
    /// A key for `fingerprint` (40 hex digits for v4 keys, 64 for v5/v6; spaces are ignored),
    /// with the gpg binary and home of the environment.
    pub fn new(fingerprint: &str) -> Result<PgpKey, SealConfigError> {
        let fp = normalize_fingerprint(fingerprint);
        if !(fp.len() == 40 || fp.len() == 64) || !fp.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(SealConfigError(format!(
                "PGP key '{fingerprint}' is not a full fingerprint (40 hex digits, as `gpg --list-keys --with-colons` prints in its fpr line); short key ids are ambiguous and are not accepted"
            )));
        }
        let gpg = std::env::var_os(SOPS_GPG_EXEC)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| PathBuf::from("gpg"));
        let home = std::env::var_os("GNUPGHOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".gnupg")
            });
        Ok(PgpKey {
            fingerprint: fp,
            gpg,
            home,
            timeout: GPG_TIMEOUT,
        })
    }

    /// This key with another GnuPG home (instead of `$GNUPGHOME` / `~/.gnupg`).
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> PgpKey {
        self.home = home.into();
        self
    }

    /// The normalized fingerprint.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn err(&self, reason: String) -> SopsError {
        SopsError::Key {
            kind: "pgp".into(),
            id: self.fingerprint.clone(),
            reason,
        }
    }

    /// Runs gpg with `args` after the common ones, feeds `input` on stdin and returns stdout
    /// (zeroed when dropped). A failure carries gpg's last meaningful stderr line.
    fn run(
        &self,
        action: &str,
        args: &[&str],
        input: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, SopsError> {
        let mut child = Command::new(&self.gpg)
            .arg("--no-default-keyring")
            .arg("--homedir")
            .arg(&self.home)
            .args(["--batch", "--no-tty", "--pinentry-mode", "error"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                self.err(format!(
                    "{action}: the gpg binary ({}) could not be run: {e}; install GnuPG 2.1 or later, or set {SOPS_GPG_EXEC} to its absolute path",
                    self.gpg.display()
                ))
            })?;
        let mut stderr = child.stderr.take();
        let errors = std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(s) = stderr.as_mut() {
                let _ = s.read_to_end(&mut text);
            }
            text
        });
        // A gpg that hangs (an agent that does not answer) is killed at the deadline, so a
        // request never waits on it for longer.
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let deadline = std::time::Instant::now() + self.timeout;
        let waiter = std::thread::spawn(move || loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(Some(status)),
                Ok(None) if std::time::Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Ok(None);
                }
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(5)),
                Err(e) => return Err(e),
            }
        });
        let wrote = match stdin {
            Some(mut stdin) => stdin.write_all(input),
            None => Ok(()),
        };
        // room for an armored message or a data key, so reading does not reallocate (a
        // reallocation would leave a copy of the key behind)
        let mut out = Zeroizing::new(Vec::with_capacity(8192));
        let read = match stdout {
            Some(mut stdout) => stdout.read_to_end(&mut out).map(|_| ()),
            None => Ok(()),
        };
        let status = waiter
            .join()
            .map_err(|_| self.err(format!("{action}: waiting for gpg failed")))?
            .map_err(|e| self.err(format!("{action}: waiting for gpg failed: {e}")))?;
        let stderr = errors.join().unwrap_or_default();
        let Some(status) = status else {
            return Err(self.err(format!(
                "{action}: gpg did not finish within {} s and was stopped (is gpg-agent answering?)",
                self.timeout.as_secs()
            )));
        };
        if !status.success() {
            return Err(self.err(format!(
                "{action} failed: {}",
                gpg_reason(&stderr, status.code())
            )));
        }
        wrote.map_err(|e| self.err(format!("{action}: writing to gpg failed: {e}")))?;
        read.map_err(|e| self.err(format!("{action}: reading from gpg failed: {e}")))?;
        Ok(out)
    }
}

/// gpg's reason for a failure, on one line: the last `gpg: …` line of stderr that says more than
/// a progress note, or the exit status.
fn gpg_reason(stderr: &[u8], code: Option<i32>) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let pick = lines
        .iter()
        .rev()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("fail") || l.contains("error") || l.contains("no ") || l.contains("not ")
        })
        .or(lines.last());
    match (pick, code) {
        (Some(line), _) => line.chars().take(300).collect(),
        (None, Some(code)) => format!("gpg exited with status {code}"),
        (None, None) => "gpg was killed by a signal".to_owned(),
    }
}

impl MasterKey for PgpKey {
    fn kind(&self) -> &'static str {
        "pgp"
    }

    fn id(&self) -> String {
        self.fingerprint.clone()
    }

    fn wrap(&self, data_key: &[u8]) -> Result<KeyEntry, SopsError> {
        // sops: --no-default-recipient --yes --encrypt -a -r FP --trusted-key SHORT --no-encrypt-to
        let short = &self.fingerprint[self.fingerprint.len() - 16..];
        let out = self.run(
            "gpg --encrypt",
            &[
                "--no-default-recipient",
                "--yes",
                "--encrypt",
                "--armor",
                "--recipient",
                &self.fingerprint,
                "--trusted-key",
                short,
                "--no-encrypt-to",
            ],
            data_key,
        )?;
        let armored = std::str::from_utf8(&out)
            .map_err(|_| self.err("gpg --encrypt wrote no ASCII armor".into()))?
            .trim();
        if !armored.starts_with("-----BEGIN PGP MESSAGE-----") {
            return Err(self.err("gpg --encrypt wrote no ASCII-armored PGP message".into()));
        }
        Ok(KeyEntry {
            kind: "pgp".into(),
            fields: vec![
                ("created_at".into(), Node::Str(now_rfc3339())),
                ("enc".into(), Node::Str(armored.to_owned())),
                ("fp".into(), Node::Str(self.fingerprint.clone())),
            ],
        })
    }

    fn unwrap(&self, entry: &KeyEntry) -> Result<Option<Zeroizing<Vec<u8>>>, SopsError> {
        if entry.field("fp").map(normalize_fingerprint).as_deref() != Some(&self.fingerprint) {
            return Ok(None);
        }
        let enc = entry.field("enc").ok_or_else(|| {
            SopsError::Metadata(format!("pgp entry for {} has no enc", self.fingerprint))
        })?;
        let key = self.run(
            "gpg --decrypt",
            &["--use-agent", "--decrypt"],
            enc.as_bytes(),
        )?;
        if key.is_empty() {
            return Err(self.err("gpg --decrypt returned nothing".into()));
        }
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_normalized_and_checked() {
        let key = PgpKey::new("1e2f 3a4b 5c6d 7e8f 9a0b 1c2d 3e4f 5a6b 7c8d 9e0f").unwrap();
        assert_eq!(
            key.fingerprint(),
            "1E2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B7C8D9E0F"
        );
        for bad in ["", "DEADBEEF", "1E2F3A4B5C6D7E8F", &"Z".repeat(40)] {
            let e = PgpKey::new(bad).expect_err(bad);
            assert!(e.0.contains("not a full fingerprint"), "{e}");
        }
    }

    #[test]
    fn gpg_reasons_are_one_line() {
        let stderr = b"gpg: encrypted with 255-bit ECDH key, ID 0123, created 2026-01-01\n      \"x <x@example.com>\"\ngpg: decryption failed: No secret key\n";
        assert_eq!(
            gpg_reason(stderr, Some(2)),
            "gpg: decryption failed: No secret key"
        );
        assert_eq!(gpg_reason(b"", Some(2)), "gpg exited with status 2");
    }

    #[test]
    fn a_missing_gpg_binary_is_named() {
        let key = PgpKey {
            fingerprint: "1E2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B7C8D9E0F".into(),
            gpg: PathBuf::from("/nonexistent/gpg"),
            home: PathBuf::from("/nonexistent"),
            timeout: GPG_TIMEOUT,
        };
        let e = key.wrap(&[7u8; 32]).expect_err("no gpg");
        let text = e.to_string();
        assert!(
            text.contains("1E2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B7C8D9E0F"),
            "{text}"
        );
        assert!(text.contains("/nonexistent/gpg"), "{text}");
    }

    #[test]
    fn a_gpg_that_hangs_is_stopped() {
        let dir = std::env::temp_dir().join(format!("gs-hang-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("gpg");
        std::fs::write(&script, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let key = PgpKey {
            fingerprint: "1E2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B7C8D9E0F".into(),
            gpg: script,
            home: dir.clone(),
            timeout: std::time::Duration::from_millis(300),
        };
        let started = std::time::Instant::now();
        let e = key.wrap(&[7u8; 32]).expect_err("stopped");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert!(e.to_string().contains("did not finish"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn entries_of_other_fingerprints_are_not_mine() {
        let key = PgpKey::new("1E2F3A4B5C6D7E8F9A0B1C2D3E4F5A6B7C8D9E0F").unwrap();
        let entry = KeyEntry {
            kind: "pgp".into(),
            fields: vec![
                (
                    "fp".into(),
                    Node::Str("AAAA3A4B5C6D7E8F9A0B1C2D3E4F5A6B7C8D9E0F".into()),
                ),
                ("enc".into(), Node::Str("x".into())),
            ],
        };
        assert!(key.unwrap(&entry).unwrap().is_none());
    }
}
