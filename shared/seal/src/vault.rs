//! HashiCorp Vault / OpenBao transit as a sops master key: the data key is encrypted with
//! `POST {address}/v1/{engine_path}/encrypt/{key_name}` and decrypted with `…/decrypt/…`, entries
//! are `hc_vault: [{vault_address, engine_path, key_name, created_at, enc}]` like sops writes them.
//!
//! Keys are named by sops' URI form, `https://vault.example.com:8200/v1/transit/keys/mykey`. The
//! token is read at every call from `VAULT_TOKEN`, else `~/.vault-token` (so a Vault agent that
//! renews the file is followed); `VAULT_NAMESPACE` is sent as `X-Vault-Namespace`. The token is
//! never logged nor put in an error.

use std::time::Duration;

use base64::Engine;
use gitstate_sops::{now_rfc3339, KeyEntry, MasterKey, Node, SopsError, Zeroizing};

use crate::SealConfigError;

/// Connect timeout of a Vault call.
pub const VAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Upper bound of one Vault call.
pub const VAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a transit key lives: `{address}/v1/{engine_path}/keys/{key_name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultKeyUri {
    /// `scheme://host[:port]`, no path.
    pub address: String,
    /// The transit mount (`transit`, or a nested `team/transit`).
    pub engine_path: String,
    /// The key's name.
    pub key_name: String,
}

impl VaultKeyUri {
    /// Parses sops' URI form (`https://vault:8200/v1/transit/keys/mykey`): the address is the
    /// scheme and authority, the key the last segment, the engine path what lies between `v1`
    /// and the segment before the key (sops ignores that segment's name; so does this).
    pub fn parse(uri: &str) -> Result<VaultKeyUri, SealConfigError> {
        let bad = |why: &str| {
            SealConfigError(format!(
                "Vault transit key '{uri}': {why} (expected https://vault.example.com:8200/v1/transit/keys/KEY_NAME)"
            ))
        };
        let uri = uri.trim();
        let (scheme, rest) = uri.split_once("://").ok_or_else(|| bad("missing scheme"))?;
        if !matches!(scheme, "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('@') {
            return Err(bad(
                "credentials in the URI are not supported; give the token in VAULT_TOKEN",
            ));
        }
        let path = path.split(['?', '#']).next().unwrap_or("");
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        let versioned = |s: &str| {
            s.strip_prefix('v')
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        };
        if segments.len() < 4 || segments.iter().any(|s| s.is_empty()) {
            return Err(bad("the path is not /v1/ENGINE/keys/KEY_NAME"));
        }
        if !versioned(segments[0]) {
            return Err(bad(
                "the path must start with /v1 (a Vault behind a path prefix is not supported, as in sops)",
            ));
        }
        let key_name = segments[segments.len() - 1].to_owned();
        let engine_path = segments[1..segments.len() - 2].join("/");
        Ok(VaultKeyUri {
            address: format!("{scheme}://{authority}"),
            engine_path,
            key_name,
        })
    }

    /// The URI in sops' form (what sops prints for the key).
    pub fn uri(&self) -> String {
        format!(
            "{}/v1/{}/keys/{}",
            self.address, self.engine_path, self.key_name
        )
    }

    fn call_url(&self, operation: &str) -> String {
        format!(
            "{}/v1/{}/{operation}/{}",
            self.address, self.engine_path, self.key_name
        )
    }

    /// Whether `entry` names this key (address compared without a trailing `/`).
    fn names(&self, entry: &KeyEntry) -> bool {
        entry
            .field("vault_address")
            .map(|a| a.trim_end_matches('/'))
            == Some(&self.address)
            && entry.field("engine_path").map(|p| p.trim_matches('/'))
                == Some(self.engine_path.as_str())
            && entry.field("key_name") == Some(self.key_name.as_str())
    }
}

/// The Vault token of the environment: `VAULT_TOKEN`, else the first line of `~/.vault-token`.
fn token() -> Option<Zeroizing<String>> {
    if let Some(t) = std::env::var("VAULT_TOKEN").ok().filter(|t| !t.is_empty()) {
        return Some(Zeroizing::new(t));
    }
    let home = std::env::var_os("HOME")?;
    let text = Zeroizing::new(
        std::fs::read_to_string(std::path::Path::new(&home).join(".vault-token")).ok()?,
    );
    let t = text.trim();
    (!t.is_empty()).then(|| Zeroizing::new(t.to_owned()))
}

