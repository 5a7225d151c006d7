//! From the `encryption { … }` configuration to the sealer the protocol layer uses, and the
//! protocol service ([`Backend`]) that carries it.

use std::sync::Arc;
use std::time::Duration;

use gitstate_core::{Backend, Sealer};
use gitstate_seal::{Mode, SealerConfig, SopsSealer};

use crate::config::{Config, ConfigError, EncryptionConfig};

/// The sealer for `encryption`, or `None` when no key is configured (plaintext storage). Age
/// identities for reading come from `SOPS_AGE_KEY` and `SOPS_AGE_KEY_FILE` (sops' conventions)
/// and from `encryption.age_key_file`. With `enforced = true` and no key this is an error, so the
/// server refuses to start rather than store plaintext.
pub async fn sealer_from_config(
    encryption: &EncryptionConfig,
) -> Result<Option<Arc<dyn Sealer>>, ConfigError> {
    let mode: Mode = encryption
        .mode
        .parse()
        .map_err(|e: gitstate_seal::SealConfigError| ConfigError::BadValue(e.to_string()))?;
    for arn in encryption
        .kms_arns
        .iter()
        .chain(&encryption.fallback_kms_arns)
    {
        if arn.contains('+') {
            return Err(ConfigError::BadValue(format!(
                "KMS key '{arn}': sops' ARN+ROLE form is not supported; give the plain key ARN and let the credential chain assume the role"
            )));
        }
        gitstate_seal::arn_region(arn).map_err(|e| ConfigError::BadValue(e.to_string()))?;
    }
    let mut identities = Vec::new();
    if let Ok(text) = std::env::var("SOPS_AGE_KEY") {
        identities.push(zeroizing(text));
    }
    let files = std::env::var_os("SOPS_AGE_KEY_FILE")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain(encryption.age_key_file.clone());
    for file in files {
        let text = zeroizing(std::fs::read_to_string(&file).map_err(|e| {
            ConfigError::BadValue(format!(
                "cannot read the age key file {}: {e}",
                file.display()
            ))
        })?);
        identities.push(text);
    }
    let config = SealerConfig {
        mode,
        kms_arns: encryption.kms_arns.clone(),
        kms_context: encryption.kms_context.clone(),
        fallback_kms_arns: encryption.fallback_kms_arns.clone(),
        age_recipients: encryption
            .age_recipients
            .iter()
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty())
            .collect(),
        age_identities: identities,
        data_key_ttl: Duration::from_secs(encryption.data_key_cache_seconds),
        enforced: encryption.enforced,
    };
    if !config.has_write_keys() {
        if encryption.enforced {
            return Err(ConfigError::BadValue(
                "encryption is enforced but no key is configured: set encryption.kms_arns or encryption.age_recipients (or SOPS_KMS_ARN / SOPS_AGE_RECIPIENTS)".into(),
            ));
        }
        return Ok(None);
    }
    let sealer = SopsSealer::from_config(&config)
        .await
        .map_err(|e| ConfigError::BadValue(e.to_string()))?;
    tracing::info!(
        mode = %encryption.mode,
        kms_keys = encryption.kms_arns.len(),
        fallback_kms_keys = encryption.fallback_kms_arns.len(),
        age_recipients = config.age_recipients.len(),
        "states are encrypted at rest (sops)"
    );
    Ok(sealer.map(|s| Arc::new(s) as Arc<dyn Sealer>))
}

/// Key material read from a file or the environment, zeroed when dropped.
fn zeroizing(text: String) -> gitstate_seal::Zeroizing<String> {
    gitstate_seal::Zeroizing::new(text)
}

/// The protocol service for `config`: limits and the sealer.
pub async fn backend_from_config(config: &Config) -> Result<Backend, ConfigError> {
    let mut backend = Backend {
        max_state_bytes: config.max_state_bytes,
        sealer: sealer_from_config(&config.encryption).await?,
        state_guard: config.state_guard,
        ..Backend::default()
    };
    backend.retry.budget = std::time::Duration::from_secs(config.write_budget_seconds);
    Ok(backend)
}
