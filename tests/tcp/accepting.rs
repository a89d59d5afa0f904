//! What a rank's listener makes of more than one connection per link: a crowd of
//! silent connections from outside the job (more than may prove themselves at once,
//! then with the rank short of descriptors), through which members still connect both
//! ways; and two members connecting to each other at the same moment, left with one
//! connection for their link. Ranks of `tcp.rs`'s launcher.

use super::{errors, report_ok, send_byte, tcp_module};
use crate::common::senders;
use rbtl::btl::{Endpoint, Module, Tag};
use rbtl::tcp::acceptor::UNPROVEN_MAX;
use rbtl::tcp::published::Published;
use rbtl::tcp::TcpModule;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections beyond [`UNPROVEN_MAX`] in the first crowd.
const EXTRA: usize = 36;
/// Connections in the crowd met short of descriptors.
const SECOND_CROWD: usize = 40;
/// Descriptors left to rank 0 for it.
const FREE: usize = 4;

/// Progress `m` while `more` holds, for at most a minute.
fn progress_while(m: &mut TcpModule, what: &str, mut more: impl FnMut(&TcpModule) -> bool) {
    let start = Instant::now();
    while more(m) {
        if m.progress() == 0 {
            std::thread::yield_now();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still waiting for {what}: {:?}",
            m.refused()
        );
    }
}

fn has(got: &Arc<Mutex<Vec<Endpoint>>>, ep: Endpoint) -> bool {
    got.lock().unwrap().contains(&ep)
}

/// `n` connections to rank 0's first listener that say nothing.
fn open_crowd(n: usize, job: &mut rbtl::pmi::Job) -> Vec<TcpStream> {
    let blob = job.modex.lookup(0, "btl.tcp").unwrap().unwrap();
    let addr = Published::decode(&blob).unwrap().listeners[0].addr;
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

/// A descriptor limit that leaves this process `free` descriptors: new ones take
/// the lowest free numbers, and those it holds above the limit stay open.
fn limit_leaving(free: u64) -> u64 {
    // SAFETY: F_GETFD only asks whether the descriptor is open.
    let open = |fd: i32| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
    let mut held = 0;
    let mut limit = 0;
    while limit - held < free {
        held += u64::from(open(limit as i32));
        limit += 1;
    }
    limit
}

/// Five ranks (handshake timeout a minute, so that no stranger is counted stalled).
/// Rank 1 opens `UNPROVEN_MAX + EXTRA` silent connections to rank 0, which closes the
/// oldest beyond `UNPROVEN_MAX` (counted as crowded); rank 2 then connects to rank 0
/// through the crowd. Rank 1 closes its connections; rank 0 lowers its descriptor
/// limit to leave it `FREE` more, rank 1 opens `SECOND_CROWD` connections, and rank 0
/// makes room for each it accepts short of descriptors by closing the oldest; then
/// rank 3 connects to rank 0 and rank 0 to rank 4, each taking a stranger's
/// descriptor. No failure is reported, and each member's link is one connection.
pub fn role_crowd() {
    let (mut m, eps, mut job) = tcp_module();
    let rank = job.rank;
    let ep = |r: u32| eps[r as usize].unwrap();
    let seen = errors(&mut m);
    let got = senders(&mut m, Tag::USR);
    let mut crowd = Vec::new();
    // The first crowd.
    if rank == 1 {
        crowd = open_crowd(UNPROVEN_MAX + EXTRA, &mut job);
    }
    if rank == 0 {
        progress_while(&mut m, "the first crowd", |m| {
            m.refused().crowded < EXTRA as u64
        });
        assert_eq!(m.refused().total(), EXTRA as u64, "{:?}", m.refused());
    }
    job.modex.fence().unwrap();
    // A member through it: its connection is the newest, so it is heard.
    if rank == 2 {
        send_byte(&mut m, ep(0), Tag::USR);
        progress_while(&mut m, "rank 0's answer", |_| !has(&got, ep(0)));
    }
    if rank == 0 {
        progress_while(&mut m, "rank 2", |_| !has(&got, ep(2)));
        send_byte(&mut m, ep(2), Tag::USR);
        assert_eq!(m.refused().crowded, EXTRA as u64 + 1, "{:?}", m.refused());
    }
    job.modex.fence().unwrap();
    // The crowd leaves; rank 0 is then left a few descriptors.
    if rank == 1 {
        crowd.clear();
    }
    if rank == 0 {
        progress_while(&mut m, "the crowd to leave", |m| {
            m.refused().closed < (UNPROVEN_MAX - 1) as u64
        });
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        lim.rlim_cur = limit_leaving(FREE as u64);
        // SAFETY: setrlimit reads the struct it is given.
        let r = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    }
    job.modex.fence().unwrap();
    if rank == 1 {
        crowd = open_crowd(SECOND_CROWD, &mut job);
    }
    if rank == 0 {
        let before = m.refused().crowded;
        let want = before + (SECOND_CROWD - FREE) as u64;
        progress_while(&mut m, "the second crowd", |m| m.refused().crowded < want);
    }
    job.modex.fence().unwrap();
    // Members both ways, short of descriptors.
    match rank {
        0 => {
            send_byte(&mut m, ep(4), Tag::USR);
            progress_while(&mut m, "ranks 3 and 4", |_| {
                !has(&got, ep(3)) || !has(&got, ep(4))
            });
            send_byte(&mut m, ep(3), Tag::USR);
            for r in [2, 3, 4] {
                assert_eq!(m.links(ep(r)), Some((1, 1)), "the link to rank {r}");
            }
        }
        3 => {
            send_byte(&mut m, ep(0), Tag::USR);
            progress_while(&mut m, "rank 0's answer", |_| !has(&got, ep(0)));
        }
        4 => {
            progress_while(&mut m, "rank 0", |_| !has(&got, ep(0)));
            send_byte(&mut m, ep(0), Tag::USR);
        }
        _ => {}
    }
    job.modex.fence().unwrap();
    assert_eq!(*seen.lock().unwrap(), Vec::<String>::new(), "no failure");
    drop(crowd);
    report_ok(rank, "ok");
}

/// Two ranks each start connecting to the other before either progresses: both
/// connections cross, the one of the lower rank carries the link, the other closes
/// uncounted, and the messages arrive.
pub fn role_crossing() {
    let (mut m, eps, mut job) = tcp_module();
    let peer = eps[(job.rank ^ 1) as usize].unwrap();
    let seen = errors(&mut m);
    let got = senders(&mut m, Tag::USR);
    send_byte(&mut m, peer, Tag::USR);
    // Both connections are on their way (in the kernel's queues) before either
    // listener is looked at.
    job.modex.fence().unwrap();
    progress_while(&mut m, "the peer's message", |_| !has(&got, peer));
    job.modex.fence().unwrap();
    assert_eq!(m.links(peer), Some((1, 1)), "one connection for the link");
    assert_eq!(m.refused().total(), 0, "{:?}", m.refused());
    send_byte(&mut m, peer, Tag::USR);
    progress_while(&mut m, "the second message", |_| {
        got.lock().unwrap().len() < 2
    });
    job.modex.fence().unwrap();
    assert_eq!(*seen.lock().unwrap(), Vec::<String>::new(), "no failure");
    report_ok(job.rank, "ok");
}