/// One transit key. [`MasterKey`] is synchronous; the calls run on `runtime` with `block_on`, so
/// a `VaultKey` must be used from a blocking thread (the sealer runs the codec in
/// `spawn_blocking`), like [`crate::KmsKey`].
#[derive(Clone)]
pub struct VaultKey {
    uri: VaultKeyUri,
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    /// A token given explicitly (instead of the environment's).
    token: Option<std::sync::Arc<Zeroizing<String>>>,
}

impl std::fmt::Debug for VaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaultKey")
            .field("uri", &self.uri.uri())
            .finish_non_exhaustive()
    }
}

/// Vault's answer: `{"data": {...}}` or `{"errors": [...]}`.
#[derive(serde::Deserialize, Default)]
struct Answer {
    #[serde(default)]
    data: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    errors: Vec<String>,
}

impl VaultKey {
    /// A key for sops' URI form.
    pub fn new(uri: &str, runtime: tokio::runtime::Handle) -> Result<VaultKey, SealConfigError> {
        let uri = VaultKeyUri::parse(uri)?;
        let client = reqwest::Client::builder()
            .connect_timeout(VAULT_CONNECT_TIMEOUT)
            .timeout(VAULT_REQUEST_TIMEOUT)
            .build()
            .map_err(|e| {
                SealConfigError(format!(
                    "Vault transit key {}: no HTTP client: {e}",
                    uri.uri()
                ))
            })?;
        Ok(VaultKey {
            uri,
            client,
            runtime,
            token: None,
        })
    }

    /// This key with an explicit token instead of `VAULT_TOKEN` / `~/.vault-token`.
    pub fn with_token(mut self, token: Zeroizing<String>) -> VaultKey {
        self.token = Some(std::sync::Arc::new(token));
        self
    }

    /// Where the key lives.
    pub fn uri(&self) -> &VaultKeyUri {
        &self.uri
    }

    fn err(&self, reason: String) -> SopsError {
        SopsError::Key {
            kind: "hc_vault".into(),
            id: self.uri.uri(),
            reason,
        }
    }

    fn unavailable(&self, reason: String) -> SopsError {
        SopsError::Unavailable {
            kind: "hc_vault".into(),
            id: self.uri.uri(),
            reason,
        }
    }

    /// POSTs `body` to `…/{operation}/{key}` and returns the `data` object of the answer.
    fn call(
        &self,
        operation: &str,
        body: Zeroizing<Vec<u8>>,
    ) -> Result<serde_json::Map<String, serde_json::Value>, SopsError> {
        let token = match &self.token {
            Some(t) => Some(Zeroizing::new(t.as_str().to_owned())),
            None => token(),
        };
        let token = token.ok_or_else(|| SopsError::Unconfigured {
            kind: "hc_vault".into(),
            id: self.uri.uri(),
            needs: format!(
                "a Vault token to {operation} (set VAULT_TOKEN or write one to ~/.vault-token)"
            ),
        })?;
        let mut request = self
            .client
            .post(self.uri.call_url(operation))
            .header("X-Vault-Token", token.as_str())
            .header("Content-Type", "application/json")
            .body(body.to_vec()); // reqwest's copy of the body is out of reach
        drop(token);
        drop(body);
        if let Some(ns) = std::env::var("VAULT_NAMESPACE")
            .ok()
            .filter(|n| !n.is_empty())
        {
            request = request.header("X-Vault-Namespace", ns);
        }
        let (status, bytes) = self
            .runtime
            .block_on(async {
                let response = request.send().await?;
                let status = response.status();
                let bytes = response.bytes().await?;
                Ok::<_, reqwest::Error>((status, bytes))
            })
            .map_err(|e| {
                let what = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "could not connect"
                } else {
                    "the request failed"
                };
                self.unavailable(format!("{operation}: {what}"))
            })?;
        // The answer to decrypt holds the data key: parse it in place, zero the bytes' copy.
        let bytes = Zeroizing::new(bytes.to_vec());
        let answer: Answer = serde_json::from_slice(&bytes).unwrap_or_default();
        if !status.is_success() {
            let reason = if answer.errors.is_empty() {
                format!("{operation}: Vault answered {status}")
            } else {
                let errors: Vec<String> = answer
                    .errors
                    .iter()
                    .map(|e| e.lines().next().unwrap_or("").chars().take(200).collect())
                    .collect();
                format!(
                    "{operation}: Vault answered {status}: {}",
                    errors.join("; ")
                )
            };
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                self.unavailable(reason)
            } else {
                self.err(reason)
            });
        }
        answer
            .data
            .ok_or_else(|| self.err(format!("{operation}: Vault's answer has no data")))
    }
}

