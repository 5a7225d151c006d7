//! Property-based fuzzing of the state body parser (bounded in CI; longer runs:
//! `PROPTEST_CASES=200000 cargo test -p gitstate-statefile --test fuzz`). No input may panic,
//! and a body read for the catalog is decided as a plain read decides it.

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000)
    ))]

    #[test]
    fn a_state_body_read_for_the_catalog_never_panics_and_is_decided_as_read(
        bytes in proptest::collection::vec(any::<u8>(), 0..512)
    ) {
        let read = gitstate_statefile::read(&bytes);
        let checked = gitstate_statefile::check(bytes::Bytes::from(bytes.clone()), true);
        prop_assert_eq!(checked.map(|c| c.file), read);
        let _ = gitstate_statefile::catalog_facts(&bytes);
    }
}
