//! Codec details: number formatting, escaping, MAC flavours, refusals.

mod common;

use common::age_keys;
use gitstate_sops::{
    encrypt, go_format_float, now_rfc3339, AgeKey, Document, EncryptOptions, KeySource, MasterKey,
    Node, Rules, SopsError,
};

const R2: &str = "age1tmaae3ld5vpevmsh5yacsauzx8jetg300mpvc4ugp5zr5l6ssq9sla97ep";

#[test]
fn floats_are_formatted_like_go_format_float_f_minus_1() {
    assert_eq!(go_format_float(0.1), "0.1");
    assert_eq!(go_format_float(3.0), "3");
    assert_eq!(go_format_float(1e21), "1000000000000000000000");
    assert_eq!(go_format_float(-2.5e-7), "-0.00000025");
    assert_eq!(go_format_float(1234.56789), "1234.56789");
}

#[test]
fn output_keeps_unicode_html_characters_order_and_big_integers() {
    let plain = "{\"z\":\"h\u{e9}llo \u{1F600} <&>\",\"a\":18446744073709551615,\"m\":-9223372036854775808,\"f\":3.0,\"e\":1e21}";
    let n = Node::parse(plain.as_bytes()).unwrap();
    let out = String::from_utf8(n.to_json()).unwrap();
    assert_eq!(out, "{\"z\":\"h\u{e9}llo \u{1F600} <&>\",\"a\":18446744073709551615,\"m\":-9223372036854775808,\"f\":3,\"e\":1e21}");
    let k = AgeKey::recipient(R2).unwrap();
    let enc = encrypt(
        plain.as_bytes(),
        &[&k as &dyn MasterKey],
        &EncryptOptions::default(),
    )
    .unwrap();
    let doc = Document::decrypt(&enc, &age_keys()).unwrap();
    assert_eq!(
        String::from_utf8(doc.to_json()).unwrap(),
        out.replace("18446744073709551615", "18446744073709552000")
    );
}

#[test]
fn metadata_is_well_formed() {
    let k = AgeKey::recipient(R2).unwrap();
    let enc = encrypt(
        br#"{"a":"b"}"#,
        &[&k as &dyn MasterKey],
        &EncryptOptions::default(),
    )
    .unwrap();
    let n = Node::parse(&enc).unwrap();
    let sops = n.get("sops").unwrap();
    let lm = sops.get("lastmodified").and_then(Node::as_str).unwrap();
    assert_eq!(lm.len(), 20, "{lm}");
    assert!(lm.ends_with('Z') && lm.as_bytes()[10] == b'T', "{lm}");
    assert_eq!(now_rfc3339().len(), 20);
    assert_eq!(sops.get("version").and_then(Node::as_str), Some("3.11.0"));
    let age = match sops.get("age") {
        Some(Node::Array(a)) => a,
        other => panic!("{other:?}"),
    };
    assert!(age[0]
        .get("enc")
        .and_then(Node::as_str)
        .unwrap()
        .starts_with("-----BEGIN AGE ENCRYPTED FILE-----\n"));
    assert_eq!(age[0].get("recipient").and_then(Node::as_str), Some(R2));
}

#[test]
fn both_mac_flavours_for_clear_big_integers_are_read() {
    let k = AgeKey::recipient(R2).unwrap();
    let plain = br#"{"serial": 9007199254740993, "secret": {"v": 1}}"#;
    for float in [true, false] {
        let opts = EncryptOptions {
            rules: Rules {
                encrypted_regex: Some("^secret$".into()),
                ..Rules::default()
            },
            float_mac_for_big_clear_ints: float,
            ..EncryptOptions::default()
        };
        let enc = encrypt(plain, &[&k as &dyn MasterKey], &opts).unwrap();
        let doc = Document::decrypt(&enc, &age_keys()).unwrap();
        assert_eq!(doc.tree.get("serial"), Some(&Node::Int(9007199254740993)));
    }
}