impl MasterKey for VaultKey {
    fn kind(&self) -> &'static str {
        "hc_vault"
    }

    fn id(&self) -> String {
        self.uri.uri()
    }

    fn wrap(&self, data_key: &[u8]) -> Result<KeyEntry, SopsError> {
        let plaintext = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(data_key));
        let mut body = Zeroizing::new(Vec::with_capacity(plaintext.len() + 32));
        body.extend_from_slice(b"{\"plaintext\":\"");
        body.extend_from_slice(plaintext.as_bytes());
        body.extend_from_slice(b"\"}");
        let data = self.call("encrypt", body)?;
        let ciphertext = data
            .get("ciphertext")
            .and_then(|c| c.as_str())
            .filter(|c| !c.is_empty())
            .ok_or_else(|| self.err("encrypt: Vault's answer has no ciphertext".into()))?;
        Ok(KeyEntry {
            kind: "hc_vault".into(),
            fields: vec![
                ("vault_address".into(), Node::Str(self.uri.address.clone())),
                (
                    "engine_path".into(),
                    Node::Str(self.uri.engine_path.clone()),
                ),
                ("key_name".into(), Node::Str(self.uri.key_name.clone())),
                ("created_at".into(), Node::Str(now_rfc3339())),
                ("enc".into(), Node::Str(ciphertext.to_owned())),
            ],
        })
    }

    fn unwrap(&self, entry: &KeyEntry) -> Result<Option<Zeroizing<Vec<u8>>>, SopsError> {
        if !self.uri.names(entry) {
            return Ok(None);
        }
        let enc = entry.field("enc").ok_or_else(|| {
            SopsError::Metadata(format!("hc_vault entry for {} has no enc", self.uri.uri()))
        })?;
        let body = serde_json::to_vec(&serde_json::json!({ "ciphertext": enc }))
            .map_err(|e| self.err(format!("decrypt: {e}")))?;
        let mut data = self.call("decrypt", Zeroizing::new(body))?;
        let plaintext = match data.remove("plaintext") {
            Some(serde_json::Value::String(p)) => Zeroizing::new(p),
            _ => return Err(self.err("decrypt: Vault's answer has no plaintext".into())),
        };
        let mut key = Zeroizing::new(Vec::with_capacity(64));
        base64::engine::general_purpose::STANDARD
            .decode_vec(plaintext.as_bytes(), &mut key)
            .map_err(|_| self.err("decrypt: Vault's plaintext is not base64".into()))?;
        Ok(Some(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_like_sops() {
        let k = VaultKeyUri::parse("https://vault.example.com:8200/v1/transit/keys/mykey").unwrap();
        assert_eq!(k.address, "https://vault.example.com:8200");
        assert_eq!(k.engine_path, "transit");
        assert_eq!(k.key_name, "mykey");
        assert_eq!(
            k.uri(),
            "https://vault.example.com:8200/v1/transit/keys/mykey"
        );
        assert_eq!(
            k.call_url("encrypt"),
            "https://vault.example.com:8200/v1/transit/encrypt/mykey"
        );
        let nested = VaultKeyUri::parse("http://127.0.0.1:8200/v1/team/sops/keys/k1/").unwrap();
        assert_eq!(nested.engine_path, "team/sops");
        assert_eq!(nested.key_name, "k1");
        for bad in [
            "",
            "vault:8200/v1/transit/keys/k",
            "ftp://vault/v1/transit/keys/k",
            "https://vault:8200/transit/keys/k",
            "https://vault:8200/prefix/v1/transit/keys/k",
            "https://vault:8200/v1/keys/k",
            "https://user:pw@vault:8200/v1/transit/keys/k",
        ] {
            let e = VaultKeyUri::parse(bad).expect_err(bad);
            assert!(e.0.contains("expected https://"), "{e}");
        }
    }

    #[test]
    fn entries_are_matched_by_address_engine_and_name() {
        let k = VaultKeyUri::parse("http://127.0.0.1:8200/v1/transit/keys/k").unwrap();
        let entry = |addr: &str, engine: &str, name: &str| KeyEntry {
            kind: "hc_vault".into(),
            fields: vec![
                ("vault_address".into(), Node::Str(addr.into())),
                ("engine_path".into(), Node::Str(engine.into())),
                ("key_name".into(), Node::Str(name.into())),
            ],
        };
        assert!(k.names(&entry("http://127.0.0.1:8200", "transit", "k")));
        assert!(k.names(&entry("http://127.0.0.1:8200/", "transit", "k")));
        assert!(!k.names(&entry("http://127.0.0.1:8201", "transit", "k")));
        assert!(!k.names(&entry("http://127.0.0.1:8200", "other", "k")));
        assert!(!k.names(&entry("http://127.0.0.1:8200", "transit", "j")));
    }
}
