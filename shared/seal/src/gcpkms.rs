//! Google Cloud KMS as a sops master key, over its REST API: `POST
//! https://cloudkms.googleapis.com/v1/{resource_id}:encrypt` with `{"plaintext": base64}` and
//! `…:decrypt` with `{"ciphertext": base64}`; entries are `gcp_kms: [{resource_id, created_at,
//! enc}]` with `enc` the base64 ciphertext, as sops writes them.
//!
//! Credentials, first found: `GOOGLE_OAUTH_ACCESS_TOKEN` (a token, as sops takes it);
//! `GOOGLE_CREDENTIALS` (sops' variable: a JSON key or its path), `GOOGLE_APPLICATION_CREDENTIALS`
//! (a path), `~/.config/gcloud/application_default_credentials.json`: a service account key (a
//! JWT signed RS256 exchanged at its `token_uri`) or a gcloud user (refresh token); else the GCE
//! metadata server. Tokens are kept until a minute before they expire; none is ever logged.
//!
//! No GCP server can run in the tests: the request and answer shapes, the JWT and the credential
//! files are unit-tested here; a real KMS was not exercised (docs/DECISIONS.md).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use gitstate_sops::{now_rfc3339, KeyEntry, MasterKey, Node, SopsError, Zeroizing};

use crate::SealConfigError;

/// Where Cloud KMS answers.
pub const GCP_KMS_ENDPOINT: &str = "https://cloudkms.googleapis.com";
/// The OAuth scope of Cloud KMS.
const SCOPE: &str = "https://www.googleapis.com/auth/cloudkms";
const METADATA_TOKEN_URL: &str =
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;
const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Checks a Cloud KMS key name: `projects/P/locations/L/keyRings/R/cryptoKeys/K`.
pub fn check_resource_id(id: &str) -> Result<(), SealConfigError> {
    let parts: Vec<&str> = id.trim().split('/').collect();
    let ok = parts.len() == 8
        && parts[0] == "projects"
        && parts[2] == "locations"
        && parts[4] == "keyRings"
        && parts[6] == "cryptoKeys"
        && parts.iter().all(|p| !p.is_empty());
    if ok {
        Ok(())
    } else {
        Err(SealConfigError(format!(
            "GCP KMS key '{id}' is not a key name (expected projects/PROJECT/locations/LOCATION/keyRings/RING/cryptoKeys/KEY)"
        )))
    }
}

/// The body of `:encrypt`.
fn encrypt_body(data_key: &[u8]) -> Zeroizing<Vec<u8>> {
    let plaintext = Zeroizing::new(B64.encode(data_key));
    let mut body = Zeroizing::new(Vec::with_capacity(plaintext.len() + 20));
    body.extend_from_slice(b"{\"plaintext\":\"");
    body.extend_from_slice(plaintext.as_bytes());
    body.extend_from_slice(b"\"}");
    body
}

/// The body of `:decrypt`.
fn decrypt_body(enc: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "ciphertext": enc.trim() })).unwrap_or_default()
}

/// The base64 `ciphertext` of an `:encrypt` answer.
fn ciphertext_of(answer: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(answer).ok()?;
    let c = v.get("ciphertext")?.as_str()?;
    (!c.is_empty() && B64.decode(c).is_ok()).then(|| c.to_owned())
}

/// The data key of a `:decrypt` answer (zeroed when dropped).
fn plaintext_of(answer: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    #[derive(serde::Deserialize)]
    struct Decrypted {
        #[serde(deserialize_with = "secret")]
        plaintext: Zeroizing<String>,
    }
    let d: Decrypted = serde_json::from_slice(answer).ok()?;
    let mut key = Zeroizing::new(Vec::with_capacity(64));
    B64.decode_vec(d.plaintext.as_bytes(), &mut key).ok()?;
    Some(key)
}

