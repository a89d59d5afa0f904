//! Named shared segments, across real processes.
//!
//! Child processes are this test binary run again with `ROLE` set: each
//! `child_*` test does nothing unless its role is selected, so in a normal run
//! they pass trivially.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{pattern, TempDir};
use rbtl_mpool::{
    cleanup_stale_in, own_start_time, shm_dir, Error, SharedRegion, DEFAULT_SHM_DIR, SHM_DIR_ENV,
};

const ROLE: &str = "RBTL_MPOOL_TEST_ROLE";
const DIR: &str = "RBTL_MPOOL_TEST_DIR";
const NAME: &str = "RBTL_MPOOL_TEST_NAME";
const SEED: u8 = 0x5a;

fn role_is(role: &str) -> bool {
    std::env::var(ROLE).as_deref() == Ok(role)
}

/// Runs the test `test` of this binary in a child process with role `role`.
fn child(test: &str, role: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env_remove(SHM_DIR_ENV)
        .stdin(Stdio::null());
    cmd
}

fn run_to_end(mut cmd: Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Finds `KEY=value` in a child's output. The test harness may print
/// `test name ... ` on the same line first, so the key can be anywhere.
fn field(stdout: &str, key: &str) -> Option<String> {
    stdout.lines().find_map(|l| marker(l, key))
}

fn marker(line: &str, key: &str) -> Option<String> {
    let at = line.find(&format!("{key}="))?;
    let value = line[at + key.len() + 1..].split_whitespace().next()?;
    Some(value.to_owned())
}

// ---------------------------------------------------------------- children

#[test]
fn child_writer() {
    if !role_is("writer") {
        return;
    }
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let name = std::env::var(NAME).unwrap();
    let seg = SharedRegion::open_in(&dir, &name).unwrap();
    assert!(!seg.is_owner());
    // The owner wrote a marker in the first byte before spawning us.
    // SAFETY: byte 0 is inside the mapping; the parent waits for us.
    assert_eq!(unsafe { seg.as_ptr().read_volatile() }, 0xee);
    for i in 0..seg.len() {
        // SAFETY: i < len; the parent does not touch the memory until we exit.
        unsafe { seg.as_ptr().add(i).write_volatile(pattern(i, SEED)) };
    }
    let path = seg.path().to_owned();
    drop(seg);
    assert!(path.exists(), "a non-owner must not unlink on drop");
    println!("CHILD_DONE=1");
}

#[test]
fn child_crasher() {
    if !role_is("crasher") {
        return;
    }
    // No RBTL_SHM_DIR and no DIR: the default directory (/dev/shm).
    let seg = match std::env::var(DIR) {
        Ok(dir) => SharedRegion::create_in(Path::new(&dir), "crash", 8192).unwrap(),
        Err(_) => SharedRegion::create("crash-default", 8192).unwrap(),
    };
    // SAFETY: byte 0 is inside the mapping we own.
    unsafe { seg.as_ptr().write_volatile(1) };
    println!("SEGMENT={}", seg.path().display());
    std::io::stdout().flush().unwrap();
    // Wait to be SIGKILLed; give up after a while so a dead parent leaves no orphan.
    for _ in 0..600 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::process::exit(3);
}

#[test]
fn child_env_dir() {
    if !role_is("env_dir") {
        return;
    }
    let dir = shm_dir();
    let seg = SharedRegion::create("envtag", 4096).unwrap();
    let peer = SharedRegion::open(seg.name()).unwrap();
    assert_eq!(peer.path(), seg.path());
    println!("SHM_DIR={}", dir.display());
    println!("SEGMENT={}", seg.path().display());
    drop(peer);
    assert!(seg.path().exists());
    drop(seg);
    println!("CHILD_DONE=1");
}

// ---------------------------------------------------------------- parents

#[test]
fn second_process_writes_parent_reads() {
    let tmp = TempDir::new("xproc");
    let len = 3 * 4096 + 17;
    let seg = SharedRegion::create_in(tmp.path(), "xproc", len).unwrap();
    assert!(seg.is_owner());
    assert_eq!(seg.len(), len);
    assert!(seg
        .name()
        .starts_with(&format!("rbtl.{}.", std::process::id())));
    assert!(seg.name().ends_with(".xproc"));
    assert_eq!(seg.path(), tmp.path().join(seg.name()));
    // SAFETY: byte 0 is inside the mapping; no child runs yet.
    unsafe { seg.as_ptr().write_volatile(0xee) };

    let mut cmd = child("child_writer", "writer");
    cmd.env(DIR, tmp.path()).env(NAME, seg.name());
    let out = run_to_end(cmd);
    assert_eq!(
        field(&out, "CHILD_DONE").as_deref(),
        Some("1"),
        "child role did not run:\n{out}"
    );

    for i in 0..len {
        // SAFETY: i < len; the child has exited.
        let b = unsafe { seg.as_ptr().add(i).read_volatile() };
        assert_eq!(b, pattern(i, SEED), "byte {i}");
    }
    let path = seg.path().to_owned();
    assert!(path.exists(), "the child's non-owner drop left the file");
    drop(seg);
    assert!(!path.exists(), "owner drop unlinks");
}

#[test]
fn owner_and_peer_drop_in_process() {
    let tmp = TempDir::new("drop");
    let owner = SharedRegion::create_in(tmp.path(), "d", 100).unwrap();
    let peer = SharedRegion::open_in(tmp.path(), owner.name()).unwrap();
    assert!(!peer.is_owner());
    assert_eq!(peer.len(), 100);
    // SAFETY: both map the same 100 bytes; byte 99 is in range.
    unsafe {
        owner.as_ptr().add(99).write_volatile(42);
        assert_eq!(peer.as_ptr().add(99).read_volatile(), 42);
    }
    let path = owner.path().to_owned();
    drop(peer);
    assert!(path.exists());
    drop(owner);
    assert!(!path.exists());
}

#[test]
fn unlink_keeps_mapping_and_is_idempotent() {
    let tmp = TempDir::new("unlink");
    let owner = SharedRegion::create_in(tmp.path(), "u", 4096).unwrap();
    let peer = SharedRegion::open_in(tmp.path(), owner.name()).unwrap();
    owner.unlink().unwrap();
    assert!(owner.is_unlinked());
    assert!(!owner.path().exists());
    owner.unlink().unwrap();
    peer.unlink().unwrap();
    // SAFETY: both still map the same page.
    unsafe {
        peer.as_ptr().add(10).write_volatile(7);
        assert_eq!(owner.as_ptr().add(10).read_volatile(), 7);
    }
    // Late peers can no longer open it.
    match SharedRegion::open_in(tmp.path(), owner.name()) {
        Err(e @ Error::Open { .. }) => assert!(e.to_string().contains(owner.name())),
        other => panic!("expected Error::Open, got {other:?}"),
    }
    drop(peer);
    drop(owner);
}

#[test]
fn exclusive_create_names_the_path() {
    let tmp = TempDir::new("excl");
    let first = SharedRegion::create_in(tmp.path(), "same", 64).unwrap();
    match SharedRegion::create_in(tmp.path(), "same", 64) {
        Err(e @ Error::AlreadyExists { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&first.path().display().to_string()), "{msg}");
            assert!(msg.contains("cleanup_stale"), "{msg}");
        }
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    // The failed attempt must not have removed the first segment.
    assert!(first.path().exists());
}

#[test]
fn bad_names_and_sizes() {
    let tmp = TempDir::new("bad");
    assert!(matches!(
        SharedRegion::create_in(tmp.path(), "a/b", 64),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        SharedRegion::create_in(tmp.path(), "", 64),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        SharedRegion::create_in(tmp.path(), "ok", 0),
        Err(Error::ZeroLength)
    ));
    assert!(matches!(
        SharedRegion::open_in(tmp.path(), "../../etc/passwd"),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(
        SharedRegion::open_in(tmp.path(), "rbtl.1.2.missing"),
        Err(Error::Open { .. })
    ));
    let missing_dir = tmp.path().join("nope");
    match SharedRegion::create_in(&missing_dir, "x", 64) {
        Err(e @ Error::Create { .. }) => assert!(e.to_string().contains("RBTL_SHM_DIR")),
        other => panic!("expected Create error, got {other:?}"),
    }
}

#[test]
fn env_var_redirects_directory() {
    let tmp = TempDir::new("env");
    let mut cmd = child("child_env_dir", "env_dir");
    cmd.env(SHM_DIR_ENV, tmp.path());
    let out = run_to_end(cmd);
    assert_eq!(field(&out, "CHILD_DONE").as_deref(), Some("1"), "{out}");
    assert_eq!(
        field(&out, "SHM_DIR").map(PathBuf::from).as_deref(),
        Some(tmp.path())
    );
    let seg = PathBuf::from(field(&out, "SEGMENT").unwrap());
    assert_eq!(seg.parent(), Some(tmp.path()));
    assert!(!seg.exists(), "owner drop in the child removed it");
}

/// Spawns a crasher, waits for its segment, SIGKILLs it. Returns the segment path.
fn crash_child(dir: Option<&Path>) -> PathBuf {
    let mut cmd = child("child_crasher", "crasher");
    if let Some(dir) = dir {
        cmd.env(DIR, dir);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut proc = cmd.spawn().unwrap();
    let stdout = proc.stdout.take().unwrap();
    let mut segment = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(p) = marker(&line, "SEGMENT") {
            segment = Some(PathBuf::from(p));
            break;
        }
    }
    let Some(segment) = segment else {
        let status = proc.wait().unwrap();
        panic!("crasher exited ({status:?}) without reporting a segment");
    };
    proc.kill().unwrap(); // SIGKILL: no destructor runs
    let status = proc.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert!(segment.exists(), "a killed owner leaves its segment behind");
    segment
}

#[test]
fn crash_cleanup_in_temp_dir() {
    let tmp = TempDir::new("crash");
    let stale = crash_child(Some(tmp.path()));
    assert_eq!(stale.parent(), Some(tmp.path()));

    // A segment of this (live) process must survive.
    let live = SharedRegion::create_in(tmp.path(), "live", 4096).unwrap();
    // Same pid as ours but another start time: the pid was reused, so stale.
    let start = own_start_time().unwrap();
    let reused = tmp
        .path()
        .join(format!("rbtl.{}.{}.reused", std::process::id(), start + 1));
    std::fs::write(&reused, b"x").unwrap();
    // Files outside the naming scheme are never touched.
    let foreign = tmp.path().join("rbtl.notapid.1.x");
    let other = tmp.path().join("someone-elses-file");
    std::fs::write(&foreign, b"x").unwrap();
    std::fs::write(&other, b"x").unwrap();

    let mut removed = cleanup_stale_in(tmp.path()).unwrap();
    removed.sort();
    let mut expected = vec![stale.clone(), reused.clone()];
    expected.sort();
    assert_eq!(removed, expected);
    assert!(!stale.exists());
    assert!(!reused.exists());
    assert!(live.path().exists(), "live owner's segment was removed");
    assert!(foreign.exists());
    assert!(other.exists());

    // Nothing left to do the second time.
    assert!(cleanup_stale_in(tmp.path()).unwrap().is_empty());
    // A missing directory is not an error.
    assert!(cleanup_stale_in(&tmp.path().join("missing"))
        .unwrap()
        .is_empty());
}

#[test]
fn crash_cleanup_on_real_dev_shm() {
    let dev_shm = Path::new(DEFAULT_SHM_DIR);
    if !dev_shm.is_dir() {
        eprintln!("no {DEFAULT_SHM_DIR} here; skipping");
        return;
    }
    // The child uses the default directory (RBTL_SHM_DIR removed).
    let stale = crash_child(None);
    assert_eq!(stale.parent(), Some(dev_shm));
    let live = SharedRegion::create_in(dev_shm, "live-real", 4096).unwrap();

    let removed = cleanup_stale_in(dev_shm).unwrap();
    assert!(removed.contains(&stale), "{removed:?}");
    assert!(!removed.iter().any(|p| p == live.path()));
    assert!(!stale.exists());
    assert!(live.path().exists());
    let path = live.path().to_owned();
    drop(live);
    assert!(!path.exists());
}

#[test]
fn shared_region_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SharedRegion>();
}

/// Bytes of memory the file behind descriptor `fd` holds.
fn backed_bytes(fd: i32) -> u64 {
    // SAFETY: stat is plain integers; fstat writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor of a live segment; `st` is ours to write.
    assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
    st.st_blocks as u64 * 512
}

/// An unnamed segment is backed as it is touched, not when it is made: a process's
/// segment sized for many peers costs only what is used.
#[test]
fn an_unnamed_segment_is_backed_as_it_is_touched() {
    let len = 64 << 20;
    let seg = SharedRegion::create_unnamed("lazy", len).unwrap();
    let fd = seg.fd().expect("an unnamed segment has a descriptor");
    assert!(
        backed_bytes(fd) < 1 << 20,
        "{} bytes backed at once",
        backed_bytes(fd)
    );
    // SAFETY: the segment is ours, `len` bytes long; we write its second MiB.
    unsafe { std::ptr::write_bytes(seg.as_ptr().add(1 << 20), 7, 1 << 20) };
    let backed = backed_bytes(fd);
    assert!(
        (1 << 20..4 << 20).contains(&backed),
        "{backed} bytes backed after 1 MiB"
    );
}
