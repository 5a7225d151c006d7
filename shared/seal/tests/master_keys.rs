//! The PGP and Vault transit master keys against the real components: the user's `gpg` with a
//! throwaway key, OpenBao 2.7.2 in dev mode (the Vault API), and the real sops 3.11 binary in both
//! directions (gitstate writes, `sops -d` reads; `sops -e` writes, gitstate reads). The tools come
//! from scripts/install-test-deps.sh; a missing one fails the test with a sentence naming it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use gitstate_core::{Place, StatePath};
use gitstate_seal::{PgpKey, SealerConfig, SopsSealer, VaultKey, Zeroizing};
use gitstate_sops::{encrypt, Document, EncryptOptions, KeySource, MasterKey, Node, SopsError};
use gitstate_tests::crypto::sops_bin;
use gitstate_tests::keys::{Bao, GnuPg};

const PLAIN: &str = r#"{"version":4,"serial":7,"lineage":"l-1","outputs":{"pw":{"value":"s3cr\u00e9t","type":"string"}},"resources":[{"mode":"managed","type":"null_resource","name":"n","provider":"provider[\"registry.terraform.io/hashicorp/null\"]","instances":[{"attributes":{"id":"42","port":5432}}]}]}"#;

const ROOT_TOKEN: &str = Bao::ROOT_TOKEN;

fn tmpdir(name: &str) -> PathBuf {
    // short: gpg-agent's socket lives in the GnuPG home and socket paths are limited to ~100 bytes
    let d = std::env::temp_dir().join(format!("gs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(400)])
        )
    })
}

