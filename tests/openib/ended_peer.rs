//! A peer whose process ends right after its last sends landed: everything it sent is
//! delivered before it is reported failed, even where its messages fill more than one
//! poll of the completion queue and its connection method sees the end first (the
//! methods look at every progress call while another connection is being set up).

use crate::common::{process_ended, progress_until, send_noted, senders, watchdog};
use rbtl::btl::{DesFlags, Endpoint, Module, SendiOutcome, Tag};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Messages rank 1 sends before it ends: more than one poll takes (16), fewer than
/// its send credits (`btl_openib_recv_depth`, 32).
const MESSAGES: usize = 24;

fn dir() -> PathBuf {
    PathBuf::from(std::env::var_os("OPENIB_TEST_DIR").expect("OPENIB_TEST_DIR"))
}

/// Wait, without progress, until `done` (30 s at most).
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "still waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One byte to `ep` on `tag`, the connection made on first use.
fn byte(m: &mut dyn Module, ep: Endpoint, tag: Tag) {
    let am = rbtl::btl::ActiveMessage::new(ep, tag, &[], &[1]).flagged(DesFlags::OWNERSHIP);
    if let SendiOutcome::Descriptor(des) = m.sendi(&am).unwrap() {
        m.send(ep, des, tag).map_err(|e| e.error).unwrap();
    }
}

/// Three ranks. Rank 1 connects to rank 0, sends it [`MESSAGES`] messages, waits until
/// each has landed, and exits without closing anything: its connections end with it
/// (`oob`'s out-of-band one closes; over `rdma_cm` it disconnects). Rank 0, which made no progress call meanwhile, has a connection to
/// rank 2 under way (rank 2 stays out of the library), waits until rank 1 has ended,
/// then progresses until its error callback hears of rank 1: by then every message
/// has arrived.
pub fn run(m: &mut dyn Module, eps: &[Option<Endpoint>], job: rbtl::pmi::Job) {
    watchdog(Duration::from_secs(90));
    let hello = Tag::USR;
    let data = Tag(Tag::USR.0 + 1);
    let greeted = senders(m, hello);
    let got = senders(m, data);
    let sent_file = dir().join("sent.1");
    let done_file = dir().join("done.0");
    match job.rank {
        1 => {
            byte(m, eps[0].unwrap(), hello);
            progress_until(m, "rank 0's greeting", || {
                !greeted.lock().unwrap().is_empty()
            });
            let landed: Arc<Mutex<Vec<bool>>> = Default::default();
            for _ in 0..MESSAGES {
                send_noted(m, eps[0].unwrap(), data, &landed, |s| s.is_ok()).unwrap();
            }
            progress_until(m, "the messages' completions", || {
                landed.lock().unwrap().len() == MESSAGES
            });
            assert!(landed.lock().unwrap().iter().all(|&ok| ok), "a send failed");
            crate::report_ok(1, "ok");
            // Written aside, then renamed: rank 0 never reads it half written.
            let aside = sent_file.with_extension("part");
            std::fs::write(&aside, std::process::id().to_string()).unwrap();
            std::fs::rename(&aside, &sent_file).unwrap();
            drop(job);
            // Ended as a process ends: the module is never closed.
            std::process::exit(0);
        }
        0 => {
            let heard: Arc<Mutex<Vec<usize>>> = Default::default();
            let (h, g) = (heard.clone(), got.clone());
            m.register_error(Box::new(move |e| {
                if e.rank == Some(1) {
                    h.lock().unwrap().push(g.lock().unwrap().len());
                }
            }));
            progress_until(m, "rank 1's greeting", || {
                !greeted.lock().unwrap().is_empty()
            });
            let answered: Arc<Mutex<Vec<bool>>> = Default::default();
            send_noted(m, eps[1].unwrap(), hello, &answered, |s| s.is_ok()).unwrap();
            progress_until(m, "the answer's completion", || {
                !answered.lock().unwrap().is_empty()
            });
            // A connection under way: the connection methods look at every call.
            byte(m, eps[2].unwrap(), hello);
            wait_for("rank 1's sends", || sent_file.exists());
            let pid: i32 = std::fs::read_to_string(&sent_file)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            wait_for("rank 1's end", || process_ended(pid));
            progress_until(m, "rank 1's failure", || !heard.lock().unwrap().is_empty());
            let before = heard.lock().unwrap()[0];
            assert_eq!(
                before, MESSAGES,
                "rank 1 was reported failed with {before} of its {MESSAGES} messages delivered"
            );
            std::fs::write(&done_file, b"").unwrap();
        }
        _ => wait_for("rank 0's end", || done_file.exists()),
    }
    crate::report_ok(job.rank, "ok");
    drop(job);
    std::process::exit(0);
}
