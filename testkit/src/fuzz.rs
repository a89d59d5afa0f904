//! What the property tests share.

use proptest::prelude::ProptestConfig;

/// `cases` cases, unless `PROPTEST_CASES` says otherwise (then proptest's default,
/// which reads it).
pub fn config(cases: u32) -> ProptestConfig {
    let default = ProptestConfig::default();
    match std::env::var_os("PROPTEST_CASES") {
        Some(_) => default,
        None => ProptestConfig { cases, ..default },
    }
}

/// As [`config`], and a failing case is not written to a file for the next runs.
pub fn config_unpersisted(cases: u32) -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..config(cases)
    }
}
