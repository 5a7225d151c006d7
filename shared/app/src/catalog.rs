//! From the `catalog { … }` configuration to the DynamoDB catalog.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;

/// The catalog for `config.catalog`, or `None` when no table is configured.
pub async fn catalog_from_config(config: &Config) -> Option<Arc<gitstate_catalog::DynamoCatalog>> {
    let catalog = config.catalog.as_ref()?;
    let ttl = Duration::from_secs(catalog.audit_ttl_days.saturating_mul(86_400));
    let index_kms_arn = catalog_index_kms_arn(config);
    tracing::info!(table = %catalog.dynamodb_table, index_kms_arn = ?index_kms_arn, "the catalog is on (DynamoDB)");
    Some(Arc::new(
        gitstate_catalog::DynamoCatalog::connect(&catalog.dynamodb_table, ttl, index_kms_arn).await,
    ))
}

/// The KMS key that makes the catalog's resource index key: `catalog.kms_arn`, else the first
/// key states are encrypted with.
pub fn catalog_index_kms_arn(config: &Config) -> Option<String> {
    config
        .catalog
        .as_ref()
        .and_then(|c| c.kms_arn.clone())
        .filter(|a| !a.is_empty())
        .or_else(|| config.encryption.kms_arns.first().cloned())
}
