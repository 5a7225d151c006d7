//! Round trips through the real sops 3.11 binary (installed by scripts/install-test-deps.sh).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{age_keys, assert_same, assert_same_lossy, vectors};
use gitstate_sops::{
    encrypt, encrypt_groups, AgeKey, Document, EncryptOptions, MasterKey, Node, Rules,
};

const R1: &str = "age1yt3tfqlfrwdwx0z0ynwplcr6qxcxfaqycuprpmy89nr83ltx74tqdpszlw";
const R2: &str = "age1tmaae3ld5vpevmsh5yacsauzx8jetg300mpvc4ugp5zr5l6ssq9sla97ep";

const PLAIN: &str = r#"{
  "version": 4,
  "big": 1234567890123456789,
  "neg_big": -9007199254740993,
  "max_i64": 9223372036854775807,
  "f_tenth": 0.1,
  "f_1e21": 1e21,
  "f_three": 3.0,
  "f_small": -2.5e-7,
  "f_pi": 3.141592653589793,
  "unicode": "h\u00e9llo \u2713 \u65e5\u672c \ud83d\ude00",
  "html": "<script>&amp;</script> a<b && c>d",
  "escapes": "tab\t nl\n quote\" back\\ ctrl\u0001",
  "resources": [
    {"mode": "managed", "type": "aws_db_instance", "name": "db",
     "instances": [{"attributes": {"port": 5432, "ratio": 0.25, "tags": {}, "list": [],
       "nothing": null, "nested": [[1, "a"], [true, null]], "pw": "s3cr\u00e9t<&>"},
       "sensitive_attributes": [], "private": "eyJ4IjoxfQ=="}]},
    [1, [2, "x"], {"deep": {"er": false}}]
  ],
  "empty": "",
  "nul": null,
  "t": true,
  "f": false,
  "obj": {},
  "k:colon": "v",
  "id_unencrypted": "plain"
}"#;