/// Runs sops with `env`, in `dir`; panics with its stderr when it fails.
fn sops(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Vec<u8> {
    let out = Command::new(sops_bin())
        .current_dir(dir)
        .env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_KEY_FILE")
        .env_remove("SOPS_PGP_FP")
        .env_remove("SOPS_VAULT_URIS")
        .envs(env.iter().copied())
        .arg("--disable-version-check")
        .args(args)
        .output()
        .expect("run sops");
    assert!(
        out.status.success(),
        "sops {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

// ------------------------------------------------------------------------------------ gpg

/// The PGP master key of `gnupg`'s key, reading its home.
fn pgp_key(gnupg: &GnuPg) -> PgpKey {
    PgpKey::new(&gnupg.fingerprint)
        .unwrap()
        .with_home(&gnupg.home)
}

#[test]
fn pgp_gitstate_writes_and_real_sops_reads() {
    let gnupg = GnuPg::new("pgp-w");
    let key = pgp_key(&gnupg);
    let sealed = encrypt(
        PLAIN.as_bytes(),
        &[&key as &dyn MasterKey],
        &EncryptOptions::default(),
    )
    .expect("gitstate encrypts to the PGP key");
    let doc = json(&sealed);
    let entry = &doc["sops"]["pgp"][0];
    assert_eq!(entry["fp"], gnupg.fingerprint.as_str());
    assert!(entry["enc"]
        .as_str()
        .unwrap()
        .starts_with("-----BEGIN PGP MESSAGE-----"));
    assert!(entry["created_at"].is_string());
    let dir = tmpdir("pgp-w-files");
    std::fs::write(dir.join("state.json"), &sealed).unwrap();
    let plain = sops(
        &dir,
        &[("GNUPGHOME", gnupg.home_str())],
        &["-d", "state.json"],
    );
    assert_eq!(json(&plain), json(PLAIN.as_bytes()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pgp_real_sops_writes_and_gitstate_reads() {
    let gnupg = GnuPg::new("pgp-r");
    let dir = tmpdir("pgp-r-files");
    std::fs::write(dir.join("state.json"), PLAIN).unwrap();
    let sealed = sops(
        &dir,
        &[("GNUPGHOME", gnupg.home_str())],
        &["-e", "--pgp", &gnupg.fingerprint, "state.json"],
    );
    let keys = KeySource::new().with(Box::new(pgp_key(&gnupg)));
    let doc = Document::decrypt(&sealed, &keys).expect("gitstate opens what sops wrote");
    assert_eq!(json(&doc.to_json()), json(PLAIN.as_bytes()));

    // Without the key the error names the fingerprint the document needs.
    let e = Document::decrypt(&sealed, &KeySource::new()).expect_err("no key");
    assert!(matches!(e, SopsError::NoKey { .. }), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("pgp:{}", gnupg.fingerprint)),
        "{e}"
    );
    // With the fingerprint configured but its secret key not in the keyring, gpg's reason is
    // there too, and nothing of the document's key.
    let empty = tmpdir("pgp-r-empty");
    std::fs::set_permissions(&empty, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let keys = KeySource::new().with(Box::new(
        PgpKey::new(&gnupg.fingerprint).unwrap().with_home(&empty),
    ));
    let e = Document::decrypt(&sealed, &keys).expect_err("no secret key");
    let text = e.to_string();
    assert!(text.contains(&gnupg.fingerprint), "{text}");
    assert!(text.contains("No secret key"), "{text}");
    assert!(!text.contains("BEGIN PGP"), "{text}");
    let _ = Command::new("gpgconf")
        .arg("--homedir")
        .arg(&empty)
        .args(["--kill", "gpg-agent"])
        .status();
    let _ = std::fs::remove_dir_all(&empty);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pgp_to_a_fingerprint_without_a_public_key_names_it() {
    let gnupg = GnuPg::new("pgp-x");
    let unknown = PgpKey::new("0123456789ABCDEF0123456789ABCDEF01234567")
        .unwrap()
        .with_home(&gnupg.home);
    let e = encrypt(
        PLAIN.as_bytes(),
        &[&unknown as &dyn MasterKey],
        &EncryptOptions::default(),
    )
    .expect_err("no public key");
    let text = e.to_string();
    assert!(
        text.contains("pgp key 0123456789ABCDEF0123456789ABCDEF01234567"),
        "{text}"
    );
    assert!(text.contains("gpg --encrypt failed: gpg:"), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
}

// ------------------------------------------------------------------------------------ OpenBao

/// An OpenBao dev server with the transit key `sops`.
fn start_bao() -> Bao {
    let bao = Bao::start();
    bao.create_key("sops");
    bao
}

/// What real sops needs to reach `bao`.
fn sops_env(bao: &Bao) -> [(&str, &str); 2] {
    [
        ("VAULT_ADDR", bao.addr.as_str()),
        ("VAULT_TOKEN", ROOT_TOKEN),
    ]
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn vault_key(uri: &str) -> VaultKey {
    VaultKey::new(uri, runtime().handle().clone())
        .unwrap()
        .with_token(Zeroizing::new(ROOT_TOKEN.to_owned()))
}

#[test]
fn vault_gitstate_writes_and_real_sops_reads() {
    let bao = start_bao();
    let key = vault_key(&bao.uri("sops"));
    let sealed = encrypt(
        PLAIN.as_bytes(),
        &[&key as &dyn MasterKey],
        &EncryptOptions::default(),
    )
    .expect("gitstate encrypts with transit");
    let doc = json(&sealed);
    let entry = &doc["sops"]["hc_vault"][0];
    assert_eq!(entry["vault_address"], bao.addr.as_str());
    assert_eq!(entry["engine_path"], "transit");
    assert_eq!(entry["key_name"], "sops");
    assert!(entry["enc"].as_str().unwrap().starts_with("vault:v1:"));
    let dir = tmpdir("vw-files");
    std::fs::write(dir.join("state.json"), &sealed).unwrap();
    let plain = sops(&dir, &sops_env(&bao), &["-d", "state.json"]);
    assert_eq!(json(&plain), json(PLAIN.as_bytes()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vault_real_sops_writes_and_gitstate_reads() {
    let bao = start_bao();
    let dir = tmpdir("vr-files");
    std::fs::write(dir.join("state.json"), PLAIN).unwrap();
    let sealed = sops(
        &dir,
        &sops_env(&bao),
        &["-e", "--hc-vault-transit", &bao.uri("sops"), "state.json"],
    );
    let keys = KeySource::new().with(Box::new(vault_key(&bao.uri("sops"))));
    let doc = Document::decrypt(&sealed, &keys).expect("gitstate opens what sops wrote");
    assert_eq!(json(&doc.to_json()), json(PLAIN.as_bytes()));

    // Without the key the error names the key's URI.
    let e = Document::decrypt(&sealed, &KeySource::new()).expect_err("no key");
    assert!(
        e.to_string()
            .contains(&format!("hc_vault:{}", bao.uri("sops"))),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn vault_errors_name_the_key_and_never_the_token() {
    let bao = start_bao();
    let secret_token = "hvs.gitstate-not-a-valid-token-0123456789";
    let wrong = VaultKey::new(&bao.uri("sops"), runtime().handle().clone())
        .unwrap()
        .with_token(Zeroizing::new(secret_token.to_owned()));
    let e = wrong.wrap(&[9u8; 32]).expect_err("a wrong token");
    let text = format!("{e} {e:?} {wrong:?}");
    assert!(text.contains(&bao.uri("sops")), "{text}");
    assert!(text.contains("403"), "{text}");
    assert!(!text.contains(secret_token), "{text}");
    assert!(!text.contains(ROOT_TOKEN), "{text}");

    // A key that does not exist: Vault's reason, the URI, no token.
    let absent = vault_key(&bao.uri("absent"));
    let sealed = encrypt(
        PLAIN.as_bytes(),
        &[&vault_key(&bao.uri("sops")) as &dyn MasterKey],
        &EncryptOptions::default(),
    )
    .unwrap();
    // an entry of "sops" is not "absent"'s: not tried
    let e =
        Document::decrypt(&sealed, &KeySource::new().with(Box::new(absent))).expect_err("not mine");
    assert!(matches!(e, SopsError::NoKey { .. }), "{e}");
    assert!(!e.to_string().contains(ROOT_TOKEN), "{e}");

    // A server that is gone is "unavailable" (the sealer answers 503), naming the key.
    let uri = bao.uri("sops");
    drop(bao);
    let e = vault_key(&uri).wrap(&[9u8; 32]).expect_err("no server");
    assert!(matches!(e, SopsError::Unavailable { .. }), "{e}");
    assert!(e.to_string().contains(&uri), "{e}");
}

/// The sealer configured with a Vault transit key (and the token from `VAULT_TOKEN`, as sops
/// reads it) seals a state real sops opens, and opens what it sealed.
#[test]
fn the_sealer_writes_for_vault_keys_from_its_configuration() {
    let bao = start_bao();
    // Every test of this binary that reads VAULT_TOKEN wants this same value.
    std::env::set_var("VAULT_TOKEN", ROOT_TOKEN);
    let config = SealerConfig {
        vault_uris: vec![bao.uri("sops")],
        ..SealerConfig::default()
    };
    let sealer = runtime()
        .block_on(SopsSealer::from_config(&config))
        .expect("valid")
        .expect("a sealer");
    let at = Place::new("default", &StatePath::parse("team/app").unwrap());
    let file = gitstate_statefile::read(PLAIN.as_bytes()).expect("a state");
    let sealed = sealer
        .seal_blocking(&at, PLAIN.as_bytes(), &file)
        .expect("sealed");
    let opened = sealer
        .open_blocking(&at, &sealed)
        .expect("opened")
        .expect("a state");
    assert_eq!(json(&opened), json(PLAIN.as_bytes()));
    let dir = tmpdir("vs-files");
    std::fs::write(dir.join("state.json"), &sealed).unwrap();
    let plain = sops(&dir, &sops_env(&bao), &["-d", "state.json"]);
    assert_eq!(json(&plain), json(PLAIN.as_bytes()));
    let _ = std::fs::remove_dir_all(&dir);

    // Enforcement needs a key that binds: Vault alone is refused at start.
    let enforced = SealerConfig {
        enforced: true,
        ..config
    };
    let e = runtime()
        .block_on(SopsSealer::from_config(&enforced))
        .expect_err("enforced with Vault only");
    assert!(e.0.contains("enforced"), "{e}");
}

#[test]
fn node_ids_of_vault_entries_are_uris() {
    let entry = gitstate_sops::KeyEntry {
        kind: "hc_vault".into(),
        fields: vec![
            ("vault_address".into(), Node::Str("https://v:8200/".into())),
            ("engine_path".into(), Node::Str("transit".into())),
            ("key_name".into(), Node::Str("k".into())),
        ],
    };
    assert_eq!(entry.id(), "https://v:8200/v1/transit/keys/k");
}
