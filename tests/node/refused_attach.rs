//! Memory a peer exposed, reached by its address alone where `sm` offers that
//! (cross-memory attach, no look-up of the registration), when the kernel starts
//! refusing this process's cross-memory attach after wire-up (a seccomp policy here;
//! Yama or a container's policy elsewhere): the transfers still complete, through the
//! peer's process with the registration, and `sm` stops offering by-address access;
//! rendezvous messages whose sender names its buffer by address (its own attach
//! works) arrive whole, the sender registering it once asked; large messages, which
//! both processes copy, arrive whole when either copy is refused; and a receive
//! waiting for its sender (for a registration, or for its half of a large message)
//! fails, not hangs, when the sender dies.

use rbtl::btl::BtlFlags;
use rbtl::msg::{Comm, Error, Pending, ANY_SOURCE};

/// Bytes exposed by each rank: below `sm`'s `unregistered_remote_below`, so that the
/// message layer names them by address while it may.
const LEN: usize = 64 << 10;

/// Tag of the card exchange.
const CARDS: i32 = 1;

/// Two ranks expose a buffer each; rank 0, its cross-memory attach refused from then
/// on, puts a pattern into rank 1's and reads it back; then the two exchange
/// rendezvous messages.
pub fn run(report: &dyn Fn(u32, &str)) {
    let mut comm = Comm::init(&[]).unwrap();
    let (me, peer) = (comm.rank(), comm.rank() ^ 1);
    let mut mine = vec![0u8; LEN].into_boxed_slice();
    // SAFETY: `mine` outlives `exposed` (declared after it, so dropped first).
    let exposed = unsafe { comm.expose(mine.as_mut_ptr() as usize, LEN) }.unwrap();
    let card = comm.card(&exposed, peer).unwrap();
    comm.send(&card, peer, CARDS).unwrap();
    let mut theirs = vec![0u8; 1024];
    let got = comm.recv(&mut theirs, Some(peer), Some(CARDS)).unwrap();
    let target = comm.target(peer, &theirs[..got.len]).unwrap();
    assert!(!target.is_direct(), "the peer's buffer is its own memory");
    assert!(
        by_address(&mut comm),
        "sm reads a peer's memory by address here (cross-memory attach works)"
    );
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    comm.barrier().unwrap();
    if me == 0 {
        refuse_cross_memory_attach();
        let p = Pending::default();
        // SAFETY: `pattern` lives until the transfer is waited for, just below.
        unsafe { comm.put_to(&target, 0, pattern.as_ptr(), LEN, &p) }.unwrap();
        comm.complete(&p, Some(peer)).unwrap();
        let mut back = vec![0u8; LEN];
        // SAFETY: `back` has room and lives until the transfer is waited for.
        unsafe { comm.get_from(&target, 0, back.as_mut_ptr(), LEN, &p) }.unwrap();
        comm.complete(&p, Some(peer)).unwrap();
        assert!(back == pattern, "the bytes read back are those put");
        assert!(
            !by_address(&mut comm),
            "sm no longer offers by-address access once refused"
        );
    }
    // Rendezvous messages both ways: rank 1 still names its buffers by address
    // (its own attach works), which rank 0 can no longer read.
    for round in 0..3u8 {
        let sent: Vec<u8> = pattern.iter().map(|b| b ^ round).collect();
        if me == 1 {
            comm.send(&sent, 0, round.into()).unwrap();
        } else {
            let mut got = vec![0u8; LEN];
            let status = comm.recv(&mut got, Some(1), Some(round.into())).unwrap();
            assert_eq!(status.len, LEN);
            assert!(got == sent, "round {round}: the message arrived whole");
            comm.send(&sent, 1, round.into()).unwrap();
        }
        if me == 1 {
            let mut got = vec![0u8; LEN];
            comm.recv(&mut got, Some(0), Some(round.into())).unwrap();
            assert!(got == sent, "round {round}: the message came back whole");
        }
    }
    comm.barrier().unwrap();
    if me == 1 {
        assert!(*mine == *pattern, "rank 0's put landed");
    }
    drop(exposed);
    comm.finalize().unwrap();
    report(me, "ok");
}

