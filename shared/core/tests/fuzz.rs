//! Property-based fuzzing of the request parsers (bounded in CI; longer runs:
//! `PROPTEST_CASES=200000 cargo test -p gitstate-core --test fuzz`). No input may panic, and
//! every accepted state path obeys DESIGN §3. The state body's parser has its own
//! (`gitstate-statefile`'s `tests/fuzz.rs`).

use gitstate_core::{BranchName, LockInfo, StatePath};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
    ))]

    #[test]
    fn lockinfo_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = LockInfo::parse(&bytes);
        let _ = LockInfo::stored(&bytes);
    }

    #[test]
    fn lockinfo_parse_of_json_like_input_never_panics(
        id in proptest::option::of(".{0,20}"),
        who in proptest::option::of(".{0,20}"),
        extra in "[a-zA-Z]{0,8}",
    ) {
        let mut object = serde_json::Map::new();
        if let Some(id) = id { object.insert("ID".into(), id.into()); }
        if let Some(who) = who { object.insert("Who".into(), who.into()); }
        if !extra.is_empty() { object.insert(extra, serde_json::Value::Null); }
        let body = serde_json::Value::Object(object).to_string();
        if let Ok(info) = LockInfo::parse(body.as_bytes()) {
            prop_assert!(!info.id.is_empty(), "accepted a LockInfo without ID: {body}");
        }
    }

    #[test]
    fn accepted_state_paths_obey_the_rules(raw in "[a-zA-Z0-9._/@{}\\\\ -]{0,40}|.{0,40}") {
        if let Ok(path) = StatePath::parse(&raw) {
            let s = path.as_str();
            prop_assert!(!s.is_empty() && s.len() <= 512);
            prop_assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._/-".contains(&b)), "{s:?}");
            prop_assert!(!s.contains(".."), "{s:?}");
            for segment in s.split('/') {
                prop_assert!(!segment.is_empty() && !segment.starts_with('.'), "{s:?}");
                prop_assert!(!segment.ends_with(".lock"), "{s:?}");
            }
        }
    }

    #[test]
    fn accepted_branch_names_obey_check_ref_format(raw in "[a-z./@{}:~^?*\\[ -]{0,24}|.{0,24}") {
        if let Ok(name) = BranchName::parse(&raw) {
            let s = name.as_str();
            prop_assert!(!s.is_empty() && s.len() <= 255);
            prop_assert!(!s.chars().any(|c| c.is_ascii_control() || " ~^:?*[\\".contains(c)), "{s:?}");
            prop_assert!(!s.starts_with('-') && !s.ends_with('.') && s != "@", "{s:?}");
            prop_assert!(!s.contains("..") && !s.contains("@{"), "{s:?}");
            for component in s.split('/') {
                prop_assert!(!component.is_empty() && !component.starts_with('.'), "{s:?}");
                prop_assert!(!component.ends_with(".lock"), "{s:?}");
            }
        }
    }
}