fn sops_bin() -> PathBuf {
    let tools = std::env::var("GITSTATE_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/gitstate-tools")
        });
    let mut candidates = Vec::new();
    if let Ok(p) = std::env::var("GITSTATE_SOPS") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(tools.join("sops-3.11.0/sops"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("sops")));
    }
    candidates.into_iter().find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("the sops binary (3.11) was not found ($GITSTATE_SOPS, $GITSTATE_TOOLS/sops-3.11.0/sops, PATH): run scripts/install-test-deps.sh")
    })
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gitstate-sops-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sops(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(sops_bin())
        .current_dir(dir)
        .env("SOPS_AGE_KEY_FILE", vectors().join("keys/age-keys.txt"))
        .env_remove("SOPS_AGE_KEY")
        .env_remove("SOPS_AGE_RECIPIENTS")
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

fn sops_decrypt(name: &str, enc: &[u8]) -> Node {
    let dir = tmpdir(name);
    std::fs::write(dir.join("state.json"), enc).unwrap();
    let out = sops(
        &dir,
        &[
            "-d",
            "--input-type",
            "json",
            "--output-type",
            "json",
            "state.json",
        ],
    );
    let _ = std::fs::remove_dir_all(&dir);
    Node::parse(&out).unwrap_or_else(|e| panic!("sops output is not JSON: {e}"))
}

#[test]
fn real_sops_decrypts_what_we_encrypt() {
    let plain = Node::parse(PLAIN.as_bytes()).unwrap();
    let k1 = AgeKey::recipient(R1).unwrap();
    let k2 = AgeKey::recipient(R2).unwrap();
    let structure = Rules {
        encrypted_regex: Some(
            "^(attributes|sensitive_attributes|private|value|pw|big|unicode)$".into(),
        ),
        ..Rules::default()
    };
    let cases: Vec<(&str, EncryptOptions, Vec<&dyn MasterKey>)> = vec![
        ("all", EncryptOptions::default(), vec![&k2]),
        ("two-recipients", EncryptOptions::default(), vec![&k1, &k2]),
        (
            "encrypted-regex",
            EncryptOptions {
                rules: structure.clone(),
                ..EncryptOptions::default()
            },
            vec![&k2],
        ),
        (
            "mac-only-encrypted",
            EncryptOptions {
                rules: Rules {
                    mac_only_encrypted: true,
                    ..structure
                },
                ..EncryptOptions::default()
            },
            vec![&k1],
        ),
    ];
    for (name, opts, keys) in cases {
        let enc = encrypt(PLAIN.as_bytes(), &keys, &opts).unwrap();
        let text = String::from_utf8(enc.clone()).unwrap();
        // The secret as JSON may spell it (raw or escaped é): forms base64 cannot produce, so
        // random ciphertext never matches by chance ("s3cr" alone did, once in a few thousand runs).
        for spelling in ["s3cr\u{e9}t", "s3cr\\u00e9t", "s3cr\\u00E9t"] {
            assert!(
                !text.contains(spelling),
                "{name}: plaintext secret in output"
            );
        }
        let via_sops = sops_decrypt(name, &enc);
        if name.contains("regex") || name.contains("mac-only") {
            // clear integers beyond 2^53 come out of sops 3.11 through float64
            assert_same_lossy(&via_sops, &plain, name);
            assert_eq!(
                via_sops.get("big"),
                plain.get("big"),
                "{name}: encrypted big int exact"
            );
        } else {
            assert_same(&via_sops, &plain, name);
        }
        // and our own reader agrees, integers exactly
        let ours = Document::decrypt(&enc, &age_keys()).unwrap();
        assert_eq!(ours.tree.to_json(), plain.to_json(), "{name}");
    }
}

#[test]
fn real_sops_decrypts_our_shamir_key_groups() {
    let plain = Node::parse(PLAIN.as_bytes()).unwrap();
    let k1 = AgeKey::recipient(R1).unwrap();
    let k2 = AgeKey::recipient(R2).unwrap();
    let k3 = AgeKey::recipient("age1se5ghfycr4n8kcwc3qwf234ymvmr2lex2a99wh8gpfx97glwt9hqch4569")
        .unwrap();
    let opts = EncryptOptions {
        shamir_threshold: Some(2),
        ..EncryptOptions::default()
    };
    let g1: [&dyn MasterKey; 1] = [&k1];
    let g2: [&dyn MasterKey; 1] = [&k2];
    let g3: [&dyn MasterKey; 1] = [&k3];
    let enc = encrypt_groups(PLAIN.as_bytes(), &[&g1, &g2, &g3], &opts).unwrap();
    // the key file has k1 and k2 only: 2 of 3 shares
    assert_same(&sops_decrypt("shamir", &enc), &plain, "shamir");
    let ours = Document::decrypt(&enc, &age_keys()).unwrap();
    assert_eq!(ours.tree.to_json(), plain.to_json());
}

#[test]
fn we_decrypt_what_real_sops_encrypts() {
    let plain = Node::parse(PLAIN.as_bytes()).unwrap();
    let dir = tmpdir("sops-encrypts");
    std::fs::write(dir.join("plain.json"), PLAIN).unwrap();
    let both = format!("{R1},{R2}");
    let runs: Vec<(&str, Vec<&str>)> = vec![
        ("age", vec!["--age", R2]),
        ("two-ages", vec!["--age", &both]),
        (
            "encrypted-regex",
            vec!["--age", R1, "--encrypted-regex", "^(attributes|pw|big)$"],
        ),
        (
            "mac-only",
            vec![
                "--age",
                R1,
                "--encrypted-regex",
                "^attributes$",
                "--mac-only-encrypted",
            ],
        ),
    ];
    for (name, extra) in runs {
        let mut args = vec!["-e", "--input-type", "json", "--output-type", "json"];
        args.extend(extra);
        args.push("plain.json");
        let enc = sops(&dir, &args);
        let doc = Document::decrypt(&enc, &age_keys()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let streamed = gitstate_sops::decrypt(&enc, &age_keys()).unwrap();
        assert_eq!(
            streamed,
            doc.tree.to_json_pretty("  "),
            "{name}: both readers agree"
        );
        // sops 3.11.0 reads every number as float64 (big loses precision there): compare numerically
        assert_same_lossy(&doc.tree, &plain, name);
    }
    // Shamir key groups written by real sops (config file with 3 groups, threshold 2)
    let config = format!(
        "creation_rules:\n  - path_regex: .*\n    shamir_threshold: 2\n    key_groups:\n      - age: ['{R1}']\n      - age: ['{R2}']\n      - age: ['age1se5ghfycr4n8kcwc3qwf234ymvmr2lex2a99wh8gpfx97glwt9hqch4569']\n"
    );
    std::fs::write(dir.join("sops.yaml"), config).unwrap();
    let enc = sops(
        &dir,
        &[
            "--config",
            "sops.yaml",
            "-e",
            "--input-type",
            "json",
            "--output-type",
            "json",
            "plain.json",
        ],
    );
    assert!(String::from_utf8_lossy(&enc).contains("key_groups"));
    let doc = Document::decrypt(&enc, &age_keys()).unwrap();
    assert_same_lossy(&doc.tree, &plain, "shamir");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reused_data_key_and_wrapped_entries_open_with_real_sops() {
    let plain = Node::parse(PLAIN.as_bytes()).unwrap();
    let k1 = AgeKey::recipient(R1).unwrap();
    let k2 = AgeKey::recipient(R2).unwrap();
    let g1: [&dyn MasterKey; 1] = [&k1];
    let g2: [&dyn MasterKey; 1] = [&k2];
    let first_single = common::read("generated/tfstate.pyref.enc.json");
    let first_shamir = encrypt_groups(
        br#"{"a": 1}"#,
        &[&g1, &g2],
        &EncryptOptions {
            shamir_threshold: Some(2),
            ..EncryptOptions::default()
        },
    )
    .unwrap();
    for (name, first) in [("single", first_single), ("shamir", first_shamir)] {
        let doc = Document::decrypt(&first, &age_keys()).unwrap();
        let opts = EncryptOptions {
            reuse: Some(doc.reuse().unwrap()),
            ..EncryptOptions::default()
        };
        let second = encrypt_groups(PLAIN.as_bytes(), &[], &opts).unwrap();
        let (a, b) = (Node::parse(&first).unwrap(), Node::parse(&second).unwrap());
        for list in ["age", "key_groups"] {
            assert_eq!(
                a.get("sops").unwrap().get(list),
                b.get("sops").unwrap().get(list),
                "{name}: wrapped entries reused verbatim"
            );
        }
        assert_same(
            &sops_decrypt(&format!("reuse-{name}"), &second),
            &plain,
            name,
        );
        let again = Document::decrypt(&second, &age_keys()).unwrap();
        assert_eq!(again.data_key, doc.data_key);
    }
}