/// Google's error message of an answer (`{"error": {"code", "message", "status"}}`), one line.
fn error_of(answer: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(answer).ok()?;
    let e = v.get("error")?;
    let status = e.get("status").and_then(|s| s.as_str()).unwrap_or("");
    let message = e.get("message").and_then(|s| s.as_str()).unwrap_or("");
    let line = format!("{status} {}", message.lines().next().unwrap_or(""));
    Some(line.trim().chars().take(300).collect())
}

/// Percent-encodes a form value (RFC 3986 unreserved characters pass).
fn form_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A secret string field, zeroed when dropped.
fn secret<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Zeroizing<String>, D::Error> {
    <String as serde::Deserialize>::deserialize(d).map(Zeroizing::new)
}

/// A credential file's parts gitstate uses.
#[derive(serde::Deserialize)]
struct CredentialFile {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    client_email: String,
    #[serde(default, deserialize_with = "secret")]
    private_key: Zeroizing<String>,
    #[serde(default)]
    private_key_id: String,
    #[serde(default)]
    token_uri: String,
    #[serde(default)]
    client_id: String,
    #[serde(default, deserialize_with = "secret")]
    client_secret: Zeroizing<String>,
    #[serde(default, deserialize_with = "secret")]
    refresh_token: Zeroizing<String>,
}

/// How an access token is obtained.
enum Credentials {
    /// `GOOGLE_OAUTH_ACCESS_TOKEN`.
    Token(Zeroizing<String>),
    /// A service account key: a signed JWT exchanged at `token_uri`.
    ServiceAccount {
        email: String,
        key_id: String,
        key: Arc<aws_lc_rs::signature::RsaKeyPair>,
        token_uri: String,
    },
    /// A gcloud user: a refresh token exchanged at Google's token endpoint.
    User {
        client_id: String,
        client_secret: Zeroizing<String>,
        refresh_token: Zeroizing<String>,
    },
    /// The GCE / GKE metadata server.
    Metadata,
}

impl Credentials {
    /// Reads a credential file's JSON (`what` names it in errors, never its content).
    fn from_json(text: &str, what: &str) -> Result<Credentials, String> {
        let file: CredentialFile = serde_json::from_str(text)
            .map_err(|_| format!("{what} is not a Google credential JSON file"))?;
        match file.kind.as_str() {
            "service_account" => {
                let der = pem_der(&file.private_key)
                    .ok_or_else(|| format!("{what}: private_key is not a PEM PKCS#8 key"))?;
                let key = aws_lc_rs::signature::RsaKeyPair::from_pkcs8(&der)
                    .map_err(|e| format!("{what}: private_key is not an RSA key ({e})"))?;
                Ok(Credentials::ServiceAccount {
                    email: file.client_email,
                    key_id: file.private_key_id,
                    key: Arc::new(key),
                    token_uri: if file.token_uri.is_empty() {
                        "https://oauth2.googleapis.com/token".into()
                    } else {
                        file.token_uri
                    },
                })
            }
            "authorized_user" => Ok(Credentials::User {
                client_id: file.client_id,
                client_secret: file.client_secret,
                refresh_token: file.refresh_token,
            }),
            other => Err(format!(
                "{what}: credential type '{other}' is not supported (service_account, authorized_user)"
            )),
        }
    }

    /// The environment's credentials, in the order the module documentation gives.
    fn from_env() -> Result<Credentials, String> {
        if let Some(t) = std::env::var("GOOGLE_OAUTH_ACCESS_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
        {
            return Ok(Credentials::Token(Zeroizing::new(t)));
        }
        if let Some(v) = std::env::var("GOOGLE_CREDENTIALS")
            .ok()
            .filter(|v| !v.is_empty())
        {
            let v = Zeroizing::new(v);
            if v.trim_start().starts_with('{') {
                return Credentials::from_json(&v, "GOOGLE_CREDENTIALS");
            }
            return Credentials::from_path(v.trim(), "GOOGLE_CREDENTIALS");
        }
        if let Some(p) = std::env::var("GOOGLE_APPLICATION_CREDENTIALS")
            .ok()
            .filter(|p| !p.is_empty())
        {
            return Credentials::from_path(&p, "GOOGLE_APPLICATION_CREDENTIALS");
        }
        if let Some(home) = std::env::var_os("HOME") {
            let adc = std::path::Path::new(&home)
                .join(".config/gcloud/application_default_credentials.json");
            if adc.is_file() {
                return Credentials::from_path(&adc.display().to_string(), "gcloud's ADC file");
            }
        }
        Ok(Credentials::Metadata)
    }

    fn from_path(path: &str, what: &str) -> Result<Credentials, String> {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| format!("{what}: cannot read {path}: {e}"))?,
        );
        Credentials::from_json(&text, &format!("{what} ({path})"))
    }
}

