//! Decrypts the real-sops JSON vectors of tests/vectors/ that have an age key.

mod common;

use common::{age_keys, assert_same, read};
use gitstate_sops::{Document, KeySource, Node, SopsError};

/// Opens a vector with `Document::decrypt` and `decrypt` and checks they agree.
fn open(rel: &str) -> Document {
    let doc = Document::decrypt(&read(rel), &age_keys()).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let streamed = gitstate_sops::decrypt(&read(rel), &age_keys())
        .unwrap_or_else(|e| panic!("{rel} (decrypt()): {e}"));
    assert_eq!(
        streamed,
        doc.tree.to_json_pretty("  "),
        "{rel}: decrypt() output differs"
    );
    doc
}

#[test]
fn generated_pyref_vectors_match_plaintext() {
    for (enc, plain) in [
        (
            "generated/tfstate.pyref.enc.json",
            "generated/tfstate.plain.json",
        ),
        (
            "generated/tfstate-nobig.pyref.enc.json",
            "generated/tfstate-nobig.plain.json",
        ),
    ] {
        let doc = open(enc);
        let expected = Node::parse(&read(plain)).unwrap();
        assert_same(&doc.tree, &expected, enc);
        // integers are exact (no float detour)
        assert_eq!(doc.tree.to_json(), expected.to_json(), "{enc}");
    }
}

#[test]
fn sops_3_11_snapshot_vector_matches_plaintext_as_floats() {
    let doc = open("generated/tfstate.sops-3.11.0-snapshot.enc.json");
    let expected = Node::parse(&read("generated/tfstate.plain.json")).unwrap();
    // every number was written as type:float by that build; `big` lost precision there.
    assert_same(&doc.tree, &expected, "snapshot");
}

#[test]
fn age_pr1031_example_json_and_binary_store() {
    let doc = open("age-pr1031/example.json");
    let Node::Object(fields) = &doc.tree else {
        panic!("not an object")
    };
    assert!(!fields.is_empty());
    let s = String::from_utf8(doc.to_json()).unwrap();
    assert!(!s.contains("ENC["), "{s}");
    let txt = open("age-pr1031/example.txt");
    assert!(txt.tree.get("data").and_then(Node::as_str).is_some());
}

#[test]
fn rops_converted_vectors() {
    let ex = open("rops-0.1.7-sops_references/age_example.converted.json");
    let expected = Node::parse(
        br#"{"hello":"Welcome to SOPS! Edit this file as you please!","example_key":"example_value",
        "example_array":["example_value1","example_value2"],"example_number":1234.56789,
        "example_booleans":[true,false]}"#,
    )
    .unwrap();
    assert_same(&ex.tree, &expected, "age_example");
    for name in [
        "age_encrypted_regex",
        "age_encrypted_suffix",
        "age_mac_only_encrypted",
        "age_unencrypted_regex",
        "age_unencrypted_suffix",
    ] {
        let doc = open(&format!("rops-0.1.7-sops_references/{name}.converted.json"));
        let s = String::from_utf8(doc.to_json()).unwrap();
        assert!(!s.contains("ENC["), "{name}: {s}");
    }
    let re = open("rops-0.1.7-sops_references/age_encrypted_regex.converted.json");
    assert_eq!(re.tree.get("b").and_then(Node::as_str), Some("aaa"));
}

fn tampered(rel: &str, f: impl Fn(&mut Node)) -> Result<Document, SopsError> {
    let mut n = Node::parse(&read(rel)).unwrap();
    f(&mut n);
    let tree = Document::decrypt(&n.to_json(), &age_keys());
    let streamed = gitstate_sops::decrypt(&n.to_json(), &age_keys());
    match (&tree, &streamed) {
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "both readers refuse alike"),
        _ => panic!(
            "readers disagree: {:?} / {:?}",
            tree.is_ok(),
            streamed.is_ok()
        ),
    }
    tree
}

fn field<'a>(n: &'a mut Node, k: &str) -> &'a mut Node {
    match n {
        Node::Object(f) => &mut f.iter_mut().find(|(x, _)| x == k).unwrap().1,
        _ => panic!("not an object"),
    }
}

/// Flips one base64 character of the `data:` part.
fn flip_data(enc: &str) -> String {
    let i = enc.find("data:").unwrap() + 5;
    let mut b = enc.as_bytes().to_vec();
    b[i] = if b[i] == b'A' { b'B' } else { b'A' };
    String::from_utf8(b).unwrap()
}

#[test]
fn tampered_copies_are_rejected() {
    const V: &str = "generated/tfstate.pyref.enc.json";
    // one ciphertext byte
    let e = tampered(V, |n| {
        let l = field(n, "lineage");
        *l = Node::Str(flip_data(l.as_str().unwrap()));
    })
    .unwrap_err();
    assert!(
        matches!(e, SopsError::Decrypt { ref path } if path == "lineage:"),
        "{e}"
    );
    // the MAC itself
    let e = tampered(V, |n| {
        let m = field(field(n, "sops"), "mac");
        *m = Node::Str(flip_data(m.as_str().unwrap()));
    })
    .unwrap_err();
    assert!(matches!(e, SopsError::MacMismatch), "{e}");
    // an unencrypted value (covered by the MAC only)
    let e = tampered(V, |n| {
        *field(n, "id_unencrypted") = Node::Str("changed".into())
    })
    .unwrap_err();
    assert!(matches!(e, SopsError::MacMismatch), "{e}");
    assert!(e.to_string().contains("MAC mismatch"));
    // lastmodified is the MAC's AAD
    let e = tampered(V, |n| {
        *field(field(n, "sops"), "lastmodified") = Node::Str("2020-01-01T00:00:00Z".into())
    })
    .unwrap_err();
    assert!(matches!(e, SopsError::MacMismatch), "{e}");
    // a value moved to another path fails authentication (AAD)
    let e = tampered(V, |n| {
        let l = field(n, "lineage").clone();
        *field(n, "terraform_version") = l;
    })
    .unwrap_err();
    assert!(matches!(e, SopsError::Decrypt { .. }), "{e}");
}

#[test]
fn wrong_key_names_the_keys_and_no_secret() {
    let ks =
        KeySource::from_age_key_file(&common::vectors().join("keys/rops-age-key.txt")).unwrap();
    let e = Document::decrypt(&read("generated/tfstate.pyref.enc.json"), &ks).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, SopsError::NoKey { .. }), "{msg}");
    assert!(
        msg.contains("age1tmaae3ld5vpevmsh5yacsauzx8jetg300mpvc4ugp5zr5l6ssq9sla97ep"),
        "{msg}"
    );
    assert!(
        msg.contains("age1se5ghfycr4n8kcwc3qwf234ymvmr2lex2a99wh8gpfx97glwt9hqch4569"),
        "{msg}"
    );
    assert!(!msg.contains("AGE-SECRET-KEY"), "{msg}");
    let e = Document::decrypt(&read("generated/tfstate.pyref.enc.json"), &KeySource::new())
        .unwrap_err();
    assert!(e.to_string().contains("no keys configured"), "{e}");
}
