//! A sops v3 JSON codec for gitstate.
//!
//! - [`Document::decrypt`] / [`decrypt`]: open a sops v3 JSON document (values
//!   `ENC[AES256_GCM,…]`, AES-256-GCM with the key path as AAD, SHA-512 MAC verified).
//! - [`encrypt`] / [`encrypt_groups`]: write a document that real `sops -d` opens.
//! - [`MasterKey`]: wraps/unwraps the 32-byte data key; [`AgeKey`] implements it for age X25519.
//! - Key groups with a Shamir threshold are read and written.
//!
//! JSON trees are [`Node`]s: key order kept, integers exact up to `u64`.
//!
//! ```
//! use gitstate_sops::{encrypt, AgeKey, Document, EncryptOptions, KeySource, MasterKey};
//!
//! let key = AgeKey::generate();
//! let sealed = encrypt(
//!     br#"{"serial": 3, "outputs": {"pw": {"value": "s3cret"}}}"#,
//!     &[&key as &dyn MasterKey],
//!     &EncryptOptions::default(),
//! )?;
//! let keys = KeySource::new().with(Box::new(key));
//! let doc = Document::decrypt(&sealed, &keys)?;
//! assert_eq!(doc.to_json(), br#"{"serial":3,"outputs":{"pw":{"value":"s3cret"}}}"#.to_vec());
//! # Ok::<(), gitstate_sops::SopsError>(())
//! ```
//!
//! It never reaches a network, git or gitstate's other crates (it depends on none of them): a
//! master key that needs a service is a [`MasterKey`] its caller implements.

mod cipher;
mod document;
mod error;
mod keys;
mod shamir;
mod tree;

pub use cipher::{ValueCipher, ValueType};
pub use document::{
    decrypt, encrypt, encrypt_groups, encrypt_tree, key_groups, now_rfc3339, reusable_data_key,
    sops_member, Document, EncryptOptions, Reuse, Rules, SOPS_VERSION,
};
pub use error::SopsError;
pub use keys::{key_fingerprint, AgeKey, DataKeyCache, KeyEntry, KeySource, MasterKey};
pub use shamir::{combine as shamir_combine, split as shamir_split};
pub use tree::{go_format_float, Node, MAX_DEPTH};
pub use zeroize::Zeroizing;