/// The DER bytes of a PEM block.
fn pem_der(pem: &str) -> Option<Zeroizing<Vec<u8>>> {
    let body: Zeroizing<String> = Zeroizing::new(
        pem.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("-----") && !l.is_empty())
            .collect(),
    );
    let mut der = Zeroizing::new(Vec::new());
    B64.decode_vec(body.as_bytes(), &mut der).ok()?;
    Some(der)
}

/// The signed JWT a service account exchanges for a token (RFC 7523).
fn service_account_jwt(
    email: &str,
    key_id: &str,
    key: &aws_lc_rs::signature::RsaKeyPair,
    token_uri: &str,
    now: u64,
) -> Result<String, String> {
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": key_id});
    let claims = serde_json::json!({
        "iss": email, "scope": SCOPE, "aud": token_uri, "iat": now, "exp": now + 3600,
    });
    let signing_input = format!(
        "{}.{}",
        B64URL.encode(header.to_string()),
        B64URL.encode(claims.to_string())
    );
    let mut signature = vec![0u8; key.public_modulus_len()];
    key.sign(
        &aws_lc_rs::signature::RSA_PKCS1_SHA256,
        &aws_lc_rs::rand::SystemRandom::new(),
        signing_input.as_bytes(),
        &mut signature,
    )
    .map_err(|_| "signing the service account's JWT failed".to_owned())?;
    Ok(format!("{signing_input}.{}", B64URL.encode(signature)))
}

/// An OAuth token answer: `{"access_token", "expires_in"}`.
fn token_of(answer: &[u8]) -> Option<(Zeroizing<String>, Duration)> {
    #[derive(serde::Deserialize)]
    struct TokenAnswer {
        #[serde(deserialize_with = "secret")]
        access_token: Zeroizing<String>,
        #[serde(default)]
        expires_in: Option<u64>,
    }
    let t: TokenAnswer = serde_json::from_slice(answer).ok()?;
    (!t.access_token.is_empty()).then(|| {
        (
            t.access_token,
            Duration::from_secs(t.expires_in.unwrap_or(3600)),
        )
    })
}

/// An access token and the instant to stop using it.
type HeldToken = (Zeroizing<String>, Instant);

/// One Cloud KMS key. Like [`crate::KmsKey`], calls run on `runtime` with `block_on`: use it from
/// a blocking thread.
#[derive(Clone)]
pub struct GcpKmsKey {
    resource_id: String,
    endpoint: String,
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// The access token and when to stop using it.
    token: Arc<Mutex<Option<HeldToken>>>,
}

impl std::fmt::Debug for GcpKmsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcpKmsKey")
            .field("resource_id", &self.resource_id)
            .finish_non_exhaustive()
    }
}

