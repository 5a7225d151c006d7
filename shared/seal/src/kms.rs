//! AWS KMS as a sops master key: `Encrypt`/`Decrypt` of the 32-byte data key under an encryption
//! context, with entries shaped like sops' own (`arn`, `context`, `created_at`, `enc`,
//! `aws_profile`), so real `sops -d` opens what gitstate wrote and the other way round.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_kms::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_kms::primitives::Blob;
use base64::Engine;
use gitstate_core::Place;
use gitstate_sops::{now_rfc3339, KeyEntry, MasterKey, Node, SopsError, Zeroizing};

use crate::{SealConfigError, BOUND_PATH, BOUND_REPOSITORY};

/// Timeouts for every KMS call: a KMS that does not answer turns into a 503, not a hung request.
pub const KMS_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Upper bound of one KMS call attempt.
pub const KMS_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound of one KMS operation, retries included.
pub const KMS_OPERATION_TIMEOUT: Duration = Duration::from_secs(12);

/// One KMS key (by ARN) with the encryption context used when wrapping.
///
/// [`MasterKey`] is synchronous; the calls run on `runtime` with `block_on`, so a `KmsKey` must
/// only be used from a blocking thread (the sealer runs the codec in `spawn_blocking`).
#[derive(Clone)]
pub struct KmsKey {
    arn: String,
    context: BTreeMap<String, String>,
    client: aws_sdk_kms::Client,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for KmsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsKey")
            .field("arn", &self.arn)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

/// The region of a KMS key ARN (`arn:aws:kms:REGION:ACCOUNT:key/ID` or `…:alias/NAME`).
pub fn arn_region(arn: &str) -> Result<&str, SealConfigError> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    match parts.as_slice() {
        ["arn", _partition, "kms", region, _account, resource]
            if !region.is_empty()
                && (resource.starts_with("key/") || resource.starts_with("alias/")) =>
        {
            Ok(region)
        }
        _ => Err(SealConfigError(format!(
            "'{arn}' is not a KMS key ARN (expected arn:aws:kms:REGION:ACCOUNT:key/ID)"
        ))),
    }
}

impl KmsKey {
    /// A key for `arn`, with a client for the ARN's region built on `sdk` (credentials, endpoint
    /// overrides such as `AWS_ENDPOINT_URL_KMS`, timeouts).
    pub fn new(
        arn: &str,
        context: BTreeMap<String, String>,
        sdk: &aws_config::SdkConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<KmsKey, SealConfigError> {
        let region = arn_region(arn)?;
        let config = aws_sdk_kms::config::Builder::from(sdk)
            .region(aws_sdk_kms::config::Region::new(region.to_owned()))
            .build();
        Ok(KmsKey {
            arn: arn.to_owned(),
            context,
            client: aws_sdk_kms::Client::from_conf(config),
            runtime,
        })
    }

    /// This key with the binding to `at` added to its encryption context: what it wraps opens
    /// only under a context that names `at`.
    pub fn bound_to(&self, at: &Place) -> KmsKey {
        let mut key = self.clone();
        key.context
            .insert(BOUND_REPOSITORY.to_owned(), at.repository.clone());
        key.context
            .insert(BOUND_PATH.to_owned(), at.path.as_str().to_owned());
        key
    }

    /// `kms:ARN|k=v,…`: what identifies this key in a key set (the context is part of it, since a
    /// different context cannot open an entry wrapped under the old one).
    pub fn identity(arn: &str, context: &BTreeMap<String, String>) -> String {
        let context: Vec<String> = context.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("kms:{arn}|{}", context.join(","))
    }

    fn failure<E, R>(&self, action: &str, err: SdkError<E, R>) -> SopsError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let unavailable = |reason: String| SopsError::Unavailable {
            kind: "kms".into(),
            id: self.arn.clone(),
            reason,
        };
        match &err {
            SdkError::TimeoutError(_) => unavailable(format!("{action} timed out")),
            SdkError::DispatchFailure(e) => unavailable(format!(
                "{action} could not reach KMS: {}",
                if e.is_timeout() {
                    "timed out".to_owned()
                } else if e.is_io() {
                    "connection failed".to_owned()
                } else {
                    "request dispatch failed".to_owned()
                }
            )),
            SdkError::ResponseError(_) => {
                unavailable(format!("{action}: KMS sent an unreadable response"))
            }
            SdkError::ServiceError(service) => {
                let e = service.err();
                let code = e.code().unwrap_or("unknown error");
                let message = e.message().unwrap_or("");
                let transient = matches!(
                    code,
                    "ThrottlingException"
                        | "KMSInternalException"
                        | "DependencyTimeoutException"
                        | "KeyUnavailableException"
                        | "ServiceUnavailableException"
                        | "InternalFailure"
                );
                let reason = format!("{action} failed: {code} {message}")
                    .trim_end()
                    .to_owned();
                if transient {
                    unavailable(reason)
                } else {
                    SopsError::Key {
                        kind: "kms".into(),
                        id: self.arn.clone(),
                        reason,
                    }
                }
            }
            _ => SopsError::Key {
                kind: "kms".into(),
                id: self.arn.clone(),
                reason: format!("{action} could not be sent"),
            },
        }
    }
}

