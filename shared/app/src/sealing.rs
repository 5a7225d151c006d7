//! From the `encryption { … }` configuration to the sealer the protocol layer uses, and the
//! protocol service ([`Backend`]) that carries it.

use std::sync::Arc;
use std::time::Duration;

use gitstate_core::{Backend, Opener, Sealer};
use gitstate_seal::{LegacyAes, Mode, Passphrase, SealerConfig, SopsSealer};

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
        pgp_fingerprints: trimmed(&encryption.pgp_fingerprints),
        vault_uris: trimmed(&encryption.vault_uris),
        gcp_kms_keys: trimmed(&encryption.gcp_kms_keys),
        data_key_ttl: Duration::from_secs(encryption.data_key_cache_seconds),
        enforced: encryption.enforced,
    };
    match encryption.provider.as_deref() {
        None | Some("aes") => {}
        Some("sops") if !config.has_write_keys() => {
            return Err(ConfigError::BadValue(
                format!("the encryption provider is \"sops\" (TF_BACKEND_HTTP_ENCRYPTION_PROVIDER) but no key is configured: {KEY_SETTINGS}"),
            ))
        }
        Some("sops") => {}
        Some(other) => {
            return Err(ConfigError::BadValue(format!(
                "the encryption provider '{other}' is unknown; use \"sops\" or \"aes\" (TF_BACKEND_HTTP_ENCRYPTION_PROVIDER, GITSTATE_ENCRYPTION_PROVIDER, encryption.provider)"
            )))
        }
    }
    if !config.has_write_keys() {
        if encryption.enforced {
            return Err(ConfigError::BadValue(format!(
                "encryption is enforced but no key is configured: {KEY_SETTINGS}"
            )));
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
        pgp_keys = config.pgp_fingerprints.len(),
        vault_keys = config.vault_uris.len(),
        gcp_kms_keys = config.gcp_kms_keys.len(),
        "states are encrypted at rest (sops)"
    );
    Ok(sealer.map(|s| Arc::new(s) as Arc<dyn Sealer>))
}

/// The opener of terraform-backend-git's legacy aes files, when a passphrase is configured (from
/// the environment, or `legacy_aes_passphrase_file`); with `provider = "aes"` one must be. The
/// passphrase is never logged; only where it came from.
pub fn legacy_opener_from_config(
    encryption: &EncryptionConfig,
) -> Result<Option<Arc<dyn Opener>>, ConfigError> {
    let passphrase = match (
        &encryption.legacy_aes_passphrase,
        &encryption.legacy_aes_passphrase_file,
    ) {
        (Some(passphrase), _) => Some(passphrase.clone()),
        (None, Some(file)) => {
            let text = zeroizing(std::fs::read_to_string(file).map_err(|e| {
                ConfigError::BadValue(format!(
                    "cannot read the legacy aes passphrase file {}: {e}",
                    file.display()
                ))
            })?);
            let value = zeroizing(text.trim_end_matches(['\r', '\n']).to_owned());
            Some(Passphrase::new(
                value,
                format!("the file {}", file.display()),
            ))
        }
        (None, None) => None,
    };
    let Some(passphrase) = passphrase else {
        if encryption.provider.as_deref() == Some("aes") {
            return Err(ConfigError::BadValue(
                "the encryption provider is \"aes\" but no passphrase is configured: set TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE (or GITSTATE_LEGACY_AES_PASSPHRASE, or encryption.legacy_aes_passphrase_file)".into(),
            ));
        }
        return Ok(None);
    };
    if encryption.kms_arns.is_empty()
        && trimmed(&encryption.age_recipients).is_empty()
        && trimmed(&encryption.pgp_fingerprints).is_empty()
        && trimmed(&encryption.vault_uris).is_empty()
        && trimmed(&encryption.gcp_kms_keys).is_empty()
    {
        tracing::warn!(
            passphrase = %passphrase.source,
            "states terraform-backend-git encrypted with its aes passphrase are read, and written back in plaintext: gitstate never writes that format; configure sops keys (encryption.age_recipients, encryption.kms_arns) to keep them encrypted at rest"
        );
    } else {
        tracing::info!(
            passphrase = %passphrase.source,
            "states terraform-backend-git encrypted with its aes passphrase are read, and sealed with the sops keys when written"
        );
    }
    Ok(Some(Arc::new(LegacyAes::new(&passphrase))))
}

/// Where the keys that wrap new versions are configured, for the sentences that ask for one.
const KEY_SETTINGS: &str = "set encryption.kms_arns, encryption.age_recipients, encryption.pgp_fingerprints, encryption.vault_uris or encryption.gcp_kms_keys (or SOPS_KMS_ARN, SOPS_AGE_RECIPIENTS, SOPS_PGP_FP, SOPS_VAULT_URIS, SOPS_GCP_KMS_IDS)";

/// The non-empty values of a list, trimmed.
fn trimmed(values: &[String]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
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
        legacy: legacy_opener_from_config(&config.encryption)?,
        state_guard: config.state_guard,
        ..Backend::default()
    };
    backend.retry.budget = std::time::Duration::from_secs(config.write_budget_seconds);
    Ok(backend)
}

/// terraform-backend-git's name for its aes passphrase.
pub const TF_ENCRYPTION_PASSPHRASE: &str = "TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE";
/// gitstate's name for the legacy aes passphrase.
pub const LEGACY_AES_PASSPHRASE: &str = "GITSTATE_LEGACY_AES_PASSPHRASE";