#[test]
fn refusals() {
    let k = AgeKey::recipient(R2).unwrap();
    let keys = [&k as &dyn MasterKey];
    let o = EncryptOptions::default();
    assert!(matches!(
        encrypt(br#"{"sops":{}}"#, &keys, &o),
        Err(SopsError::AlreadyEncrypted)
    ));
    assert!(matches!(
        encrypt(b"[1]", &keys, &o),
        Err(SopsError::Options(_))
    ));
    assert!(matches!(encrypt(b"{", &keys, &o), Err(SopsError::Json(_))));
    assert!(matches!(
        encrypt(b"{}", &[], &o),
        Err(SopsError::Options(_))
    ));
    assert!(matches!(
        Document::decrypt(b"{\"a\":1}", &age_keys()),
        Err(SopsError::NotSops(_))
    ));
    let bad = EncryptOptions {
        rules: Rules {
            encrypted_regex: Some("(".into()),
            ..Rules::default()
        },
        ..EncryptOptions::default()
    };
    assert!(matches!(
        encrypt(b"{}", &keys, &bad),
        Err(SopsError::Options(_))
    ));
    assert!(AgeKey::identity("AGE-SECRET-KEY-1NOPE")
        .unwrap_err()
        .to_string()
        .find("NOPE")
        .is_none());
}

#[test]
fn streaming_and_tree_encryption_agree() {
    let k = AgeKey::recipient(R2).unwrap();
    let keys = [&k as &dyn MasterKey];
    let o = EncryptOptions::default();
    for plain in [
        &b"{}"[..],
        br#"{"a":[],"b":{},"c":[[],{}],"d":[1,{"e":null}],"sops_not_top":{"sops":1}}"#,
    ] {
        let streamed = encrypt(plain, &keys, &o).unwrap();
        let tree = gitstate_sops::encrypt_tree(Node::parse(plain).unwrap(), &[&keys], &o).unwrap();
        let (a, b) = (Node::parse(&streamed).unwrap(), Node::parse(&tree).unwrap());
        // same shape: same keys, same number of lines
        assert_eq!(
            String::from_utf8_lossy(&streamed).lines().count(),
            String::from_utf8_lossy(&tree).lines().count()
        );
        for n in [a, b] {
            let doc = Document::decrypt(&n.to_json(), &age_keys()).unwrap();
            assert_eq!(doc.tree, Node::parse(plain).unwrap());
        }
    }
    assert!(matches!(
        encrypt(b"1", &keys, &o),
        Err(SopsError::Options(_))
    ));
    assert!(matches!(
        encrypt(b"\"x\"", &keys, &o),
        Err(SopsError::Options(_))
    ));
    assert!(matches!(
        encrypt(b"{} x", &keys, &o),
        Err(SopsError::Json(_))
    ));
}

#[test]
fn recipients_list_parses_like_sops_age_recipients() {
    let list = format!(" {R2},\nage1yt3tfqlfrwdwx0z0ynwplcr6qxcxfaqycuprpmy89nr83ltx74tqdpszlw ");
    let keys = AgeKey::parse_recipients(&list).unwrap();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0].id(), R2);
    let e = AgeKey::parse_recipients("age1nope").unwrap_err();
    assert!(e.to_string().contains("age1nope"), "{e}");
}

/// A master key whose service is down.
struct DownKms;

impl MasterKey for DownKms {
    fn kind(&self) -> &'static str {
        "kms"
    }
    fn id(&self) -> String {
        "arn:aws:kms:eu-west-1:111122223333:key/down".into()
    }
    fn wrap(&self, _: &[u8]) -> Result<gitstate_sops::KeyEntry, SopsError> {
        Err(self.down())
    }
    fn unwrap(
        &self,
        _: &gitstate_sops::KeyEntry,
    ) -> Result<Option<gitstate_sops::Zeroizing<Vec<u8>>>, SopsError> {
        Err(self.down())
    }
}

impl DownKms {
    fn down(&self) -> SopsError {
        SopsError::Unavailable {
            kind: "kms".into(),
            id: self.id(),
            reason: "connection refused".into(),
        }
    }
}

