//! gitstate's [`Sealer`] adapter: states at rest as sops v3 JSON documents (DESIGN §5) whose data
//! key is wrapped by AWS KMS keys, age recipients, PGP fingerprints ([`PgpKey`], through `gpg`),
//! Vault / OpenBao transit keys ([`VaultKey`]) and GCP KMS keys ([`GcpKmsKey`]), one module each.
//!
//! - Modes: [`Mode::All`] encrypts every value; [`Mode::Structure`] keeps `version`, `serial`,
//!   `lineage` and each resource's `mode`/`type`/`name`/`provider` readable, so `git diff` shows
//!   which resources changed and no secret.
//! - Every write gets a fresh random data key, wrapped for the current key set. Nothing of the
//!   stored version goes into a seal, so a document planted in the repository (with a data key
//!   its author knows) never becomes the key of later versions.
//! - Binding: a document is bound to its [`Place`] (repository and path). KMS entries carry it in
//!   their encryption context (`gitstate_repository`, `gitstate_path`: KMS refuses to unwrap them
//!   under another context, and real sops passes the stored context along), the `sops` metadata
//!   names it too, and a document bound elsewhere is refused ([`SealError::Misplaced`]).
//! - Enforced: only documents this server sealed are opened: the data key must come from a KMS
//!   entry of a configured key bound to the place, or carry a seal (`gitstate_seal`, an HMAC over
//!   place and data key with a secret derived from one of the server's age identities).
//!   Plaintext and anything else is refused ([`SealError::NotSealedHere`]).
//! - Rotation: reading accepts the current and the fallback keys; writing uses the current set.
//! - Unwrapped data keys stay in memory for a bounded time ([`DataKeyMemory`]) and are zeroed
//!   when dropped. For as long, what this process sealed is kept with its plaintext
//!   ([`RecentlySealed`], within a byte budget): opening exactly those bytes at that place again
//!   (the next write's state guard, a read after a write) decrypts nothing.
//! - States an OpenTofu client encrypted itself (`gitstate_statefile::Form::ClientEncrypted`)
//!   are stored untouched, unless sealing is enforced (then they are sealed like any state).
//!
//! It never decides whether a state may be written or read (gitstate-core's rules do), and never
//! logs key material or a state's values.

mod config;
mod gcpkms;
mod kms;
mod legacy_aes;
mod memory;
mod pgp;
mod recent;
mod sealer;
mod vault;

pub use config::{Mode, SealConfigError, SealerConfig};
pub use gcpkms::{check_resource_id as check_gcp_kms_key, GcpKmsKey, GCP_KMS_ENDPOINT};
pub use gitstate_sops::Zeroizing;
pub use kms::{arn_region, decrypt_secret, load_aws_config, KmsKey};
pub use legacy_aes::{LegacyAes, Passphrase};
pub use memory::DataKeyMemory;
pub use pgp::{normalize_fingerprint, PgpKey, SOPS_GPG_EXEC};
pub use recent::RecentlySealed;
pub use sealer::SopsSealer;
pub use vault::{VaultKey, VaultKeyUri, VAULT_CONNECT_TIMEOUT, VAULT_REQUEST_TIMEOUT};

/// The KMS encryption-context key (and `sops` metadata field) naming the repository a document
/// is bound to.
pub const BOUND_REPOSITORY: &str = "gitstate_repository";
/// The KMS encryption-context key (and `sops` metadata field) naming the path a document is
/// bound to.
pub const BOUND_PATH: &str = "gitstate_path";
/// The `sops` metadata field holding the seal of a server's age identity.
pub const SEAL_FIELD: &str = "gitstate_seal";

/// The `encrypted_regex` of [`Mode::Structure`]: values under these keys are encrypted, the rest
/// of the state (format version, serial, lineage, resource addresses and providers, output types)
/// stays readable. `value` is an output's value; the others are a resource instance's payload.
pub const STRUCTURE_ENCRYPTED_REGEX: &str =
    "^(value|attributes|attributes_flat|sensitive_attributes|sensitive_values|private|identity)$";

/// The `sops` metadata field holding gitstate's plaintext digest.
pub const DIGEST_FIELD: &str = "gitstate_plaintext_hmac";