/// The legacy aes passphrase from the environment (`env`, the process's in production): `GITSTATE_LEGACY_AES_PASSPHRASE` when it is
/// not empty, else `TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE` when it is set at all (empty
/// included: terraform-backend-git then encrypted with the MD5 of the empty string).
pub(crate) fn legacy_aes_passphrase_from_env(
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<Option<gitstate_seal::Passphrase>, ConfigError> {
    for (name, empty_counts) in [
        (LEGACY_AES_PASSPHRASE, false),
        (TF_ENCRYPTION_PASSPHRASE, true),
    ] {
        let Some(value) = env(name) else {
            continue;
        };
        let value = gitstate_seal::Zeroizing::new(value.into_string().map_err(|_| {
            ConfigError::BadValue(format!(
                "{name} is not UTF-8; give the passphrase as UTF-8 text"
            ))
        })?);
        if value.is_empty() && !empty_counts {
            continue;
        }
        return Ok(Some(gitstate_seal::Passphrase::new(
            value,
            format!("environment {name}"),
        )));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTORS: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../seal/tests/vectors/legacy-aes"
    );

    fn vector(name: &str) -> Vec<u8> {
        std::fs::read(format!("{VECTORS}/{name}")).expect("a vector")
    }

    #[test]
    fn a_passphrase_file_opens_legacy_aes_states() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let file = dir.path().join("passphrase");
        std::fs::write(&file, "correct horse battery staple\n").expect("write");
        let encryption = EncryptionConfig {
            legacy_aes_passphrase_file: Some(file.clone()),
            ..EncryptionConfig::default()
        };
        let opener = legacy_opener_from_config(&encryption)
            .expect("valid")
            .expect("an opener");
        assert_eq!(
            opener.open(&vector("state.tfstate.aes")).as_deref(),
            Some(vector("state.tfstate.json").as_slice())
        );
        assert!(opener.key_source().contains(&file.display().to_string()));
        let missing = EncryptionConfig {
            legacy_aes_passphrase_file: Some(dir.path().join("absent")),
            ..EncryptionConfig::default()
        };
        let e = legacy_opener_from_config(&missing).expect_err("a missing file");
        assert!(e.to_string().contains("legacy aes passphrase file"), "{e}");
    }

    #[tokio::test]
    async fn providers_need_what_they_name() {
        let aes = EncryptionConfig {
            provider: Some("aes".into()),
            ..EncryptionConfig::default()
        };
        let e = legacy_opener_from_config(&aes).expect_err("aes without a passphrase");
        assert!(
            e.to_string()
                .contains("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE"),
            "{e}"
        );
        let sops = EncryptionConfig {
            provider: Some("sops".into()),
            ..EncryptionConfig::default()
        };
        let e = sealer_from_config(&sops)
            .await
            .expect_err("sops without a key");
        assert!(e.to_string().contains("no key is configured"), "{e}");
        let other = EncryptionConfig {
            provider: Some("vault".into()),
            ..EncryptionConfig::default()
        };
        let e = sealer_from_config(&other)
            .await
            .expect_err("an unknown provider");
        assert!(e.to_string().contains("'vault' is unknown"), "{e}");
        assert!(legacy_opener_from_config(&EncryptionConfig::default())
            .expect("valid")
            .is_none());
    }

    #[tokio::test]
    async fn bad_master_keys_are_refused_naming_them() {
        for (encryption, named) in [
            (
                EncryptionConfig {
                    pgp_fingerprints: vec!["DEADBEEF".into()],
                    ..EncryptionConfig::default()
                },
                "PGP key 'DEADBEEF' is not a full fingerprint",
            ),
            (
                EncryptionConfig {
                    vault_uris: vec!["vault:8200/transit/keys/k".into()],
                    ..EncryptionConfig::default()
                },
                "Vault transit key 'vault:8200/transit/keys/k'",
            ),
            (
                EncryptionConfig {
                    gcp_kms_keys: vec!["projects/p/keyRings/r".into()],
                    ..EncryptionConfig::default()
                },
                "GCP KMS key 'projects/p/keyRings/r' is not a key name",
            ),
        ] {
            let e = sealer_from_config(&encryption)
                .await
                .expect_err("a bad key");
            assert!(e.to_string().contains(named), "{e}");
        }
    }

    #[test]
    fn the_new_master_keys_come_from_the_file() {
        let config = crate::Config::from_hcl(
            r#"
encryption {
  pgp_fingerprints = ["85D77543B3D624B63CEA9E6DBC17301B491B3F21"]
  vault_uris = ["https://vault:8200/v1/transit/keys/tfstate"]
  gcp_kms_keys = ["projects/p/locations/global/keyRings/r/cryptoKeys/k"]
}
"#,
        )
        .expect("valid");
        assert_eq!(
            config.encryption.pgp_fingerprints,
            ["85D77543B3D624B63CEA9E6DBC17301B491B3F21"]
        );
        assert_eq!(
            config.encryption.vault_uris,
            ["https://vault:8200/v1/transit/keys/tfstate"]
        );
        assert_eq!(
            config.encryption.gcp_kms_keys,
            ["projects/p/locations/global/keyRings/r/cryptoKeys/k"]
        );
    }

    #[test]
    fn the_passphrase_is_not_in_the_configurations_debug_output() {
        let encryption = EncryptionConfig {
            legacy_aes_passphrase: Some(Passphrase::new(
                zeroizing("correct horse battery staple".into()),
                "environment TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE",
            )),
            ..EncryptionConfig::default()
        };
        let shown = format!(
            "{:?}",
            crate::Config {
                encryption,
                ..crate::Config::default()
            }
        );
        assert!(!shown.contains("staple"), "{shown}");
        assert!(
            shown.contains("TF_BACKEND_HTTP_ENCRYPTION_PASSPHRASE"),
            "{shown}"
        );
    }
}