fn context_of(entry: &KeyEntry) -> Option<std::collections::HashMap<String, String>> {
    let (_, node) = entry.fields.iter().find(|(k, _)| k == "context")?;
    let Node::Object(fields) = node else {
        return None;
    };
    let map: std::collections::HashMap<String, String> = fields
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect();
    (!map.is_empty()).then_some(map)
}

impl MasterKey for KmsKey {
    fn kind(&self) -> &'static str {
        "kms"
    }

    fn id(&self) -> String {
        self.arn.clone()
    }

    fn wrap(&self, data_key: &[u8]) -> Result<KeyEntry, SopsError> {
        let context = (!self.context.is_empty()).then(|| {
            self.context
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        });
        let request = self
            .client
            .encrypt()
            .key_id(&self.arn)
            .plaintext(Blob::new(data_key))
            .set_encryption_context(context)
            .send();
        let started = std::time::Instant::now();
        let out = self.runtime.block_on(request);
        observe("Encrypt", started, out.is_ok());
        let out = out.map_err(|e| self.failure("Encrypt", e))?;
        let blob = out.ciphertext_blob().ok_or_else(|| SopsError::Key {
            kind: "kms".into(),
            id: self.arn.clone(),
            reason: "Encrypt returned no ciphertext".into(),
        })?;
        let mut fields = vec![("arn".to_owned(), Node::Str(self.arn.clone()))];
        if !self.context.is_empty() {
            fields.push((
                "context".to_owned(),
                Node::Object(
                    self.context
                        .iter()
                        .map(|(k, v)| (k.clone(), Node::Str(v.clone())))
                        .collect(),
                ),
            ));
        }
        fields.push(("created_at".to_owned(), Node::Str(now_rfc3339())));
        fields.push((
            "enc".to_owned(),
            Node::Str(base64::engine::general_purpose::STANDARD.encode(blob.as_ref())),
        ));
        fields.push(("aws_profile".to_owned(), Node::Str(String::new())));
        Ok(KeyEntry {
            kind: "kms".into(),
            fields,
        })
    }

    fn unwrap(&self, entry: &KeyEntry) -> Result<Option<Zeroizing<Vec<u8>>>, SopsError> {
        if entry.field("arn") != Some(self.arn.as_str()) {
            return Ok(None);
        }
        let enc = entry
            .field("enc")
            .ok_or_else(|| SopsError::Metadata(format!("kms entry for {} has no enc", self.arn)))?;
        let blob = base64::engine::general_purpose::STANDARD
            .decode(enc.trim())
            .map_err(|_| {
                SopsError::Metadata(format!("kms entry for {}: enc is not base64", self.arn))
            })?;
        let request = self
            .client
            .decrypt()
            .key_id(&self.arn)
            .ciphertext_blob(Blob::new(blob))
            .set_encryption_context(context_of(entry))
            .send();
        let started = std::time::Instant::now();
        let out = self.runtime.block_on(request);
        observe("Decrypt", started, out.is_ok());
        let out = out.map_err(|e| self.failure("Decrypt", e))?;
        let plain = out.plaintext().ok_or_else(|| SopsError::Key {
            kind: "kms".into(),
            id: self.arn.clone(),
            reason: "Decrypt returned no plaintext".into(),
        })?;
        // The SDK's own buffers of the response are out of reach; this copy is zeroed on drop.
        Ok(Some(Zeroizing::new(plain.as_ref().to_vec())))
    }
}

