//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

use gitstate_sops::{KeySource, Node};

/// The real-sops test vectors kept in this crate (`tests/vectors/`, see its README.md).
pub fn vectors() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors"));
    assert!(
        p.join("README.md").is_file(),
        "sops test vectors not found at {} (they are part of the repository: is the checkout complete?)",
        p.display()
    );
    p
}

pub fn read(rel: &str) -> Vec<u8> {
    let p = vectors().join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

pub fn age_keys() -> KeySource {
    let mut ks = KeySource::from_age_key_file(&vectors().join("keys/age-keys.txt")).unwrap();
    // rops key added separately (KeySource owns boxed keys)
    for k in
        gitstate_sops::AgeKey::read_identities(&vectors().join("keys/rops-age-key.txt")).unwrap()
    {
        ks.push(Box::new(k));
    }
    ks
}

fn num(n: &Node) -> Option<f64> {
    match n {
        Node::Int(i) => Some(*i as f64),
        Node::UInt(u) => Some(*u as f64),
        Node::Float(f) => Some(*f),
        _ => None,
    }
}

/// Value-for-value equality. Integers must match exactly unless one side is a float
/// (then the float comparison applies, as for sops 3.11's all-float output).
pub fn assert_same(a: &Node, b: &Node, path: &str) {
    assert_eq_nodes(a, b, path, false)
}

/// Like [`assert_same`] but every number compares as f64 (sops 3.11 reads clear numbers as float64).
pub fn assert_same_lossy(a: &Node, b: &Node, path: &str) {
    assert_eq_nodes(a, b, path, true)
}

fn assert_eq_nodes(a: &Node, b: &Node, path: &str, lossy: bool) {
    match (a, b) {
        (Node::Object(x), Node::Object(y)) => {
            let kx: Vec<&String> = x.iter().map(|(k, _)| k).collect();
            let ky: Vec<&String> = y.iter().map(|(k, _)| k).collect();
            assert_eq!(kx, ky, "keys differ at {path}");
            for ((k, v1), (_, v2)) in x.iter().zip(y) {
                assert_eq_nodes(v1, v2, &format!("{path}.{k}"), lossy);
            }
        }
        (Node::Array(x), Node::Array(y)) => {
            assert_eq!(x.len(), y.len(), "array length differs at {path}");
            for (i, (v1, v2)) in x.iter().zip(y).enumerate() {
                assert_eq_nodes(v1, v2, &format!("{path}[{i}]"), lossy);
            }
        }
        _ if lossy && num(a).is_some() => {
            assert_eq!(num(a), num(b), "number differs at {path}: {a:?} vs {b:?}")
        }
        (Node::Float(_), _) | (_, Node::Float(_)) => {
            assert_eq!(num(a), num(b), "number differs at {path}: {a:?} vs {b:?}")
        }
        _ => assert_eq!(a, b, "value differs at {path}"),
    }
}