/// Large messages, which both processes copy (half each), with ranks 0 and 2 refused
/// cross-memory attach after wire-up: rank 1 sends to rank 0, whose read of its half
/// is refused (rank 1 then writes both halves); rank 2 sends to rank 1, and its write
/// of its half is refused (rank 1 then reads both).
pub fn run_split(report: &dyn Fn(u32, &str)) {
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    let sm_by_address = by_address(&mut comm);
    assert!(sm_by_address, "sm reads a peer's memory by address here");
    if me != 1 {
        refuse_cross_memory_attach();
    }
    comm.barrier().unwrap();
    let message =
        |from: u32| -> Vec<u8> { (0..BIG).map(|i| (i * 13) as u8 ^ from as u8).collect() };
    let mut got = vec![0u8; BIG];
    match me {
        0 => {
            comm.recv(&mut got, Some(1), Some(1)).unwrap();
            assert!(got == message(1), "rank 1's message, written by rank 1");
        }
        1 => {
            comm.send(&message(1), 0, 1).unwrap();
            comm.recv(&mut got, Some(2), Some(2)).unwrap();
            assert!(got == message(2), "rank 2's message, read by rank 1");
        }
        _ => comm.send(&message(2), 1, 2).unwrap(),
    }
    comm.barrier().unwrap();
    comm.finalize().unwrap();
    report(me, "ok");
}

/// Bytes of the large messages: enough for both processes to copy them.
const BIG: usize = (1 << 20) + 4099;

/// Rank 1 names a rendezvous buffer of `len` bytes by address to rank 0 and dies at
/// once; rank 0's receive from any source, matched and waiting for rank 1 (for the
/// buffer's registration, rank 0's cross-memory attach refused when `refuse`; or
/// for the half rank 1 was to write), fails with rank 1's failure.
pub fn run_sender_dies(report: &dyn Fn(u32, &str), len: usize, refuse: bool) {
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    if me == 0 && refuse {
        refuse_cross_memory_attach();
    }
    comm.barrier().unwrap();
    if me == 1 {
        let buf: &'static [u8] = vec![5u8; len].leak();
        // SAFETY: `buf` lives as long as the process.
        unsafe { comm.isend_raw(buf.as_ptr(), len, 0, 3) }.unwrap();
        // SAFETY: raising a signal on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    let mut got = vec![0u8; len];
    match comm.recv(&mut got, ANY_SOURCE, Some(3)) {
        Err(Error::PeerFailed { rank: 1, .. }) => report(me, "peer_failed"),
        other => panic!("expected rank 1's failure, got {other:?}"),
    }
    std::process::exit(1);
}

/// Whether `sm` offers access to peers' memory by address alone.
fn by_address(comm: &mut Comm) -> bool {
    let sm = comm
        .modules()
        .find(|m| m.name() == "sm")
        .expect("sm is open");
    sm.attributes()
        .flags
        .contains(BtlFlags::UNREGISTERED_REMOTE)
}

/// Makes `process_vm_readv(2)` and `process_vm_writev(2)` fail with EPERM in this
/// thread from now on.
fn refuse_cross_memory_attach() {
    let stmt = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let jump_if = |nr: libc::c_long, to_refusal: u8| {
        stmt(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            nr as u32,
            to_refusal,
            0,
        )
    };
    let filter = [
        // A = seccomp_data.nr
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
        jump_if(libc::SYS_process_vm_readv, 2),
        jump_if(libc::SYS_process_vm_writev, 1),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW, 0, 0),
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
            0,
            0,
        ),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: the program lives across the calls (the kernel copies it); it turns
    // two system calls into errors and allows every other.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        let installed = libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        );
        assert_eq!(installed, 0, "{}", std::io::Error::last_os_error());
    }
}
