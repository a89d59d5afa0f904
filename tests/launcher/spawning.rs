//! Spawning through the launcher (PMI-1's `mcmd=spawn`): a rank starts a new job of
//! two executables; the new ranks see their own job (size, appnum), the pre-put
//! value, and their parents' key-value space, and the parents theirs; the job ends
//! when every process of both has. A spawn the server cannot read is refused with a
//! reply, and a spawned process that fails fails the job.

use crate::harness::{launch_self, options, role_args, self_exe, Scratch};
use rbtl::launcher::{Failure, RankExit};
use rbtl::pmi::{Client, SpawnCommand};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(std::env::var_os("RBTL_TEST_DIR").expect("RBTL_TEST_DIR"))
}

/// The rank side. A parent (no pre-put value) has rank 0 spawn two processes of
/// this program and one more (appnums 0 and 1), then reads what each child wrote
/// into its key-value space; a child checks its job and writes there.
pub fn role() {
    let mut client = Client::from_env().unwrap().expect("a launcher");
    let me = client.rank();
    match client.get("spawn_test_parent").unwrap() {
        None => {
            if me == 0 {
                let cmd = |args: &[&str], nprocs| SpawnCommand {
                    program: self_exe().to_string_lossy().into_owned(),
                    args: role_args()
                        .iter()
                        .map(|a| a.to_string_lossy().into_owned())
                        .chain(args.iter().map(|s| s.to_string()))
                        .collect(),
                    nprocs,
                    info: vec![],
                };
                let parent = client.kvsname().to_string();
                let spawned = client
                    .spawn(
                        &[cmd(&["--", "first"], 2), cmd(&["--", "second"], 1)],
                        &[("spawn_test_parent".into(), parent.clone())],
                    )
                    .unwrap();
                let kvs = spawned
                    .kvsname
                    .expect("rbtlrun names the new job's key-value space");
                let base = spawned.universe_base.expect("and where its ranks start");
                assert_eq!(
                    base,
                    client.size(),
                    "the new ranks come after the first job's"
                );
                for child in 0..3 {
                    // Each child writes here once it has checked its job.
                    let value = wait_for(&mut client, &parent, &format!("child_{child}"));
                    assert_eq!(value, format!("appnum_{}", u32::from(child == 2)));
                }
                // A child's key-value space is readable from here.
                assert_eq!(
                    client.get_in(&kvs, "spawn_test_parent").unwrap(),
                    Some(parent)
                );
                assert_eq!(
                    client.get_in(&kvs, "rbtl_universe_base").unwrap(),
                    Some(base.to_string())
                );
            }
            client.barrier().unwrap();
        }
        Some(parent) => {
            assert_eq!(
                client.size(),
                3,
                "the spawned job holds both executables' ranks"
            );
            let appnum = client
                .appnum()
                .unwrap()
                .expect("rbtlrun numbers executables");
            assert_eq!(appnum, u32::from(me == 2));
            client
                .put_in(&parent, &format!("child_{me}"), &format!("appnum_{appnum}"))
                .unwrap();
            client.barrier().unwrap();
        }
    }
    std::fs::write(dir().join(format!("ok.{}.{me}", client.kvsname())), b"ok").unwrap();
    client.finalize().unwrap();
}

/// Wait (bounded) until `key` appears in `kvs`.
fn wait_for(client: &mut Client, kvs: &str, key: &str) -> String {
    for _ in 0..6000 {
        if let Some(v) = client.get_in(kvs, key).unwrap() {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{key} never appeared in {kvs}");
}

#[test]
fn a_rank_spawns_a_job_of_two_executables_that_reaches_its_parents() {
    let scratch = Scratch::new("spawn");
    let summary = launch_self(options(2, "spawn", &scratch));
    assert_eq!(summary.code, 0, "{summary:?}");
    assert_eq!(
        summary.ranks.len(),
        5,
        "two parents and three children ended: {summary:?}"
    );
    assert!(summary.ranks.iter().all(|r| *r == RankExit::Exited(0)));
    let reports = std::fs::read_dir(&scratch.0).unwrap().count();
    assert_eq!(reports, 5, "every process reported");
}

/// A rank that sends a malformed spawn, then a spawn of a program that fails.
pub fn bad_spawn_role() {
    let fd: i32 = std::env::var("PMI_FD").unwrap().parse().unwrap();
    // SAFETY: PMI_FD is this process's inherited PMI socket, used only here.
    let stream =
        unsafe { <std::os::unix::net::UnixStream as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut w = stream;
    let mut ask = |lines: &str| {
        w.write_all(lines.as_bytes()).unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        reply
    };
    let mut outcome = String::new();
    ask("cmd=init pmi_version=1 pmi_subversion=1\n");
    // No nprocs, no args.
    outcome += &ask("mcmd=spawn\nexecname=/bin/true\ntotspawns=1\nspawnssofar=1\nendcmd\n");
    // A program that exits 3.
    outcome += &ask("mcmd=spawn\nnprocs=1\nexecname=/bin/false\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n");
    std::fs::write(dir().join("outcome"), outcome).unwrap();
    ask("cmd=finalize\n");
}

#[test]
fn a_malformed_spawn_is_refused_and_a_failing_child_fails_the_job() {
    let scratch = Scratch::new("bad-spawn");
    let summary = launch_self(options(1, "bad_spawn", &scratch));
    let outcome = std::fs::read_to_string(scratch.0.join("outcome")).unwrap();
    let mut lines = outcome.lines();
    let refused = lines.next().unwrap();
    assert!(
        refused.starts_with("cmd=spawn_result rc=-1") && refused.contains("argcnt"),
        "{refused}"
    );
    let started = lines.next().unwrap();
    assert!(started.starts_with("cmd=spawn_result rc=0"), "{started}");
    // /bin/false exits 1: the job fails with that process.
    assert_eq!(summary.ranks.len(), 2, "{summary:?}");
    assert!(
        matches!(
            summary.failure,
            Some(Failure::Rank {
                rank: 1,
                exit: RankExit::Exited(1)
            })
        ),
        "{summary:?}"
    );
}
