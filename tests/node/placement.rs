//! Whether a node's ranks outnumber their processors, as every rank sees it: by the
//! processors they may run on between them when they start (their affinity, which a
//! cpuset or a launcher confines), not by every processor of the machine.

use rbtl::msg::Comm;

/// Each rank reports `over.<rank>` where it sees its node oversubscribed, else
/// `spread.<rank>`.
pub fn run(report: &dyn Fn(u32, &str)) {
    let comm = Comm::init(&[]).unwrap();
    let seen = if comm.node_oversubscribed() {
        "over"
    } else {
        "spread"
    };
    report(comm.rank(), seen);
}

/// Whether the two ranks of a job started from a thread confined to `cpu` (or left
/// free) see their node oversubscribed; both must say the same.
fn two_ranks_see(cpu: Option<usize>) -> bool {
    std::thread::spawn(move || {
        if let Some(cpu) = cpu {
            // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
            let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: CPU_SET writes one bit of `one`, `cpu` being below CPU_SETSIZE.
            unsafe { libc::CPU_SET(cpu, &mut one) };
            // SAFETY: `one` is a cpu_set_t of the size given, only read; this thread
            // alone is confined, and the ranks it starts inherit it.
            let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&one), &one) };
            assert_eq!(
                r,
                0,
                "sched_setaffinity: {}",
                std::io::Error::last_os_error()
            );
        }
        let job = crate::run("msg_placement", 2, &[]);
        assert_eq!(job.code, 0, "the job on {cpu:?} failed");
        let (over, spread) = (
            crate::oks(&job.dir, "over", 2),
            crate::oks(&job.dir, "spread", 2),
        );
        assert_eq!(over + spread, 2, "every rank reported, on {cpu:?}");
        assert!(over == 0 || spread == 0, "the ranks disagree, on {cpu:?}");
        std::fs::remove_dir_all(job.dir).unwrap();
        over == 2
    })
    .join()
    .unwrap()
}

#[test]
fn ranks_confined_to_fewer_processors_than_they_number_take_turns() {
    let cpus = rbtl_testkit::cpus::allowed();
    // Free, two ranks have a processor each, unless the test runs on one.
    assert_eq!(two_ranks_see(None), cpus.len() < 2);
    // Started on one processor, they share it, however many the machine has.
    assert!(
        two_ranks_see(Some(cpus[0])),
        "two ranks started on processor {} did not see that they share it",
        cpus[0]
    );
}
