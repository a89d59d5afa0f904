//! Registering parameters, building configurations from every source, and the errors
//! that name what is wrong.

use rbtl_config::{Config, Error, Kind, Registry, Source, Value};

fn registry() -> Registry {
    let mut r = Registry::new();
    r.register("btl", Value::List(vec![]), "transports to use")
        .unwrap()
        .register("btl_self_eager_limit", Value::Size(1024), "eager limit")
        .unwrap()
        .register("rcache_leave_pinned", Value::Bool(true), "keep pinned")
        .unwrap()
        .register("btl_self_latency", Value::Int(0), "latency")
        .unwrap()
        .register("name", Value::Str("x".into()), "a name")
        .unwrap();
    r
}

#[test]
fn precedence_default_file_env_program() {
    let r = registry();
    let dir = std::env::temp_dir().join(format!("rbtl-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("p.toml");
    std::fs::write(
        &file,
        "btl = [\"self\", \"sm\"]\nname = \"f\"\nbtl_self_eager_limit = \"4k\"\nbtl_self_latency = 3\n[rcache]\nleave_pinned = false\n",
    )
    .unwrap();
    let env = vec![
        ("RBTL_BTL_SELF_EAGER_LIMIT".to_string(), "8k".to_string()),
        ("RBTL_NAME".to_string(), "e".to_string()),
        ("HOME".to_string(), "/root".to_string()),
    ];
    let c = r
        .builder()
        .file(&file)
        .env_from(env)
        .set("name", "p")
        .build()
        .unwrap();
    assert_eq!(c.list("btl").unwrap(), ["self", "sm"]);
    assert_eq!(c.size("btl_self_eager_limit").unwrap(), 8192);
    assert_eq!(c.int("btl_self_latency").unwrap(), 3);
    assert!(!c.bool("rcache_leave_pinned").unwrap());
    assert_eq!(c.str("name").unwrap(), "p");
    let rows = c.dump();
    let src = |n: &str| rows.iter().find(|r| r.name == n).unwrap().source.clone();
    assert_eq!(src("btl"), Source::File(file.clone()));
    assert_eq!(
        src("btl_self_eager_limit"),
        Source::Env("RBTL_BTL_SELF_EAGER_LIMIT".into())
    );
    assert_eq!(src("name"), Source::Program);
    let text = c.to_string();
    assert!(
        text.contains("btl_self_eager_limit = \"8192\" (environment RBTL_BTL_SELF_EAGER_LIMIT)")
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn defaults_when_nothing_set() {
    let c = Config::defaults(&registry());
    assert_eq!(c.size("btl_self_eager_limit").unwrap(), 1024);
    assert_eq!(c.value("btl").unwrap().1, &Source::Default);
}

#[test]
fn unknown_names_list_the_valid_ones() {
    let r = registry();
    for build in [
        r.builder().set("btl_self_eagr_limit", "1"),
        r.builder()
            .env_from([("RBTL_BTL_TYPO".to_string(), "1".to_string())]),
    ] {
        let err = build.build().unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::UnknownParameter { .. }), "{msg}");
        assert!(msg.contains("btl_self_eager_limit"), "{msg}");
        assert!(msg.contains("rcache_leave_pinned"), "{msg}");
    }
}

#[test]
fn unknown_names_in_files_are_errors_too() {
    let r = registry();
    let path = std::env::temp_dir().join(format!("rbtl-config-bad-{}.toml", std::process::id()));
    std::fs::write(&path, "[btl.selff]\neager_limit = 1\n").unwrap();
    let err = r.builder().file(&path).build().unwrap_err();
    assert!(err.to_string().contains("btl_selff_eager_limit"), "{err}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn bad_values_and_kinds() {
    let r = registry();
    for (name, value, kind) in [
        ("btl_self_eager_limit", "lots", Kind::Size),
        ("rcache_leave_pinned", "maybe", Kind::Bool),
    ] {
        let err = r.builder().set(name, value).build().unwrap_err();
        assert!(
            matches!(err, Error::BadValue { kind: k, .. } if k == kind),
            "{name} = {value}: {err}"
        );
    }
    let c = Config::defaults(&r);
    assert!(matches!(c.bool("btl"), Err(Error::WrongKind { .. })));
    assert!(matches!(c.size("nope"), Err(Error::NotRegistered(_))));
    let missing = r
        .builder()
        .file("/nonexistent/rbtl.toml")
        .build()
        .unwrap_err();
    assert!(matches!(missing, Error::File { .. }));
}

#[test]
fn conflicting_registration_is_refused() {
    let mut r = registry();
    assert!(r
        .register("btl_self_latency", Value::Int(0), "latency")
        .is_ok());
    assert!(matches!(
        r.register("btl_self_latency", Value::Int(5), "latency"),
        Err(Error::Conflict(_))
    ));
}

// ---------------------------------------------------------------------------
// The TOML reader against arbitrary and almost-right files: every outcome is a
// configuration or a typed error (`File`, `UnknownParameter`, `BadValue`), never a
// panic, a hang or an unbounded message. PROPTEST_CASES (default 512 here) sets
// the number of cases: e.g. `PROPTEST_CASES=100000 cargo test -p rbtl-config
// --test parameters toml` for a long run.

mod toml_fuzz {
    use super::registry;
    use proptest::prelude::*;
    use rbtl_config::{Error, MAX_FILE_LEN};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn config() -> ProptestConfig {
        rbtl_testkit::fuzz::config_unpersisted(512)
    }

    /// A file of its own for each case (cases may run on several threads).
    fn write(bytes: &[u8]) -> PathBuf {
        static N: AtomicUsize = AtomicUsize::new(0);
        // Beside the others in the temporary folder: removing it leaves nothing.
        let path = std::env::temp_dir().join(format!(
            "rbtl-config-fuzz-{}-{}.toml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// Reads `bytes` as the configuration file; checks that the outcome is typed
    /// and that no message runs away with the input.
    fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
        let path = write(bytes);
        let result = registry().builder().file(&path).build();
        let _ = std::fs::remove_file(&path);
        match result {
            Ok(config) => {
                // Every value read back has its registered kind.
                for row in config.dump() {
                    let registered = config.registry().get(&row.name).unwrap();
                    prop_assert_eq!(row.value.kind(), registered.default.kind());
                }
            }
            Err(
                e @ (Error::File { .. } | Error::UnknownParameter { .. } | Error::BadValue { .. }),
            ) => {
                let text = e.to_string();
                prop_assert!(
                    text.lines().all(|l| l.chars().count() < 1200),
                    "a line of {} characters in {:?}",
                    text.len(),
                    text.chars().take(300).collect::<String>()
                );
            }
            Err(other) => prop_assert!(false, "untyped outcome {other:?}"),
        }
        Ok(())
    }

    /// Keys: registered names, unknown ones, dotted and quoted ones, odd text.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("btl".to_string()),
            Just("btl_self_eager_limit".to_string()),
            Just("rcache_leave_pinned".to_string()),
            Just("btl_self_latency".to_string()),
            Just("name".to_string()),
            Just("btl.self.eager_limit".to_string()),
            Just("\"btl_self_latency\"".to_string()),
            "[a-z_]{1,12}",
            "[a-z]{1,4}(\\.[a-z]{1,4}){1,6}",
            "\"[^\"\\\\\n]{0,20}\"",
            "\\PC{0,8}",
        ]
    }

    /// Values: of every TOML type and of none, with sizes, huge numbers and
    /// broken quoting.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("\"4k\"".to_string()),
            Just("\"18446744073709551615k\"".to_string()),
            Just("99999999999999999999999".to_string()),
            Just("-9223372036854775808".to_string()),
            Just("1e400".to_string()),
            Just("nan".to_string()),
            Just("1979-05-27T07:32:00Z".to_string()),
            Just("true".to_string()),
            Just("[\"self\", \"sm\"]".to_string()),
            Just("[1, \"a\"]".to_string()),
            Just("[[[]]]".to_string()),
            Just("{ a = 1, b = { c = \"x\" } }".to_string()),
            Just("\"unterminated".to_string()),
            Just("'''\nmulti\nline'''".to_string()),
            any::<i64>().prop_map(|i| i.to_string()),
            any::<f64>().prop_map(|f| f.to_string()),
            "\"[ -~]{0,30}\"",
            "[0-9]{1,30}[kmgKMGq]?",
            "\\PC{0,12}",
        ]
    }

    /// A line: `key = value`, a table header, or noise.
    fn line() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (key(), value()).prop_map(|(k, v)| format!("{k} = {v}")),
            1 => key().prop_map(|k| format!("[{k}]")),
            1 => key().prop_map(|k| format!("[[{k}]]")),
            1 => "\\PC{0,40}",
            1 => "[ -~]{0,40}",
        ]
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn arbitrary_bytes_are_read_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            check(&bytes)?;
        }

        #[test]
        fn almost_right_documents_are_read_or_refused(
            lines in proptest::collection::vec(line(), 0..24),
            cut in any::<prop::sample::Index>(),
            cut_it in any::<bool>(),
        ) {
            let doc = lines.join("\n");
            let bytes = doc.as_bytes();
            // Also cut short anywhere, even inside a character.
            let end = if cut_it { cut.index(bytes.len() + 1) } else { bytes.len() };
            check(&bytes[..end])?;
        }
    }

    #[test]
    fn deep_long_and_huge_files_are_refused_with_short_messages() {
        let deep_keys = format!("{} = 1\n", vec!["a"; 100_000].join("."));
        let deep_tables = format!("[{}]\nx = 1\n", vec!["a"; 20_000].join("."));
        let deep_inline = format!("x = {}1{}\n", "{a=".repeat(10_000), "}".repeat(10_000));
        let deep_arrays = format!("x = {}1{}\n", "[".repeat(10_000), "]".repeat(10_000));
        let long_line = format!("name = \"{}\n", "x".repeat(1_000_000));
        let long_name = format!("{} = 1\n", "n".repeat(1_000_000));
        let long_value = format!("btl_self_latency = \"{}\"\n", "9".repeat(1_000_000));
        let control = "name = \"a\u{0}b\"\n".to_string();
        for doc in [
            deep_keys,
            deep_tables,
            deep_inline,
            deep_arrays,
            long_line,
            long_name,
            long_value,
            control,
        ] {
            let path = write(doc.as_bytes());
            let err = registry().builder().file(&path).build().unwrap_err();
            let _ = std::fs::remove_file(&path);
            let text = err.to_string();
            assert!(
                text.len() < 4000 && !text.contains('\u{0}'),
                "{} bytes: {:?}",
                text.len(),
                text.chars().take(300).collect::<String>()
            );
        }
        // A file past the bound is refused unread, whatever it holds.
        let big = vec![b'#'; MAX_FILE_LEN as usize + 1];
        let path = write(&big);
        let err = registry().builder().file(&path).build().unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert!(err.to_string().contains("larger than"), "{err}");
        // And a device that never ends: the bound, not the end of the file, stops the
        // read (within a deadline, in case it does not).
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(registry().builder().file("/dev/zero").build().map(|_| ()));
        });
        let err = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("reading /dev/zero as a configuration file does not end")
            .unwrap_err();
        assert!(matches!(err, Error::File { .. }), "{err}");
    }
}
