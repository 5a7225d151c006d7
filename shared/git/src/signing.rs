//! Commit signatures (DESIGN §6 `signing_key`): every commit gitstate writes carries a `gpgsig`
//! header that `git verify-commit` checks, so a "require signed commits" rule admits it. An
//! OpenSSH private key (ed25519 or ECDSA P-256, without a passphrase) signs SSHSIG signatures in
//! the `git` namespace with SHA-512, as `git -c gpg.format=ssh commit -S` does; GitHub and GitLab
//! verify them against the key registered for the bot.
//!
//! The key is parsed here, once, when the store is configured; its bytes are never logged (the
//! [`Debug`] form is the public key's fingerprint).

use std::fmt;

use gitstate_core::StoreError;
use ssh_key::{HashAlg, LineEnding, PrivateKey};

/// A key that signs commits.
pub struct Signer {
    key: PrivateKey,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signer({})", self.fingerprint())
    }
}

impl PartialEq for Signer {
    fn eq(&self, other: &Self) -> bool {
        self.key.public_key() == other.key.public_key()
    }
}

impl Eq for Signer {}

impl Signer {
    /// Reads a private key file's text. `Err` is the rest of a sentence naming what is wrong,
    /// never the key's content.
    pub fn from_text(text: &str) -> Result<Signer, String> {
        let trimmed = text.trim_start();
        if trimmed.starts_with("-----BEGIN PGP PRIVATE KEY BLOCK-----") {
            return Err("is an OpenPGP key; gitstate signs with an OpenSSH key (ssh-keygen -t ed25519), which GitHub and GitLab verify as SSH commit signatures".into());
        }
        if !trimmed.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----") {
            return Err("is not an OpenSSH private key (-----BEGIN OPENSSH PRIVATE KEY-----, as ssh-keygen writes it)".into());
        }
        let key = PrivateKey::from_openssh(trimmed)
            .map_err(|e| format!("is an OpenSSH private key gitstate cannot read ({e})"))?;
        if key.is_encrypted() {
            return Err("is protected by a passphrase; give gitstate a key without one (ssh-keygen -p -N '' -f FILE) and keep the file secret".into());
        }
        let signer = Signer { key };
        // A key type this build cannot sign with (RSA, DSA) is found now, not on the first write.
        signer
            .sign(b"gitstate checks that this key signs")
            .map_err(|_| {
                format!(
                    "is a {} key, which gitstate does not sign with; use ed25519 (ssh-keygen -t ed25519) or ECDSA P-256",
                    signer.key.algorithm()
                )
            })?;
        Ok(signer)
    }

    /// The public key's SHA-256 fingerprint (`SHA256:…`), as `ssh-keygen -l` shows it.
    pub fn fingerprint(&self) -> String {
        self.key.fingerprint(HashAlg::Sha256).to_string()
    }

    /// The public key in `authorized_keys` form (`ssh-ed25519 AAAA…`): what to register with
    /// the forge or put into an `allowed_signers` file.
    pub fn public_key(&self) -> String {
        self.key.public_key().to_openssh().unwrap_or_default()
    }

    /// The armored signature of `payload` (the commit without its `gpgsig` header), without a
    /// final line break.
    pub(crate) fn sign(&self, payload: &[u8]) -> Result<String, StoreError> {
        let signature = self
            .key
            .sign("git", HashAlg::Sha512, payload)
            .map_err(|e| StoreError::Internal(format!("signing a commit: {e}")))?;
        let armored = signature
            .to_pem(LineEnding::LF)
            .map_err(|e| StoreError::Internal(format!("encoding a commit signature: {e}")))?;
        Ok(armored.trim_end().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh ed25519 key from `ssh-keygen -t ed25519 -N ''`: its private key's text.
    fn ed25519() -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key");
        gitstate_tests::ssh_keygen(&path);
        std::fs::read_to_string(path).expect("the key")
    }

    #[test]
    fn an_ed25519_key_signs_in_the_git_namespace_and_never_shows_itself() {
        let text = ed25519();
        let signer = Signer::from_text(&text).expect("a key");
        let armored = signer.sign(b"tree 0\n").expect("a signature");
        assert!(
            armored.starts_with("-----BEGIN SSH SIGNATURE-----\n"),
            "{armored}"
        );
        assert!(
            armored.ends_with("-----END SSH SIGNATURE-----"),
            "{armored}"
        );
        let parsed = ssh_key::SshSig::from_pem(&armored).expect("SSHSIG");
        assert_eq!(parsed.namespace(), "git");
        assert_eq!(parsed.hash_alg(), HashAlg::Sha512);
        signer
            .key
            .public_key()
            .verify("git", b"tree 0\n", &parsed)
            .expect("verifies");
        let shown = format!("{signer:?}");
        assert!(shown.starts_with("Signer(SHA256:"), "{shown}");
        assert!(
            !shown.contains("OPENSSH") && !shown.contains(&text[40..60]),
            "{shown}"
        );
        assert!(signer.public_key().starts_with("ssh-ed25519 "));
    }

    /// The real git checks the commit's signature against an `allowed_signers` file, as a
    /// server's hook or `git log --show-signature` would.
    #[test]
    fn git_verify_commit_accepts_a_signed_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = gix::init_bare(dir.path().join("r.git")).expect("a repository");
        let signer = Signer::from_text(&ed25519()).expect("a key");
        let allowed = dir.path().join("allowed_signers");
        std::fs::write(&allowed, format!("bot@acme.test {}\n", signer.public_key())).unwrap();
        let committer = crate::Committer {
            name: "bot".into(),
            email: "bot@acme.test".into(),
            signer: Some(std::sync::Arc::new(signer)),
        };
        let tree = gix::ObjectId::empty_tree(gix::hash::Kind::Sha1);
        repo.write_object(gix::objs::Tree::empty())
            .expect("the empty tree");
        let commit = crate::objects::commit_on(
            &repo,
            tree,
            None,
            &gitstate_core::Message::from("Update x\n"),
            &committer,
        )
        .expect("a signed commit");
        let verify = std::process::Command::new("git")
            .arg("-C")
            .arg(dir.path().join("r.git"))
            .arg("-c")
            .arg(format!("gpg.ssh.allowedSignersFile={}", allowed.display()))
            .args(["verify-commit", "-v", &commit.to_string()])
            .output()
            .expect("git");
        let said = String::from_utf8_lossy(&verify.stderr);
        assert!(verify.status.success(), "{said}");
        assert!(
            said.contains("Good \"git\" signature for bot@acme.test"),
            "{said}"
        );
    }

    #[test]
    fn other_files_are_refused_with_a_sentence() {
        for (text, why) in [
            ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n…", "OpenPGP"),
            ("-----BEGIN RSA PRIVATE KEY-----\n…", "not an OpenSSH private key"),
            ("", "not an OpenSSH private key"),
            (
                "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90IGEga2V5\n-----END OPENSSH PRIVATE KEY-----\n",
                "cannot read",
            ),
        ] {
            let err = Signer::from_text(text).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
    }
}
