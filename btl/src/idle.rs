//! What a loop that spins on [`crate::Module::progress`] does between two idle rounds.

/// Let this round's loads finish before the next round starts (x86 `lfence`; nothing on
/// other architectures).
///
/// A tight loop that polls a cache line which another core is about to write keeps
/// several loads of it in flight. Measured here (AMD EPYC vCPUs), two processes
/// bouncing one line took 53 ns one way with a bare load-and-compare loop, 25 ns with a
/// fence in it; `osu latency` 8 B went from 0.069 to 0.060 us with one fence per idle
/// round of a blocking receive. `pause` (`std::hint::spin_loop`) also keeps the loads
/// apart, but waits about 25 ns here, which a message that has just arrived then pays.
#[inline(always)]
pub fn between_idle_polls() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` is part of SSE2, which every x86_64 processor has; it only
    // orders this thread's loads.
    unsafe {
        std::arch::x86_64::_mm_lfence()
    };
}
