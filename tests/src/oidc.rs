//! An OIDC issuer for the tests: signing keys made by `openssl`, its JWKS document in a file (as
//! `auth.oidc.jwks_file` reads it), and tokens signed with `jsonwebtoken`, a standard JOSE
//! library (nothing hand-rolled).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::Value;

/// The issuer's name in `iss`.
pub const ISSUER: &str = "https://issuer.gitstate.test";

/// One signing key.
pub struct SigningKey {
    pub kid: String,
    pub alg: Algorithm,
    key: EncodingKey,
    pub jwk: Jwk,
}

/// Keys, and the JWKS file that publishes them.
pub struct Issuer {
    dir: tempfile::TempDir,
    pub keys: Vec<SigningKey>,
}

impl Issuer {
    /// An issuer with one RS256 key `k1`, published.
    pub fn new() -> Issuer {
        let mut issuer = Issuer {
            dir: tempfile::tempdir().expect("tempdir"),
            keys: Vec::new(),
        };
        issuer.add_key("k1", Algorithm::RS256);
        issuer.publish();
        issuer
    }

    /// Makes a key of `alg`'s kind under `kid` (not published until [`Issuer::publish`]).
    pub fn add_key(&mut self, kid: &str, alg: Algorithm) -> &SigningKey {
        let file = self.dir.path().join(format!("{kid}.pem"));
        let args: &[&str] = match alg {
            Algorithm::RS256 => &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
            Algorithm::ES256 => &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
            _ => &["-algorithm", "ED25519"],
        };
        let made = Command::new("openssl")
            .arg("genpkey")
            .args(args)
            .arg("-out")
            .arg(&file)
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(made.success(), "openssl genpkey");
        let pem = std::fs::read(&file).expect("the key");
        let key = match alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem),
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem),
            _ => EncodingKey::from_ed_pem(&pem),
        }
        .expect("a private key");
        let mut jwk = Jwk::from_encoding_key(&key, alg).expect("its JWK");
        jwk.common.key_id = Some(kid.to_owned());
        self.keys.push(SigningKey {
            kid: kid.to_owned(),
            alg,
            key,
            jwk,
        });
        self.keys.last().expect("just added")
    }

    /// Writes the JWKS file with the keys named `kids` (all when empty).
    pub fn publish_only(&self, kids: &[&str]) {
        let set = JwkSet {
            keys: self
                .keys
                .iter()
                .filter(|k| kids.is_empty() || kids.contains(&k.kid.as_str()))
                .map(|k| k.jwk.clone())
                .collect(),
        };
        std::fs::write(self.jwks_file(), serde_json::to_vec(&set).expect("json")).expect("jwks");
    }

    /// Writes the JWKS file with every key.
    pub fn publish(&self) {
        self.publish_only(&[]);
    }

    /// Where the JWKS document is.
    pub fn jwks_file(&self) -> PathBuf {
        self.dir.path().join("jwks.json")
    }

    /// A token with `claims`, signed by key `kid`.
    pub fn sign(&self, kid: &str, claims: &Value) -> String {
        let key = self
            .keys
            .iter()
            .find(|k| k.kid == kid)
            .expect("a key of this issuer");
        let mut header = Header::new(key.alg);
        header.kid = Some(kid.to_owned());
        encode(&header, claims, &key.key).expect("signed")
    }

    /// The directory of its files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for Issuer {
    fn default() -> Self {
        Issuer::new()
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}
