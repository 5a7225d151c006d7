//! How a deployment configures its sealer: the encryption mode and the keys of each kind.

use std::collections::BTreeMap;
use std::time::Duration;

use gitstate_sops::{EncryptOptions, Rules, Zeroizing};

use crate::STRUCTURE_ENCRYPTED_REGEX;

/// How much of a state is encrypted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Every value, like sops' default.
    #[default]
    All,
    /// Values that can hold secrets; the structure stays readable (DESIGN §5).
    Structure,
}

impl std::str::FromStr for Mode {
    type Err = SealConfigError;
    fn from_str(s: &str) -> Result<Mode, SealConfigError> {
        match s {
            "all" => Ok(Mode::All),
            "structure" => Ok(Mode::Structure),
            other => Err(SealConfigError(format!(
                "encryption mode '{other}' is unknown; use \"all\" or \"structure\""
            ))),
        }
    }
}

impl Mode {
    pub(crate) fn rules(self) -> Rules {
        match self {
            Mode::All => EncryptOptions::default().rules,
            Mode::Structure => Rules {
                encrypted_regex: Some(STRUCTURE_ENCRYPTED_REGEX.to_owned()),
                ..Rules::default()
            },
        }
    }
}

/// A configuration that cannot work (bad ARN, bad age key, no key while enforced).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SealConfigError(pub String);

/// What the sealer is built from (the app maps `encryption { … }` and the sops variables here).
#[derive(Clone, Default)]
pub struct SealerConfig {
    /// How much to encrypt.
    pub mode: Mode,
    /// KMS keys new versions are wrapped for (and that can read).
    pub kms_arns: Vec<String>,
    /// Encryption context for wrapping with `kms_arns` (the binding keys are added to it).
    pub kms_context: BTreeMap<String, String>,
    /// KMS keys that may still read older versions but wrap nothing new.
    pub fallback_kms_arns: Vec<String>,
    /// age recipients new versions are wrapped for.
    pub age_recipients: Vec<String>,
    /// age identities (secret keys) for reading, e.g. from `SOPS_AGE_KEY_FILE`.
    pub age_identities: Vec<Zeroizing<String>>,
    /// PGP fingerprints new versions are wrapped for (and that read, with the secret key in
    /// gpg's keyring), through the `gpg` binary.
    pub pgp_fingerprints: Vec<String>,
    /// Vault / OpenBao transit keys (sops' URI form) new versions are wrapped for (and that read).
    pub vault_uris: Vec<String>,
    /// GCP KMS keys (`projects/…/cryptoKeys/…`) new versions are wrapped for (and that read).
    pub gcp_kms_keys: Vec<String>,
    /// How long an unwrapped data key is kept in memory.
    pub data_key_ttl: Duration,
    /// Open only documents this server sealed, bound to their place; refuse plaintext.
    pub enforced: bool,
}

impl std::fmt::Debug for SealerConfig {
    /// Never prints identities.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealerConfig")
            .field("mode", &self.mode)
            .field("kms_arns", &self.kms_arns)
            .field("kms_context", &self.kms_context)
            .field("fallback_kms_arns", &self.fallback_kms_arns)
            .field("age_recipients", &self.age_recipients)
            .field("age_identities", &self.age_identities.len())
            .field("pgp_fingerprints", &self.pgp_fingerprints)
            .field("vault_uris", &self.vault_uris)
            .field("gcp_kms_keys", &self.gcp_kms_keys)
            .field("data_key_ttl", &self.data_key_ttl)
            .field("enforced", &self.enforced)
            .finish()
    }
}

impl SealerConfig {
    /// Whether any key would wrap new versions.
    pub fn has_write_keys(&self) -> bool {
        !self.kms_arns.is_empty()
            || !self.age_recipients.is_empty()
            || !self.pgp_fingerprints.is_empty()
            || !self.vault_uris.is_empty()
            || !self.gcp_kms_keys.is_empty()
    }
}
