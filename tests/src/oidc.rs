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

/// Keys, and the JWKS file that publishes them (and, served, the issuer's HTTPS endpoint).
pub struct Issuer {
    dir: tempfile::TempDir,
    pub keys: Vec<SigningKey>,
    server: Option<Served>,
}

/// The issuer's discovery document and JWKS served over HTTPS by Python's standard library
/// (`http.server` and `ssl`), with a certificate of a CA made here.
struct Served {
    child: std::process::Child,
    port: u16,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        if let Some(served) = &mut self.server {
            let _ = served.child.kill();
            let _ = served.child.wait();
        }
    }
}

const SERVER: &str = r#"
import http.server, ssl, sys
port, root, cert, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)
    def log_message(self, fmt, *args):
        with open(log, "a") as f:
            f.write(self.path + "\n")
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

impl Issuer {
    /// An issuer with one RS256 key `k1`, published.
    pub fn new() -> Issuer {
        let mut issuer = Issuer {
            dir: tempfile::tempdir().expect("tempdir"),
            keys: Vec::new(),
            server: None,
        };
        issuer.add_key("k1", Algorithm::RS256);
        issuer.publish();
        issuer
    }

    /// An issuer with one RS256 key `k1`, serving `/.well-known/openid-configuration` and its
    /// JWKS over HTTPS on 127.0.0.1; its name (`iss`) is [`Issuer::url`], and the CA to trust
    /// is [`Issuer::ca_file`] (as `SSL_CERT_FILE`).
    pub fn served() -> Issuer {
        let mut issuer = Issuer::new();
        let dir = issuer.dir.path().to_owned();
        let (_, cert, key) = crate::certs::signed_by_a_ca(
            &dir,
            "127.0.0.1",
            "server",
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        );
        let port = crate::free_port();
        std::fs::create_dir_all(dir.join("www/.well-known")).expect("www");
        std::fs::write(dir.join("server.py"), SERVER).expect("server.py");
        let child = Command::new("python3")
            .arg(dir.join("server.py"))
            .arg(port.to_string())
            .arg(dir.join("www"))
            .arg(&cert)
            .arg(&key)
            .arg(dir.join("requests.log"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.err")).expect("server.err"))
            .spawn()
            .expect("python3 runs");
        issuer.server = Some(Served { child, port });
        let url = issuer.url();
        let discovery = serde_json::json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks.json"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],
        });
        std::fs::write(
            dir.join("www/.well-known/openid-configuration"),
            serde_json::to_vec(&discovery).expect("json"),
        )
        .expect("discovery");
        issuer.publish();
        for _ in 0..100 {
            if crate::port_open(port) {
                return issuer;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!(
            "the issuer's HTTPS server did not start on port {port}: {}",
            std::fs::read_to_string(dir.join("server.err")).unwrap_or_default()
        );
    }

    /// The served issuer's URL (its `iss`), or [`ISSUER`] when it is not served.
    pub fn url(&self) -> String {
        match &self.server {
            Some(served) => format!("https://127.0.0.1:{}", served.port),
            None => ISSUER.to_owned(),
        }
    }

    /// The CA that signed the served issuer's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The paths the served issuer was asked for, in order.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Makes a key of `alg`'s kind under `kid` (not published until [`Issuer::publish`]).
    pub fn add_key(&mut self, kid: &str, alg: Algorithm) -> &SigningKey {
        let (key, jwk) = make_key(self.dir.path(), alg, kid);
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
        let keys: Vec<&Jwk> = self
            .keys
            .iter()
            .filter(|k| kids.is_empty() || kids.contains(&k.kid.as_str()))
            .map(|k| &k.jwk)
            .collect();
        write_jwks(&self.jwks_file(), &keys);
    }

    /// Writes the JWKS file with every key.
    pub fn publish(&self) {
        self.publish_only(&[]);
    }

    /// Where the JWKS document is (served as `/jwks.json` when the issuer is served).
    pub fn jwks_file(&self) -> PathBuf {
        if self.server.is_some() {
            return self.dir.path().join("www/jwks.json");
        }
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

/// A private key of `alg`'s kind (RS256, ES256, else Ed25519) made by openssl in `dir`: its
/// signing key, and its public JWK under `kid`.
pub fn make_key(dir: &Path, alg: Algorithm, kid: &str) -> (EncodingKey, Jwk) {
    let file = dir.join(format!("{kid}.pem"));
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
    (key, jwk)
}

/// Writes a JWKS document holding `keys` at `path`.
pub fn write_jwks(path: &Path, keys: &[&Jwk]) {
    let set = JwkSet {
        keys: keys.iter().map(|k| (*k).clone()).collect(),
    };
    std::fs::write(path, serde_json::to_vec(&set).expect("json")).expect("jwks");
}
