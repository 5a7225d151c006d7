//! Error type of the crate.

/// Everything that can go wrong while reading or writing a sops document.
///
/// Messages never contain key material or plaintext values; they name paths,
/// key kinds and key identifiers (age recipients, KMS ARNs) only.
#[derive(Debug, thiserror::Error)]
pub enum SopsError {
    /// The input is not valid JSON.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// Objects and arrays nest deeper than the codec walks (see [`crate::MAX_DEPTH`]).
    #[error("the JSON nests objects and arrays more than {limit} levels deep, deeper than gitstate's sops codec accepts")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// The input is JSON but not a sops document (no `sops` object, wrong top-level type).
    #[error("not a sops document: {0}")]
    NotSops(String),
    /// `encrypt` was given a document that already carries a top-level `sops` key.
    #[error("the document is already sops-encrypted (it has a top-level \"sops\" key)")]
    AlreadyEncrypted,
    /// The `sops` metadata object is malformed.
    #[error("malformed sops metadata: {0}")]
    Metadata(String),
    /// A leaf that should hold an `ENC[...]` value does not parse as one.
    #[error("malformed encrypted value at {path}: {reason}")]
    Value {
        /// Key path of the leaf, `a:b:c:`.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// AES-GCM authentication failed for a value: tampered ciphertext, wrong path or wrong data key.
    #[error("could not decrypt the value at {path}: AES-GCM authentication failed (tampered ciphertext or wrong data key)")]
    Decrypt {
        /// Key path of the leaf (`a:b:c:`), or `sops:mac` for the MAC.
        path: String,
    },
    /// The MAC stored in the document does not match the MAC of its values.
    #[error("MAC mismatch: the document's values do not match its MAC (the file was modified or is corrupt); refusing it")]
    MacMismatch,
    /// None of the configured keys could unwrap the data key.
    #[error("no configured key could open the data key; keys in the file: [{in_file}]; keys tried: [{tried}]{}{}", if needs.is_empty() { String::new() } else { format!("; {needs}") }, if failed.is_empty() { String::new() } else { format!("; keys that failed: [{failed}]") })]
    NoKey {
        /// `kind:id` of every master key entry in the document.
        in_file: String,
        /// `kind:id` of every configured key that was tried.
        tried: String,
        /// `kind:id (reason)` of every key that failed rather than just not matching (a key
        /// service's refusal); empty when none did.
        failed: String,
        /// What the keys that could not be used for want of a credential need
        /// ([`SopsError::Unconfigured`]: `kind key id needs …`, `; `-separated); empty when none.
        needs: String,
    },
    /// A master key operation failed (wrap/unwrap/parse), for the named key.
    #[error("{kind} key {id}: {reason}")]
    Key {
        /// `age`, `kms`, ...
        kind: String,
        /// Public identifier of the key (recipient, ARN); never secret material.
        id: String,
        /// What failed.
        reason: String,
    },
    /// A master key cannot be used because its credential is not configured here (say, no
    /// Vault token); `needs` says what gives it, naming the setting, never a secret.
    #[error("{kind} key {id} cannot be used: it needs {needs}")]
    Unconfigured {
        /// `hc_vault`, ...
        kind: String,
        /// Public identifier of the key.
        id: String,
        /// What would give the credential (a setting or a file), in a few words.
        needs: String,
    },
    /// A master key's service could not be reached (a transient failure: retry later). Master
    /// keys return it from `unwrap`/`wrap`; `decrypt` returns it when no key could open the data
    /// key and at least one failed this way, so a server can answer 503 instead of 500.
    #[error("{kind} key {id} is unavailable: {reason}")]
    Unavailable {
        /// `kms`, ...
        kind: String,
        /// Public identifier of the key (ARN, ...).
        id: String,
        /// What failed (network error, throttling, ...).
        reason: String,
    },
    /// Options are invalid (bad regex, no recipients, ...).
    #[error("invalid options: {0}")]
    Options(String),
    /// Reading a key file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}
