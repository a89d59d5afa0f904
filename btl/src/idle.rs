//! What a loop that spins on [`crate::Module::progress`] does between two idle rounds.

/// Let this round's loads finish before the next round starts (x86 `lfence`; nothing on
/// other architectures).
///
/// A tight loop that polls a cache line which another core is about to write keeps
/// several loads of it in flight: two processes bounce one line markedly faster with a
/// fence after each look than with a bare load-and-compare loop. `pause`
/// (`std::hint::spin_loop`) also keeps the loads apart, but waits longer, which a
/// message that has just arrived then pays.
///
/// It pays where the side that replies asks for its reply's line early (the `sm`
/// transport does when it fills an expected receive), as in the wait for an offloaded
/// receive. Where it does not, it can cost (through receive callbacks), so the message
/// layer fences only that wait. Measured: see docs/performance.md.
#[inline(always)]
pub fn between_idle_polls() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` is part of SSE2, which every x86_64 processor has; it only
    // orders this thread's loads.
    unsafe {
        std::arch::x86_64::_mm_lfence()
    };
}