#[test]
fn an_unreachable_key_service_is_reported_as_unavailable() {
    // a file with a kms entry (no age key configured that opens it)
    let k = AgeKey::generate();
    let mut n = Node::parse(
        &encrypt(
            br#"{"a":"b"}"#,
            &[&k as &dyn MasterKey],
            &EncryptOptions::default(),
        )
        .unwrap(),
    )
    .unwrap();
    if let Node::Object(f) = &mut n {
        if let Some((_, Node::Object(meta))) = f.iter_mut().find(|(k, _)| k == "sops") {
            meta.insert(0, ("kms".into(), Node::parse(br#"[{"arn":"arn:aws:kms:eu-west-1:111122223333:key/down","enc":"AAAA","created_at":"2026-01-01T00:00:00Z","aws_profile":""}]"#).unwrap()));
        }
    }
    let keys = KeySource::new().with(Box::new(DownKms));
    let e = Document::decrypt(&n.to_json(), &keys).unwrap_err();
    assert!(matches!(e, SopsError::Unavailable { .. }), "{e}");
    // with a working key as well, the file opens
    let keys = KeySource::new().with(Box::new(DownKms)).with(Box::new(k));
    assert!(Document::decrypt(&n.to_json(), &keys).is_ok());
}

/// Found by `tests/fuzz.rs`: floats whose correctly rounded value needs the last digit (and
/// integers beyond u64, read as floats) came back one ulp off, and the MAC then failed. JSON is
/// now parsed with correct rounding (serde_json's `float_roundtrip`).
#[test]
fn floats_needing_every_digit_survive_exactly() {
    let key = gitstate_sops::AgeKey::generate();
    let plain = br#"{"a":-3.831187280663183e+183,"b":123456789012345680000,"c":[[2.2250738585072014e-308]]}"#;
    let sealed = gitstate_sops::encrypt(
        plain,
        &[&key as &dyn gitstate_sops::MasterKey],
        &EncryptOptions::default(),
    )
    .unwrap();
    let keys = gitstate_sops::KeySource::new().with(Box::new(key));
    let opened = Document::decrypt(&sealed, &keys).unwrap();
    let back: serde_json::Value = serde_json::from_slice(&opened.to_json()).unwrap();
    assert_eq!(back["a"].as_f64(), Some(-3.831187280663183e183));
    assert_eq!(back["b"].as_f64(), Some(123456789012345680000.0));
    assert_eq!(back["c"][0][0].as_f64(), Some(2.2250738585072014e-308));
}

/// `{"a": [[[…]]]}` with `depth` levels of objects and arrays in all.
fn nested(depth: usize) -> String {
    format!(
        "{{\"a\":{}1{}}}",
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

/// Deep JSON is refused with a sentence that says so, on every way in: parsing, streaming
/// encryption, a stored document, and a tree built in memory (100,000 levels, which a
/// recursive walk would not survive on a 2 MiB test thread).
#[test]
fn deep_trees_are_refused_with_a_clear_error_not_a_stack_overflow() {
    let limit = gitstate_sops::MAX_DEPTH;
    let k = AgeKey::recipient(R2).unwrap();
    let keys = [&k as &dyn MasterKey];
    let deep = nested(10_000);
    let is_too_deep = |e: &SopsError| {
        matches!(e, SopsError::TooDeep { limit: l } if *l == limit)
            && e.to_string()
                .contains(&format!("more than {limit} levels deep"))
    };
    let e = Node::parse(deep.as_bytes()).unwrap_err();
    assert!(is_too_deep(&e), "parse: {e}");
    let e = encrypt(deep.as_bytes(), &keys, &EncryptOptions::default()).unwrap_err();
    assert!(is_too_deep(&e), "encrypt: {e}");
    let e = encrypt(
        nested(limit + 1).as_bytes(),
        &keys,
        &EncryptOptions::default(),
    )
    .unwrap_err();
    assert!(is_too_deep(&e), "one level too deep: {e}");
    // a planted document: deep values next to valid-looking metadata
    let planted = format!(
        "{{\"a\":{}1{},\"sops\":{{\"lastmodified\":\"2024-01-01T00:00:00Z\",\"mac\":\"x\",\"version\":\"3.11.0\"}}}}",
        "[".repeat(9_999),
        "]".repeat(9_999)
    );
    let e = Document::decrypt(planted.as_bytes(), &age_keys()).unwrap_err();
    assert!(is_too_deep(&e), "decrypt: {e}");
    // finding the metadata skips the rest without recursion (serde_json's ignore is a loop)
    assert!(gitstate_sops::sops_member(planted.as_bytes())
        .unwrap()
        .is_some());

    // exactly at the limit: sealed and opened again
    let at_limit = nested(limit);
    let identity = AgeKey::generate();
    let sealed = encrypt(
        at_limit.as_bytes(),
        &[&identity as &dyn MasterKey],
        &EncryptOptions::default(),
    )
    .unwrap();
    let doc = Document::decrypt(&sealed, &KeySource::new().with(Box::new(identity))).unwrap();
    assert_eq!(doc.tree.to_json(), at_limit.as_bytes());

    // a tree built in memory, far deeper than anything parsed: written, converted, measured
    // and refused without recursion
    let mut tree = Node::Int(1);
    for _ in 0..100_000 {
        tree = Node::Array(vec![tree]);
    }
    assert_eq!(tree.depth(), 100_000);
    assert_eq!(tree.to_json().len(), 200_001);
    let value = tree.to_value();
    let mut node = &value;
    let mut levels = 0;
    while let Some(inner) = node.as_array().and_then(|a| a.first()) {
        node = inner;
        levels += 1;
    }
    assert_eq!(levels, 100_000);
    // serde_json's own Value drops recursively; take it apart level by level
    let mut value = value;
    while let serde_json::Value::Array(mut items) = value {
        value = items.pop().unwrap_or(serde_json::Value::Null);
    }
    let tree = Node::Object(vec![("a".into(), tree)]);
    let e = gitstate_sops::encrypt_tree(tree, &[&keys], &EncryptOptions::default()).unwrap_err();
    assert!(is_too_deep(&e), "encrypt_tree: {e}");
}

/// The key memory's fingerprint covers every field of an entry: a KMS entry whose encryption
/// context was edited (the blob copied as is) must not find the copied blob's key in memory;
/// only KMS, which checks the context, may unwrap it.
#[test]
fn key_fingerprints_cover_the_encryption_context() {
    use gitstate_sops::{key_fingerprint, KeyEntry};
    let entry = |path: &str| KeyEntry {
        kind: "kms".into(),
        fields: vec![
            (
                "arn".into(),
                Node::Str("arn:aws:kms:eu-west-1:1:key/k".into()),
            ),
            (
                "context".into(),
                Node::Object(vec![("gitstate_path".into(), Node::Str(path.into()))]),
            ),
            ("enc".into(), Node::Str("AQIDBA==".into())),
        ],
    };
    let a = key_fingerprint(&[vec![entry("a.tfstate")]], 1);
    assert_eq!(a, key_fingerprint(&[vec![entry("a.tfstate")]], 1));
    assert_ne!(a, key_fingerprint(&[vec![entry("c.tfstate")]], 1));
}
