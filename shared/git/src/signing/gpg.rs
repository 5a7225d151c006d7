//! OpenPGP commit signatures through the user's `gpg` (as `git commit -S` makes them): the
//! armored secret key is imported once into a private GnuPG home (mode 0700, removed with its
//! agent when the signer is dropped), and each commit is signed by
//! `gpg --detach-sign --armor --local-user FPR` with the commit on stdin. Key material goes
//! through pipes only, never on argv or into a log; gpg's reasons are shown in one line.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use gitstate_core::StoreError;

/// An imported OpenPGP secret key.
pub(super) struct GpgKey {
    home: PathBuf,
    fingerprint: String,
}

impl GpgKey {
    /// Imports the armored secret key `text`; `Err` is the rest of a sentence.
    pub(super) fn import(text: &str) -> Result<GpgKey, String> {
        static HOMES: AtomicU64 = AtomicU64::new(0);
        // Short: gpg-agent's socket lives in it, and socket paths are limited to ~100 bytes.
        let home = std::env::temp_dir().join(format!(
            "gs-sign-{}-{}",
            std::process::id(),
            HOMES.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home)
            .and_then(|()| {
                std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            })
            .map_err(|e| format!("cannot be imported: a GnuPG home cannot be made ({e})"))?;
        let mut key = GpgKey {
            home,
            fingerprint: String::new(),
        };
        key.gpg(&["--import"], text.as_bytes())
            .map_err(|why| format!("cannot be imported by gpg: {why}"))?;
        let listing = key
            .gpg(&["--with-colons", "--list-secret-keys"], b"")
            .map_err(|why| format!("cannot be listed by gpg: {why}"))?;
        key.fingerprint = String::from_utf8_lossy(&listing)
            .lines()
            .find(|line| line.starts_with("fpr:"))
            .and_then(|line| line.split(':').nth(9))
            .map(str::to_owned)
            .ok_or("holds no OpenPGP secret key")?;
        Ok(key)
    }

    pub(super) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The armored detached signature of `payload`, without a final line break.
    pub(super) fn sign(&self, payload: &[u8]) -> Result<String, StoreError> {
        let fingerprint = self.fingerprint.clone();
        let signature = self
            .gpg(
                &[
                    "--pinentry-mode",
                    "error",
                    "--local-user",
                    &fingerprint,
                    "--detach-sign",
                    "--armor",
                ],
                payload,
            )
            .map_err(|why| StoreError::Internal(format!("gpg could not sign a commit: {why}")))?;
        Ok(String::from_utf8_lossy(&signature).trim_end().to_owned())
    }

    /// `gpg` on this home with `input` on stdin: its stdout, or its reason in one line.
    fn gpg(&self, args: &[&str], input: &[u8]) -> Result<Vec<u8>, String> {
        let mut child = Command::new("gpg")
            .arg("--homedir")
            .arg(&self.home)
            .args(["--batch", "--no-tty", "--quiet"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("gpg cannot be run ({e}); install GnuPG"))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A commit or a key is small: well within the pipe's buffer.
            stdin
                .write_all(input)
                .map_err(|e| format!("writing to gpg: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("waiting for gpg: {e}"))?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        let reason = String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("no reason given")
            .to_owned();
        Err(reason)
    }
}

impl Drop for GpgKey {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(&self.home)
            .args(["--kill", "gpg-agent"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}
