//! Commit signatures (DESIGN §6 `signing_key`): every commit gitstate writes carries a `gpgsig`
//! header that `git verify-commit` checks, so a "require signed commits" rule admits it.
//! - An OpenSSH ed25519 private key (without a passphrase) signs SSHSIG
//!   signatures in the `git` namespace with SHA-512, in-process, as `git -c gpg.format=ssh
//!   commit -S` does; GitHub and GitLab verify them against the key registered for the bot.
//! - An armored OpenPGP secret key (without a passphrase) signs through the user's `gpg`
//!   ([`gpg`]), as `git commit -S` does.
//!
//! The key is read here, once, when the store is configured; its bytes are never logged (the
//! [`Debug`] form is its fingerprint).

mod gpg;

use std::fmt;

use gitstate_core::StoreError;
use ssh_key::{HashAlg, LineEnding, PrivateKey};

/// A key that signs commits.
pub struct Signer {
    key: Key,
}

enum Key {
    Ssh(Box<PrivateKey>),
    OpenPgp(gpg::GpgKey),
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signer({})", self.fingerprint())
    }
}

impl PartialEq for Signer {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint() == other.fingerprint()
    }
}

impl Eq for Signer {}

impl Signer {
    /// Reads a private key file's text. `Err` is the rest of a sentence naming what is wrong,
    /// never the key's content.
    pub fn from_text(text: &str) -> Result<Signer, String> {
        let trimmed = text.trim_start();
        if trimmed.starts_with("-----BEGIN PGP PRIVATE KEY BLOCK-----") {
            let signer = Signer {
                key: Key::OpenPgp(gpg::GpgKey::import(trimmed)?),
            };
            // A key with a passphrase is found now, not on the first write.
            signer
                .sign(b"gitstate checks that this key signs")
                .map_err(|e| format!("is an OpenPGP key gpg cannot sign with (is it protected by a passphrase?): {e}"))?;
            return Ok(signer);
        }
        if !trimmed.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----") {
            return Err("is neither an OpenSSH private key (-----BEGIN OPENSSH PRIVATE KEY-----, as ssh-keygen writes it) nor an armored OpenPGP secret key (gpg --armor --export-secret-keys)".into());
        }
        let key = PrivateKey::from_openssh(trimmed)
            .map_err(|e| {
            format!("is an OpenSSH private key gitstate cannot read ({e}); it signs with ed25519 keys (ssh-keygen -t ed25519)")
        })?;
        if key.is_encrypted() {
            return Err("is protected by a passphrase; give gitstate a key without one (ssh-keygen -p -N '' -f FILE) and keep the file secret".into());
        }
        let algorithm = key.algorithm();
        let signer = Signer {
            key: Key::Ssh(Box::new(key)),
        };
        // A key type this build cannot sign with (RSA, DSA) is found now, not on the first write.
        signer
            .sign(b"gitstate checks that this key signs")
            .map_err(|_| {
                format!(
                    "is a {algorithm} key, which gitstate does not sign with; use ed25519 (ssh-keygen -t ed25519)"
                )
            })?;
        Ok(signer)
    }

    /// The key's fingerprint: an SSH key's SHA-256 one (`SHA256:…`, as `ssh-keygen -l` shows
    /// it), an OpenPGP key's (`OpenPGP …`).
    pub fn fingerprint(&self) -> String {
        match &self.key {
            Key::Ssh(key) => key.fingerprint(HashAlg::Sha256).to_string(),
            Key::OpenPgp(key) => format!("OpenPGP {}", key.fingerprint()),
        }
    }

    /// An SSH key's public key in `authorized_keys` form (`ssh-ed25519 AAAA…`): what to register
    /// with the forge or put into an `allowed_signers` file; `None` for an OpenPGP key.
    pub fn ssh_public_key(&self) -> Option<String> {
        match &self.key {
            Key::Ssh(key) => key.public_key().to_openssh().ok(),
            Key::OpenPgp(_) => None,
        }
    }

    /// The armored signature of `payload` (the commit without its `gpgsig` header), without a
    /// final line break.
    pub(crate) fn sign(&self, payload: &[u8]) -> Result<String, StoreError> {
        let key = match &self.key {
            Key::Ssh(key) => key,
            Key::OpenPgp(key) => return key.sign(payload),
        };
        let signature = key
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
        let Key::Ssh(key) = &signer.key else {
            panic!("an SSH key")
        };
        key.public_key()
            .verify("git", b"tree 0\n", &parsed)
            .expect("verifies");
        let shown = format!("{signer:?}");
        assert!(shown.starts_with("Signer(SHA256:"), "{shown}");
        assert!(
            !shown.contains("OPENSSH") && !shown.contains(&text[40..60]),
            "{shown}"
        );
        assert!(signer.ssh_public_key().unwrap().starts_with("ssh-ed25519 "));
    }

    /// A root commit signed by `signer` in a new repository, checked by `git verify-commit`
    /// with `config` (`-c` settings) and `env`: whether git accepts it, and what it said.
    fn verified(
        signer: Signer,
        config: &[String],
        env: &[(&str, &std::path::Path)],
    ) -> (bool, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = gix::init_bare(dir.path().join("r.git")).expect("a repository");
        let committer = crate::Committer {
            name: "bot".into(),
            email: "bot@acme.test".into(),
            signer: Some(std::sync::Arc::new(signer)),
        };
        let tree = gix::ObjectId::empty_tree(gix::hash::Kind::Sha1);
        repo.write_object(gix::objs::Tree::empty())
            .expect("the empty tree");
        let commit = crate::objects::commit_on(&repo, tree, None, &"Update x\n".into(), &committer)
            .expect("a signed commit");
        let mut git = std::process::Command::new("git");
        git.arg("-C").arg(dir.path().join("r.git"));
        for setting in config {
            git.args(["-c", setting]);
        }
        let out = git
            .args(["verify-commit", "-v", &commit.to_string()])
            .envs(env.iter().copied())
            .output()
            .expect("git");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The real git checks an SSH signature against an `allowed_signers` file, as a server's
    /// hook or `git log --show-signature` would.
    #[test]
    fn git_verify_commit_accepts_a_signed_commit() {
        let signer = Signer::from_text(&ed25519()).expect("a key");
        let dir = tempfile::tempdir().expect("tempdir");
        let allowed = dir.path().join("allowed_signers");
        std::fs::write(
            &allowed,
            format!("bot@acme.test {}\n", signer.ssh_public_key().unwrap()),
        )
        .unwrap();
        let setting = format!("gpg.ssh.allowedSignersFile={}", allowed.display());
        let (ok, said) = verified(signer, &[setting], &[]);
        assert!(ok, "{said}");
        assert!(
            said.contains("Good \"git\" signature for bot@acme.test"),
            "{said}"
        );
    }

    /// An armored OpenPGP secret key signs through gpg, and git verifies the signature with
    /// the public key.
    #[test]
    fn an_openpgp_key_signs_through_gpg_and_git_verifies_it() {
        let gnupg = gitstate_tests::keys::GnuPg::new("signer");
        let signer = Signer::from_text(&gnupg.export_secret_key()).expect("an OpenPGP key");
        assert_eq!(
            signer.fingerprint(),
            format!("OpenPGP {}", gnupg.fingerprint)
        );
        assert_eq!(signer.ssh_public_key(), None);
        let (ok, said) = verified(signer, &[], &[("GNUPGHOME", gnupg.home.as_path())]);
        assert!(ok, "{said}");
        assert!(said.contains("Good signature"), "{said}");
    }

    /// A key type gitstate does not sign with is refused at start, naming ed25519.
    #[test]
    fn an_ecdsa_key_is_refused_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ecdsa");
        let made = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ecdsa", "-N", "", "-f"])
            .arg(&path)
            .status()
            .expect("ssh-keygen");
        assert!(made.success());
        let err = Signer::from_text(&std::fs::read_to_string(&path).unwrap()).unwrap_err();
        assert!(err.contains("ssh-keygen -t ed25519"), "{err}");
    }

    #[test]
    fn other_files_are_refused_with_a_sentence() {
        for (text, why) in [
            ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n…", "cannot be imported"),
            ("-----BEGIN RSA PRIVATE KEY-----\n…", "neither an OpenSSH"),
            ("", "neither an OpenSSH"),
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
