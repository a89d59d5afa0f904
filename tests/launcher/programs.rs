//! Jobs of several programs (MPMD: `rbtlrun -n 2 a : -n 3 b`) through
//! `launcher::launch_apps`: how their ranks must add up, and the folder each runs in.

use rbtl::launcher::{launch_apps, App, Error, LaunchOptions};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

/// `ranks` ranks of `true`.
fn app(ranks: u32) -> App {
    App {
        program: "true".into(),
        args: Vec::new(),
        ranks,
        env: Vec::new(),
        wdir: None,
    }
}

/// A job of `ranks`, ended should it run for a minute.
fn job(ranks: u32) -> LaunchOptions {
    LaunchOptions {
        ranks,
        timeout: Some(Duration::from_secs(60)),
        ..LaunchOptions::default()
    }
}

/// Programs whose ranks are not the job's, a program of none or a folder that is
/// none start nothing; programs that add up run.
#[test]
fn programs_must_number_the_jobs_ranks() {
    let err = launch_apps(&[app(1), app(2)], &job(4)).unwrap_err();
    assert!(
        err.to_string().contains("(1 + 2) are not the job's 4"),
        "{err}"
    );
    assert!(matches!(
        launch_apps(&[app(2), app(0)], &job(2)),
        Err(Error::NoRanks)
    ));
    let nowhere = App {
        wdir: Some("/nonexistent/rbtl".into()),
        ..app(1)
    };
    let err = launch_apps(&[app(1), nowhere], &job(2)).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/rbtl: not a folder"),
        "{err}"
    );
    assert_eq!(launch_apps(&[app(1), app(2)], &job(3)).unwrap().code, 0);
}

/// Each program runs in its own folder, else the job's.
#[test]
fn programs_run_in_their_folders() {
    let root = std::env::temp_dir().join(format!("rbtl-wdir-{}", std::process::id()));
    let (shared, own) = (root.join("job"), root.join("own"));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&own).unwrap();
    // A rank that exits 0 where it runs in `dir`.
    let runs_in = |dir: &Path, wdir: Option<&Path>| App {
        program: "sh".into(),
        args: ["-c", "test \"$(pwd -P)\" = \"$1\"", "sh"]
            .iter()
            .map(OsString::from)
            .chain([dir.canonicalize().unwrap().into_os_string()])
            .collect(),
        ranks: 1,
        env: Vec::new(),
        wdir: wdir.map(Path::to_path_buf),
    };
    let opts = LaunchOptions {
        wdir: Some(shared.clone()),
        ..job(2)
    };
    let code = |apps: &[App]| launch_apps(apps, &opts).unwrap().code;
    let (in_shared, in_own) = (runs_in(&shared, None), runs_in(&own, Some(&own)));
    assert_eq!(code(&[in_shared, in_own.clone()]), 0);
    assert_ne!(code(&[runs_in(&own, None), in_own]), 0);
    std::fs::remove_dir_all(&root).unwrap();
}
