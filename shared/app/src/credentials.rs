//! The deployment's own git credential (server and team modes; pass-through holds none).

use gitstate_core::Credentials;

use crate::config::{git_credentials_from_env, key_value_pairs, ConfigError};

/// The deployment's own git credential: `GIT_PASSWORD_KMS` (a KMS `CiphertextBlob`, base64;
/// decrypted once here, with `GIT_PASSWORD_KMS_CONTEXT` = `k=v,…` as encryption context when
/// set) with `GIT_USERNAME`, else what [`git_credentials_from_env`] finds.
pub async fn server_git_credentials() -> Result<Option<Credentials>, ConfigError> {
    let Some(ciphertext) = std::env::var("GIT_PASSWORD_KMS")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return git_credentials_from_env();
    };
    let context = match std::env::var("GIT_PASSWORD_KMS_CONTEXT") {
        Ok(pairs) => key_value_pairs(pairs.split(','), "GIT_PASSWORD_KMS_CONTEXT")?,
        Err(_) => Default::default(),
    };
    let password = gitstate_seal::decrypt_secret(&ciphertext, &context)
        .await
        .map_err(|e| ConfigError::BadValue(format!("GIT_PASSWORD_KMS: {e}")))?;
    let username = std::env::var("GIT_USERNAME")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "git".to_owned());
    tracing::info!(%username, "git credential decrypted with KMS");
    Ok(Some(Credentials { username, password }))
}
