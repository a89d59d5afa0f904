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
    let err = r
        .builder()
        .set("btl_self_eager_limit", "lots")
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadValue {
                kind: Kind::Size,
                ..
            }
        ),
        "{err}"
    );
    let err = r
        .builder()
        .set("rcache_leave_pinned", "maybe")
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadValue {
                kind: Kind::Bool,
                ..
            }
        ),
        "{err}"
    );
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
