//! Large messages their receivers read alone, without the sender's process: one sent
//! by `isend_unsplit_in`, and one sent while a rendezvous to another rank is under way
//! (each of several receivers reads alone, where the sender's halves would be copied
//! one after another). Split messages need the sender to call into the library again;
//! these complete while it stays out.

use rbtl::msg::{Comm, WORLD};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes of each message: split were it offered (at least `msg_split_from`), and named
/// by address (below `sm`'s `unregistered_remote_below`).
const LEN: usize = (256 << 10) + 4099;

/// How long rank 0 stays out of the library waiting for the receivers.
const OUT_FOR: Duration = Duration::from_secs(20);

/// Three ranks: rank 0 sends rank 1 one message by `isend_unsplit_in` (tag 1), then one
/// by `isend_raw` (tag 2, split: nothing else goes to another rank yet), then rank 2
/// one by `isend_raw` (tag 3, while those to rank 1 are under way); then it makes no
/// call into the library until rank 1 has its first message and rank 2 its message.
pub fn run(report: &dyn Fn(u32, &str)) {
    let mut comm = Comm::init(&[]).unwrap();
    let me = comm.rank();
    let dir = PathBuf::from(std::env::var_os("NODE_TEST_DIR").expect("NODE_TEST_DIR"));
    let message = |tag: u8| -> Vec<u8> { (0..LEN).map(|i| (i * 13) as u8 ^ tag).collect() };
    let mut got = vec![0u8; LEN];
    comm.barrier().unwrap();
    match me {
        0 => {
            let (one, two, three) = (message(1), message(2), message(3));
            // SAFETY: the buffers outlive the requests, waited for below.
            let reqs = unsafe {
                [
                    comm.isend_unsplit_in(WORLD, one.as_ptr(), LEN, 1, 1),
                    comm.isend_raw(two.as_ptr(), LEN, 1, 2),
                    comm.isend_raw(three.as_ptr(), LEN, 2, 3),
                ]
            };
            let started = Instant::now();
            let alone = [dir.join("read_alone.1"), dir.join("read_alone.2")];
            while !alone.iter().all(|f| f.exists()) {
                assert!(
                    started.elapsed() < OUT_FOR,
                    "after {OUT_FOR:?} of rank 0 out of the library, rank 1's first message is \
                     {} and rank 2's {}: each should have been read by its receiver alone",
                    seen(&alone[0]),
                    seen(&alone[1])
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            for r in reqs {
                comm.wait(r.unwrap()).unwrap();
            }
        }
        1 => {
            comm.recv(&mut got, Some(0), Some(1)).unwrap();
            assert!(got == message(1), "the unsplit message arrived whole");
            report(me, "read_alone");
            comm.recv(&mut got, Some(0), Some(2)).unwrap();
            assert!(got == message(2), "the split message arrived whole");
        }
        _ => {
            comm.recv(&mut got, Some(0), Some(3)).unwrap();
            assert!(got == message(3), "the message arrived whole");
            report(me, "read_alone");
        }
    }
    comm.barrier().unwrap();
    comm.finalize().unwrap();
    report(me, "ok");
}

/// Whether the receiver's file says it read its message.
fn seen(file: &Path) -> &'static str {
    match file.exists() {
        true => "read",
        false => "not read",
    }
}
