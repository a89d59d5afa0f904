//! What a loop that spins on [`crate::Module::progress`] does between two idle rounds.

/// Let this round's loads finish before the next round starts (x86 `lfence`; nothing on
/// other architectures).
///
/// A tight loop that polls a cache line which another core is about to write keeps
/// several loads of it in flight. Measured here (AMD EPYC vCPUs), two processes
/// bouncing one line took 48-54 ns one way with a bare load-and-compare loop and 25-27
/// with a fence after each look; with one line per direction, 70 and 46. `pause`
/// (`std::hint::spin_loop`) also keeps the loads apart, but waits about 25 ns here,
/// which a message that has just arrived then pays.
///
/// It pays where the side that replies asks for its reply's line early (the `sm`
/// transport does when it fills an expected receive): `osu latency` 8 B went from 0.068
/// to 0.058 us with a fence per idle round of the wait for an offloaded receive. Where
/// it does not, it can cost: `btl_pingpong` through receive callbacks was 14% slower
/// with it, so the message layer fences only that wait.
#[inline(always)]
pub fn between_idle_polls() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` is part of SSE2, which every x86_64 processor has; it only
    // orders this thread's loads.
    unsafe {
        std::arch::x86_64::_mm_lfence()
    };
}