impl GcpKmsKey {
    /// A key for `resource_id` (`projects/…/cryptoKeys/…`).
    pub fn new(
        resource_id: &str,
        runtime: tokio::runtime::Handle,
    ) -> Result<GcpKmsKey, SealConfigError> {
        check_resource_id(resource_id)?;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| {
                SealConfigError(format!("GCP KMS key {resource_id}: no HTTP client: {e}"))
            })?;
        Ok(GcpKmsKey {
            resource_id: resource_id.trim().to_owned(),
            endpoint: GCP_KMS_ENDPOINT.to_owned(),
            client,
            runtime,
            token: Arc::new(Mutex::new(None)),
        })
    }

    fn err(&self, reason: String) -> SopsError {
        SopsError::Key {
            kind: "gcp_kms".into(),
            id: self.resource_id.clone(),
            reason,
        }
    }

    fn unavailable(&self, reason: String) -> SopsError {
        SopsError::Unavailable {
            kind: "gcp_kms".into(),
            id: self.resource_id.clone(),
            reason,
        }
    }

    /// Sends `request` and returns (status, body), or "unavailable" when nothing came back.
    fn send(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<(u16, Zeroizing<Vec<u8>>), SopsError> {
        self.runtime
            .block_on(async {
                let response = request.send().await?;
                let status = response.status().as_u16();
                let body = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, Zeroizing::new(body.to_vec())))
            })
            .map_err(|e| {
                let why = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "could not connect"
                } else {
                    "the request failed"
                };
                self.unavailable(format!("{what}: {why}"))
            })
    }

    /// A valid access token: the remembered one, or a new one from the credentials.
    fn access_token(&self) -> Result<Zeroizing<String>, SopsError> {
        if let Ok(held) = self.token.lock() {
            if let Some((t, until)) = held.as_ref() {
                if Instant::now() < *until {
                    return Ok(t.clone());
                }
            }
        }
        let credentials = Credentials::from_env().map_err(|e| self.err(e))?;
        let (token, lifetime) = match credentials {
            Credentials::Token(t) => return Ok(t),
            Credentials::ServiceAccount {
                email,
                key_id,
                key,
                token_uri,
            } => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                let jwt = service_account_jwt(&email, &key_id, &key, &token_uri, now)
                    .map_err(|e| self.err(e))?;
                let body = format!(
                    "grant_type={}&assertion={}",
                    form_value("urn:ietf:params:oauth:grant-type:jwt-bearer"),
                    form_value(&jwt)
                );
                self.exchange(&token_uri, body)?
            }
            Credentials::User {
                client_id,
                client_secret,
                refresh_token,
            } => {
                let body = Zeroizing::new(format!(
                    "grant_type=refresh_token&client_id={}&client_secret={}&refresh_token={}",
                    form_value(&client_id),
                    form_value(&client_secret),
                    form_value(&refresh_token)
                ));
                self.exchange("https://oauth2.googleapis.com/token", body.to_string())?
            }
            Credentials::Metadata => {
                let request = self
                    .client
                    .get(METADATA_TOKEN_URL)
                    .header("Metadata-Flavor", "Google");
                let no_credentials = |why: String| {
                    self.err(format!(
                        "no Google credentials: set GOOGLE_APPLICATION_CREDENTIALS, GOOGLE_CREDENTIALS or GOOGLE_OAUTH_ACCESS_TOKEN ({why})"
                    ))
                };
                // Off GCP the metadata server does not exist: a configuration error, not an outage.
                let (status, body) = self
                    .send("the metadata server's token", request)
                    .map_err(|_| no_credentials("the metadata server cannot be reached".into()))?;
                match (status, token_of(&body)) {
                    (200, Some(t)) => t,
                    _ => {
                        return Err(no_credentials(format!(
                            "the metadata server answered {status}"
                        )))
                    }
                }
            }
        };
        let until = Instant::now() + lifetime.saturating_sub(Duration::from_secs(60));
        if let Ok(mut held) = self.token.lock() {
            *held = Some((token.clone(), until));
        }
        Ok(token)
    }

    /// Exchanges a form `body` at `token_uri` for an access token.
    fn exchange(
        &self,
        token_uri: &str,
        body: String,
    ) -> Result<(Zeroizing<String>, Duration), SopsError> {
        let request = self
            .client
            .post(token_uri)
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body);
        let (status, answer) = self.send("the OAuth token exchange", request)?;
        match (status, token_of(&answer)) {
            (200, Some(t)) => Ok(t),
            _ => Err(self.err(format!(
                "the OAuth token exchange at {token_uri} answered {status}"
            ))),
        }
    }

    /// POSTs `body` to `{resource_id}:{operation}`; returns the answer's body.
    fn call(&self, operation: &str, body: Vec<u8>) -> Result<Zeroizing<Vec<u8>>, SopsError> {
        let token = self.access_token()?;
        let request = self
            .client
            .post(format!(
                "{}/v1/{}:{operation}",
                self.endpoint, self.resource_id
            ))
            .bearer_auth(token.as_str())
            .header("Content-Type", "application/json")
            .body(body);
        drop(token);
        let (status, answer) = self.send(operation, request)?;
        if (200..300).contains(&status) {
            return Ok(answer);
        }
        let reason = match error_of(&answer) {
            Some(e) => format!("{operation}: Cloud KMS answered {status}: {e}"),
            None => format!("{operation}: Cloud KMS answered {status}"),
        };
        if status >= 500 || status == 429 {
            Err(self.unavailable(reason))
        } else {
            if status == 401 {
                if let Ok(mut held) = self.token.lock() {
                    *held = None;
                }
            }
            Err(self.err(reason))
        }
    }
}