/// Counts one KMS request and its time (docs/METRICS.md).
fn observe(call: &'static str, started: std::time::Instant, ok: bool) {
    use gitstate_core::metrics::{KMS_REQUESTS, KMS_SECONDS};
    let result = if ok { "ok" } else { "error" };
    metrics::counter!(KMS_REQUESTS, "call" => call, "result" => result).increment(1);
    metrics::histogram!(KMS_SECONDS, "call" => call).record(started.elapsed().as_secs_f64());
}

/// Loads the AWS configuration once (default credential chain, region, `AWS_ENDPOINT_URL*`), with
/// explicit timeouts.
pub async fn load_aws_config() -> aws_config::SdkConfig {
    let timeouts = aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(KMS_CONNECT_TIMEOUT)
        .operation_attempt_timeout(KMS_ATTEMPT_TIMEOUT)
        .operation_timeout(KMS_OPERATION_TIMEOUT)
        .build();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(timeouts)
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(2))
        .load()
        .await
}

/// Decrypts a secret that was encrypted with KMS `Encrypt` (the base64 `CiphertextBlob`, as
/// `aws kms encrypt --query CiphertextBlob --output text` prints it), with the AWS configuration of
/// the environment. Used once at start-up for the deployment's own git credential. Errors name
/// what failed, never the secret.
pub async fn decrypt_secret(
    ciphertext_base64: &str,
    context: &BTreeMap<String, String>,
) -> Result<String, SealConfigError> {
    let blob = base64::engine::general_purpose::STANDARD
        .decode(ciphertext_base64.trim())
        .map_err(|_| SealConfigError("the KMS-encrypted value is not base64".into()))?;
    let sdk = load_aws_config().await;
    let client = aws_sdk_kms::Client::new(&sdk);
    let context = (!context.is_empty()).then(|| {
        context
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    let out = client
        .decrypt()
        .ciphertext_blob(Blob::new(blob))
        .set_encryption_context(context)
        .send()
        .await
        .map_err(|e| {
            let reason = match &e {
                SdkError::ServiceError(s) => format!(
                    "{} {}",
                    s.err().code().unwrap_or("error"),
                    s.err().message().unwrap_or("")
                ),
                SdkError::TimeoutError(_) => "timed out".to_owned(),
                SdkError::DispatchFailure(_) => "KMS could not be reached".to_owned(),
                _ => "the request failed".to_owned(),
            };
            SealConfigError(format!(
                "KMS could not decrypt the encrypted value: {}",
                reason.trim_end()
            ))
        })?;
    let plain = out
        .plaintext()
        .ok_or_else(|| SealConfigError("KMS Decrypt returned no plaintext".into()))?;
    String::from_utf8(plain.as_ref().to_vec())
        .map_err(|_| SealConfigError("the KMS-decrypted value is not UTF-8 text".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_from_arns() {
        assert_eq!(
            arn_region("arn:aws:kms:eu-west-1:111122223333:key/abcd").unwrap(),
            "eu-west-1"
        );
        assert_eq!(
            arn_region("arn:aws-us-gov:kms:us-gov-west-1:1:alias/x").unwrap(),
            "us-gov-west-1"
        );
        for bad in ["", "abcd", "arn:aws:s3:::bucket", "arn:aws:kms::1:key/x"] {
            assert!(arn_region(bad).is_err(), "{bad}");
        }
    }
}
