//! A registration over the locked-memory limit is refused with a diagnosis naming it.

use crate::support::device;
use rbtl_verbs::{Error, MrAccess};

/// In a child process: without CAP_IPC_LOCK and with a 64 KiB locked-memory limit, a
/// 1 MiB registration is refused with the diagnosis naming `ulimit -l`.
#[test]
fn memlock_child() {
    if std::env::var_os("VERBS_MEMLOCK_CHILD").is_none() {
        return;
    }
    let ctx = device().expect("the parent checked for a device");
    rbtl_testkit::restrict_memlock(64 << 10);
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = vec![0u8; 1 << 20];
    // SAFETY: `mem` outlives the attempt (and nothing is registered on success).
    let err = unsafe { pd.reg_mr(mem.as_mut_ptr(), mem.len(), MrAccess::LOCAL_WRITE) }
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(matches!(err, Error::Memlock { len: 1048576, .. }), "{msg}");
    assert!(msg.contains("ulimit -l") && msg.contains("64 KiB"), "{msg}");
}

#[test]
fn a_registration_over_the_memlock_limit_names_the_limit() {
    if device().is_none() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "memlock::memlock_child",
            "--exact",
            "--nocapture",
            "--color",
            "never",
        ])
        .env("VERBS_MEMLOCK_CHILD", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}