impl MasterKey for GcpKmsKey {
    fn kind(&self) -> &'static str {
        "gcp_kms"
    }

    fn id(&self) -> String {
        self.resource_id.clone()
    }

    fn wrap(&self, data_key: &[u8]) -> Result<KeyEntry, SopsError> {
        let answer = self.call("encrypt", encrypt_body(data_key).to_vec())?;
        let enc = ciphertext_of(&answer)
            .ok_or_else(|| self.err("encrypt: Cloud KMS's answer has no ciphertext".into()))?;
        Ok(KeyEntry {
            kind: "gcp_kms".into(),
            fields: vec![
                ("resource_id".into(), Node::Str(self.resource_id.clone())),
                ("created_at".into(), Node::Str(now_rfc3339())),
                ("enc".into(), Node::Str(enc)),
            ],
        })
    }

    fn unwrap(&self, entry: &KeyEntry) -> Result<Option<Zeroizing<Vec<u8>>>, SopsError> {
        if entry.field("resource_id").map(str::trim) != Some(self.resource_id.as_str()) {
            return Ok(None);
        }
        let enc = entry.field("enc").ok_or_else(|| {
            SopsError::Metadata(format!("gcp_kms entry for {} has no enc", self.resource_id))
        })?;
        let answer = self.call("decrypt", decrypt_body(enc))?;
        plaintext_of(&answer)
            .map(Some)
            .ok_or_else(|| self.err("decrypt: Cloud KMS's answer has no plaintext".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "projects/p/locations/global/keyRings/r/cryptoKeys/k";

    #[test]
    fn resource_ids_are_checked() {
        check_resource_id(ID).unwrap();
        for bad in [
            "",
            "projects/p/locations/global/keyRings/r",
            "projects/p/locations/global/keyRings/r/cryptoKeys/",
            "projects/p/locations/global/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1",
        ] {
            assert!(check_resource_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn request_and_answer_shapes() {
        let body = encrypt_body(&[1, 2, 3]);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
            serde_json::json!({"plaintext": "AQID"})
        );
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&decrypt_body(" CiQA \n")).unwrap(),
            serde_json::json!({"ciphertext": "CiQA"})
        );
        // what Cloud KMS answers (REST reference, EncryptResponse / DecryptResponse)
        let encrypted = br#"{"name": "projects/p/locations/global/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1", "ciphertext": "CiQAaGVsbG8=", "ciphertextCrc32c": "123", "verifiedPlaintextCrc32c": true, "protectionLevel": "SOFTWARE"}"#;
        assert_eq!(ciphertext_of(encrypted).as_deref(), Some("CiQAaGVsbG8="));
        assert_eq!(ciphertext_of(br#"{"name": "x"}"#), None);
        let decrypted = br#"{"plaintext": "AQID", "plaintextCrc32c": "1", "usedPrimary": true, "protectionLevel": "SOFTWARE"}"#;
        assert_eq!(plaintext_of(decrypted).unwrap().as_slice(), &[1, 2, 3]);
        assert!(plaintext_of(br#"{"plaintext": "not base64!"}"#).is_none());
        let denied = br#"{"error": {"code": 403, "message": "Permission 'cloudkms.cryptoKeyVersions.useToEncrypt' denied on resource\nmore", "status": "PERMISSION_DENIED"}}"#;
        assert_eq!(
            error_of(denied).unwrap(),
            "PERMISSION_DENIED Permission 'cloudkms.cryptoKeyVersions.useToEncrypt' denied on resource"
        );
        assert_eq!(
            token_of(br#"{"access_token": "ya29.x", "expires_in": 3599, "token_type": "Bearer"}"#)
                .map(|(t, d)| (t.to_string(), d)),
            Some(("ya29.x".to_owned(), Duration::from_secs(3599)))
        );
        assert_eq!(form_value("urn:a b/c"), "urn%3Aa%20b%2Fc");
    }

    #[test]
    fn entries_of_other_keys_are_not_mine() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let key = GcpKmsKey::new(ID, rt.handle().clone()).unwrap();
        let entry = KeyEntry {
            kind: "gcp_kms".into(),
            fields: vec![
                (
                    "resource_id".into(),
                    Node::Str("projects/p/locations/global/keyRings/r/cryptoKeys/other".into()),
                ),
                ("enc".into(), Node::Str("CiQA".into())),
            ],
        };
        assert!(key.unwrap(&entry).unwrap().is_none());
        assert_eq!(key.id(), ID);
    }

    #[test]
    fn service_account_jwts_are_signed_rs256() {
        let out = std::process::Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .output()
            .expect("openssl (scripts/install-test-deps.sh installs it)");
        assert!(out.status.success());
        let pem = String::from_utf8(out.stdout).unwrap();
        let file = serde_json::json!({
            "type": "service_account",
            "client_email": "sa@p.iam.gserviceaccount.com",
            "private_key": pem,
            "private_key_id": "kid-1",
        });
        let Ok(Credentials::ServiceAccount {
            email,
            key_id,
            key,
            token_uri,
        }) = Credentials::from_json(&file.to_string(), "the file")
        else {
            panic!("a service account")
        };
        assert_eq!(token_uri, "https://oauth2.googleapis.com/token");
        let jwt = service_account_jwt(&email, &key_id, &key, &token_uri, 1_000).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let part = |i: usize| -> serde_json::Value {
            serde_json::from_slice(&B64URL.decode(parts[i]).unwrap()).unwrap()
        };
        assert_eq!(
            part(0),
            serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": "kid-1"})
        );
        assert_eq!(
            part(1),
            serde_json::json!({"iss": "sa@p.iam.gserviceaccount.com", "scope": SCOPE,
                "aud": "https://oauth2.googleapis.com/token", "iat": 1000, "exp": 4600})
        );
        let public = aws_lc_rs::signature::UnparsedPublicKey::new(
            &aws_lc_rs::signature::RSA_PKCS1_2048_8192_SHA256,
            aws_lc_rs::signature::KeyPair::public_key(key.as_ref())
                .as_ref()
                .to_vec(),
        );
        public
            .verify(
                format!("{}.{}", parts[0], parts[1]).as_bytes(),
                &B64URL.decode(parts[2]).unwrap(),
            )
            .expect("a valid RS256 signature");
    }

    #[test]
    fn credential_files_are_read_and_never_quoted() {
        let e = Credentials::from_json(r#"{"type": "external_account"}"#, "the file")
            .err()
            .unwrap();
        assert!(e.contains("'external_account' is not supported"), "{e}");
        let e = Credentials::from_json("secret-looking text", "the file")
            .err()
            .unwrap();
        assert!(!e.contains("secret"), "{e}");
        let e = Credentials::from_json(
            r#"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}"#,
            "the file",
        )
        .err()
        .unwrap();
        assert!(e.contains("not an RSA key"), "{e}");
        let user = Credentials::from_json(
            r#"{"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}"#,
            "the file",
        )
        .ok()
        .unwrap();
        assert!(matches!(user, Credentials::User { .. }));
    }
}
