//! Property-based fuzzing of the sops codec (bounded in CI; longer runs:
//! `PROPTEST_CASES=20000 cargo test --release -p gitstate-sops --test fuzz`): arbitrary JSON
//! objects survive encrypt → decrypt value for value in both modes, and arbitrary or mutated
//! input never panics the decoder.

use gitstate_sops::{encrypt, AgeKey, Document, EncryptOptions, KeySource, MasterKey, Rules};
use proptest::prelude::*;
use serde_json::Value;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// JSON values with the leaves a state holds: strings (any unicode), integers across the i64
/// range, finite floats, booleans, null; nested objects and arrays.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        ".{0,24}".prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_<>&]{0,10}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// JSON equality where numbers compare by value: a float that is integral (`0.0`) is written the
/// way Go and sops write it (`0`) and reads back as an integer.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// What sops protects: every leaf it encrypts (all but `null` and `""`), with its path of object
/// keys (array indices are not part of sops' AAD), in document order. sops leaves `null` and `""`
/// in the clear and outside the MAC, so the key of such a leaf can be renamed in a stored file
/// without detection, in real sops as here; every other change must be refused.
fn protected(v: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, path: &str, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, &format!("{path}:{k}"), out)
                }
            }
            Value::Array(a) => {
                for x in a {
                    walk(x, path, out)
                }
            }
            Value::Null => {}
            Value::String(s) if s.is_empty() => {}
            other => out.push((path.to_owned(), other.clone())),
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out
}

/// [`same`] over the protected leaves of two documents.
fn same_protected(a: &Value, b: &Value) -> bool {
    let (a, b) = (protected(a), protected(b));
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(x, y)| x.0 == y.0 && same(&x.1, &y.1))
}

fn object() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,10}", json_value(), 0..6)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn values_survive_a_round_trip(doc in object(), structure in any::<bool>()) {
        let key = AgeKey::generate();
        let mut options = EncryptOptions::default();
        if structure {
            options.rules = Rules {
                encrypted_regex: Some("^(value|attributes|private)$".into()),
                ..Rules::default()
            };
        }
        let plain = serde_json::to_vec(&doc).unwrap();
        let sealed = encrypt(&plain, &[&key as &dyn MasterKey], &options).unwrap();
        let keys = KeySource::new().with(Box::new(key));
        let opened = Document::decrypt(&sealed, &keys).unwrap();
        let back: Value = serde_json::from_slice(&opened.to_json()).unwrap();
        prop_assert!(same(&back, &doc), "{back} != {doc}");
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let keys = KeySource::new().with(Box::new(AgeKey::generate()));
        let _ = Document::decrypt(&bytes, &keys);
        let _ = gitstate_sops::key_groups(&bytes);
    }

    #[test]
    fn mutated_documents_are_refused_not_panicked(doc in object(), at in any::<usize>(), byte in any::<u8>()) {
        let key = AgeKey::generate();
        let plain = serde_json::to_vec(&doc).unwrap();
        let mut sealed = encrypt(&plain, &[&key as &dyn MasterKey], &EncryptOptions::default()).unwrap();
        let i = at % sealed.len();
        let changed = sealed[i] != byte;
        sealed[i] = byte;
        let keys = KeySource::new().with(Box::new(key));
        if let Ok(opened) = Document::decrypt(&sealed, &keys) {
            // a change that still opens must not have changed any protected value
            let back: Value = serde_json::from_slice(&opened.to_json()).unwrap();
            prop_assert!(!changed || same_protected(&back, &doc), "a mutation changed a value and still opened: {back}");
        }
    }
}
