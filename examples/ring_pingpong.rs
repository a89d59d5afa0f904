//! The floor under `sm`: a ping-pong of 8-byte messages straight on two of its rings
//! (no module, no message layer), between two processes bound to cores 0 and 1, to
//! compare with the machine's cache-line ping-pong and with `btl_pingpong`:
//! `cargo run --release --example ring_pingpong [SLOTS [ITERATIONS [pause|fence]]]`.
//! With `pause`, each side waits with the x86 `pause` instruction between two looks at
//! its ring; with `fence`, it lets each look finish before the next
//! ([`rbtl::btl::idle::between_idle_polls`]).

use rbtl::sm::ring::{Consumer, Producer, RingLayout};
use std::time::Instant;

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .map_or(default, |s| s.parse().expect("a number"))
    };
    let layout = RingLayout {
        nslots: (arg(1, 64) as usize).next_power_of_two(),
        data_bytes: 64 << 10,
    };
    let iters = arg(2, 2_000_000);
    let how = std::env::args().nth(3).unwrap_or_default();
    let (pause, fence) = (how == "pause", how == "fence");
    let bytes = layout.bytes();
    // SAFETY: a fresh shared anonymous mapping, checked below; both processes keep it
    // until they exit.
    let mem = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(mem, libc::MAP_FAILED, "mmap");
    let (to_child, to_parent) = (mem.cast::<u8>(), mem.cast::<u8>().wrapping_add(bytes));
    // SAFETY: no threads run yet; the child only runs this function's code.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    let me = usize::from(child == 0);
    bind(me);
    let (out, inn) = if me == 0 {
        (to_child, to_parent)
    } else {
        (to_parent, to_child)
    };
    // SAFETY: each ring is page-aligned, zeroed, `layout.bytes()` long and mapped for
    // the process's life; each has one producer (its sender) and one consumer.
    let (mut tx, mut rx) = unsafe { (Producer::new(out, layout), Consumer::new(inn, layout)) };
    let payload = [7u8; 8];
    let mut got = [0u8; 8];
    let start = Instant::now();
    for _ in 0..iters {
        if me == 0 {
            while !tx.push_small(1, &[], &payload) {}
        }
        let rec = loop {
            if let Some(rec) = rx.peek() {
                break rec;
            }
            if pause {
                std::hint::spin_loop();
            }
            if fence {
                rbtl::btl::idle::between_idle_polls();
            }
        };
        // SAFETY: read before the record is released.
        got.copy_from_slice(unsafe { rec.payload() });
        rx.release(rec);
        if me == 1 {
            while !tx.push_small(1, &[], &payload) {}
        }
    }
    assert_eq!(got, payload);
    if me == 0 {
        let ns = start.elapsed().as_nanos() as f64 / (2 * iters) as f64;
        let how = if pause || fence {
            format!("_{how}")
        } else {
            String::new()
        };
        println!("ring_pingpong_{}_slots{how}_8B_ns {ns:.1}", layout.nslots);
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    }
}

/// Bind this process to `core`.
fn bind(core: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls get valid pointers to it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
