//! 32-bit atomics on devices that have only 64-bit ones (verbs: fetch-add and
//! compare-swap on 8 bytes; masked and extended atomics are vendor extensions soft-RoCE
//! does not have): a compare-and-swap loop on the aligned 8-byte word that holds the
//! 32-bit one.
//!
//! Emulating rather than refusing: Open MPI's one-sided layer asks for
//! `MCA_BTL_ATOMIC_SUPPORTS_32BIT` before it uses a transport's atomics on 4-byte
//! types, and the loop is exact. Each step is a 64-bit compare-and-swap that replaces
//! the 32-bit half and keeps the other half as observed; it succeeds only if the whole
//! word still holds what was observed, so the other half is never changed, whatever
//! peers (or the target's processor) do to it meanwhile, and a failed step returns the
//! word as it is now, to try again with (lock-free: a step fails only because the word
//! changed). The first step guesses the other half to be zero, so an operation on an
//! otherwise zero word costs one device round trip, and two when the guess is wrong.
//! Atomicity is the device's, as for the 64-bit operations.
//!
//! What it needs: the whole 8-byte word inside the remote registration, with atomic
//! access, and an 8-byte landing place for each step's result, taken from a small
//! registered scratch area of the module (out of it: `OutOfResource`). Words are read
//! in the hosts' byte order, as for the 64-bit operations: the 32-bit word at offset 0
//! of the 8-byte one is its low half on the little-endian hosts this runs on.

use rbtl_btl::{
    AtomicKind, AtomicOp, Endpoint, Error, Local, MemHandle, Module, RdmaCallback, RdmaCompletion,
    Remote, RemoteAtomic, RemoteHandle, Result,
};
use std::sync::{Arc, Mutex};

/// A 32-bit operation to emulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op32 {
    /// `op` with `operand`.
    Apply(AtomicOp, u32),
    /// Compare-and-swap: if the word is `compare`, make it `value`.
    Cswap { compare: u32, value: u32 },
}

/// What to do after seeing the 8-byte word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Over: the 32-bit word's previous value.
    Done(u32),
    /// Compare-and-swap the 8-byte word from `compare` to `swap`.
    Swap { compare: u64, swap: u64 },
}

/// Where the 32-bit word lies in its 8-byte word: the bit shift of its half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Half(u32);

impl Half {
    /// The half of the 8-byte word at `addr & !7` that the 32-bit word at `addr` (4-byte
    /// aligned) is.
    pub(super) fn of(addr: u64) -> Half {
        Half(if addr % 8 == 0 { 0 } else { 32 })
    }

    fn get(self, word: u64) -> u32 {
        (word >> self.0) as u32
    }

    fn set(self, word: u64, v: u32) -> u64 {
        (word & !(0xffff_ffffu64 << self.0)) | (u64::from(v) << self.0)
    }
}

impl Op32 {
    /// The first step, on a guess of the word with the other half zero: the 8-byte
    /// word to swap from, and to.
    pub(super) fn first(self, half: Half) -> (u64, u64) {
        let guess = match self {
            Op32::Apply(..) => 0,
            Op32::Cswap { compare, .. } => half.set(0, compare),
        };
        match self.on(half, guess, false) {
            Step::Swap { compare, swap } => (compare, swap),
            // (`on` ends only on a word it has seen.)
            Step::Done(_) => (guess, guess),
        }
    }

    /// The next step once the word is seen to be `word` (`seen`: read from the device,
    /// not guessed).
    pub(super) fn on(self, half: Half, word: u64, seen: bool) -> Step {
        let old = half.get(word);
        let new = match self {
            Op32::Apply(op, operand) => op.value(u64::from(old), u64::from(operand)) as u32,
            Op32::Cswap { compare, value } => {
                if old != compare && seen {
                    return Step::Done(old);
                }
                value
            }
        };
        Step::Swap {
            compare: word,
            swap: half.set(word, new),
        }
    }

    /// After a step that swapped from `compare`, the device returned `returned`.
    pub(super) fn after(self, half: Half, compare: u64, returned: u64) -> Step {
        if returned == compare {
            Step::Done(half.get(returned))
        } else {
            self.on(half, returned, true)
        }
    }
}

/// Registered 8-byte landing places for the steps' results.
pub(super) struct Scratch {
    // (Declared before `_mem`: the registration goes before its memory.)
    handle: MemHandle,
    _mem: Box<[u64]>,
    free: Mutex<Vec<usize>>,
}

/// Landing places in the scratch area (emulated atomics in flight at once).
pub(super) const SCRATCH_WORDS: usize = 256;

impl Scratch {
    /// A scratch area registered through `register` (for local write).
    pub(super) fn new(
        register: impl FnOnce(usize, usize) -> Result<MemHandle>,
    ) -> Result<Arc<Scratch>> {
        let mut mem = vec![0u64; SCRATCH_WORDS].into_boxed_slice();
        let handle = register(mem.as_mut_ptr() as usize, SCRATCH_WORDS * 8)?;
        Ok(Arc::new(Scratch {
            handle,
            _mem: mem,
            free: Mutex::new((0..SCRATCH_WORDS).collect()),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A landing place, or `OutOfResource`.
    pub(super) fn take(self: &Arc<Self>) -> Result<Landing> {
        let index = self.lock().pop().ok_or(Error::OutOfResource(
            "openib: emulated 32-bit atomics in flight",
        ))?;
        Ok(Landing {
            scratch: Arc::clone(self),
            index,
        })
    }
}

/// One landing place, given back when dropped.
pub(super) struct Landing {
    scratch: Arc<Scratch>,
    index: usize,
}

impl Landing {
    /// Its address.
    pub(super) fn addr(&self) -> usize {
        self.scratch.handle.base() + 8 * self.index
    }

    /// The area, to borrow its registration while a step is started.
    pub(super) fn scratch(&self) -> Arc<Scratch> {
        Arc::clone(&self.scratch)
    }
}

impl Scratch {
    /// Its registration.
    pub(super) fn handle(&self) -> &MemHandle {
        &self.handle
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        self.scratch.lock().push(self.index);
    }
}

/// One emulated atomic in flight.
pub(super) struct Emulation {
    pub(super) endpoint: Endpoint,
    /// The 32-bit word's address at the target.
    pub(super) remote: u64,
    pub(super) handle: RemoteHandle,
    pub(super) op: Op32,
    /// Where the previous value goes (4 bytes, checked), if anywhere.
    pub(super) result: Option<usize>,
    pub(super) landing: Landing,
    pub(super) callback: RdmaCallback,
}

/// An emulation between its steps: the step's callback holds one reference, the code
/// that starts the step another, so that a step refused at its start can still report
/// to the caller.
type Cell = Arc<Mutex<Option<Emulation>>>;

fn take(cell: &Cell) -> Option<Emulation> {
    cell.lock().unwrap_or_else(|e| e.into_inner()).take()
}

impl Emulation {
    /// The 8-byte word's address at the target.
    pub(super) fn word(&self) -> u64 {
        self.remote & !7
    }

    /// Its emulation between steps, and the callback of the step that swaps from
    /// `compare`.
    pub(super) fn step_callback(self, compare: u64) -> (Cell, RdmaCallback) {
        let cell: Cell = Arc::new(Mutex::new(Some(self)));
        let held = Arc::clone(&cell);
        let callback: RdmaCallback = Box::new(move |m: &mut dyn Module, c: RdmaCompletion| {
            if let Some(emu) = take(&held) {
                emu.after_step(m, compare, c.status);
            }
        });
        (cell, callback)
    }

    /// A step that swapped from `compare` completed with `status`: finish, or start the
    /// next step.
    fn after_step(self, m: &mut dyn Module, compare: u64, status: Result<()>) {
        if let Err(e) = status {
            return self.finish(m, Err(e));
        }
        // SAFETY: the device wrote the 8 bytes of this operation's landing place, which
        // nothing else uses, before the completion that runs this.
        let returned = unsafe { std::ptr::read_volatile(self.landing.addr() as *const u64) };
        match self.op.after(Half::of(self.remote), compare, returned) {
            Step::Done(old) => self.finish(m, Ok(old)),
            Step::Swap { compare, swap } => {
                let (ep, word, rh, at) =
                    (self.endpoint, self.word(), self.handle, self.landing.addr());
                let scratch = self.landing.scratch();
                let (cell, next) = self.step_callback(compare);
                let cas = AtomicKind::CompareSwap {
                    compare,
                    value: swap,
                };
                let step = RemoteAtomic::new(ep, Remote::new(word, &rh), cas)
                    .fetching(Local::new(at, scratch.handle()));
                let posted = m.atomic(&step, next);
                if let Err(e) = posted {
                    // The refused step dropped its callback; the emulation is still here.
                    if let Some(emu) = take(&cell) {
                        emu.finish(m, Err(e));
                    }
                }
            }
        }
    }

    /// Over: write the previous value where asked, give the landing place back and run
    /// the caller's callback.
    pub(super) fn finish(self, m: &mut dyn Module, old: Result<u32>) {
        let status = old.map(|old| {
            if let Some(at) = self.result {
                // SAFETY: 4 bytes checked against a live local registration with
                // local-write access when the atomic started.
                unsafe { (at as *mut u32).write_unaligned(old) };
            }
        });
        let done = RdmaCompletion {
            endpoint: self.endpoint,
            local_address: self.result.unwrap_or(0),
            size: 4,
            status,
        };
        drop(self.landing);
        (self.callback)(m, done)
    }
}

#[cfg(test)]
mod tests {
    //! The loop against a word that other agents change between steps: every
    //! operation's effect lands exactly once, the other half never changes, and
    //! compare-swap sees the value at its step.

    use super::*;
    use proptest::prelude::*;

    /// Run `op` on the 32-bit word `half` of `word`, with `interference` applied to the
    /// word before each step's compare-and-swap (as another agent would); the previous
    /// value and the steps taken.
    fn run(op: Op32, half: Half, word: &mut u64, interference: &[u64]) -> (u32, usize) {
        let (compare, swap) = op.first(half);
        let mut step = Step::Swap { compare, swap };
        let mut steps = 0;
        loop {
            match step {
                Step::Done(old) => return (old, steps),
                Step::Swap { compare, swap } => {
                    if let Some(&x) = interference.get(steps) {
                        *word ^= x;
                    }
                    steps += 1;
                    assert!(steps < 100, "no progress");
                    let returned = *word;
                    if returned == compare {
                        *word = swap;
                    }
                    step = op.after(half, compare, returned);
                }
            }
        }
    }

    #[test]
    fn an_add_on_a_zero_word_takes_one_step_and_wraps_without_carry() {
        let mut w = 0u64;
        assert_eq!(
            run(Op32::Apply(AtomicOp::Add, 5), Half::of(8), &mut w, &[]),
            (0, 1)
        );
        assert_eq!(w, 5);
        let mut w = 0xffff_ffffu64 << 32 | 0x1234;
        let (old, steps) = run(Op32::Apply(AtomicOp::Add, 1), Half::of(12), &mut w, &[]);
        assert_eq!((old, steps), (u32::MAX, 2), "a wrong guess costs one step");
        assert_eq!(
            w, 0x1234,
            "wrapped to zero, no carry out, the low half kept"
        );
    }

    #[test]
    fn a_compare_swap_that_does_not_match_changes_nothing() {
        let mut w = 7u64 << 32 | 9;
        let op = Op32::Cswap {
            compare: 1,
            value: 2,
        };
        assert_eq!(run(op, Half::of(0), &mut w, &[]).0, 9);
        assert_eq!(w, 7 << 32 | 9);
        let op = Op32::Cswap {
            compare: 9,
            value: 2,
        };
        assert_eq!(run(op, Half::of(0), &mut w, &[]).0, 9);
        assert_eq!(w, 7 << 32 | 2);
    }

    proptest! {
        #[test]
        fn interference_on_either_half_never_loses_or_leaks_an_update(
            start in any::<u64>(),
            high in any::<bool>(),
            operand in any::<u32>(),
            interference in proptest::collection::vec(any::<u64>(), 0..6),
            cswap in any::<bool>(),
        ) {
            let half = Half::of(if high { 4 } else { 0 });
            let mut word = start;
            let op = if cswap {
                Op32::Cswap { compare: half.get(start ^ interference.first().copied().unwrap_or(0)), value: operand }
            } else {
                Op32::Apply(AtomicOp::Add, operand)
            };
            let (old, steps) = run(op, half, &mut word, &interference);
            // The word just before the step that ended the loop is what the operation
            // saw: replay the interference up to there.
            let mut before = start;
            for x in interference.iter().take(steps) {
                before ^= x;
            }
            prop_assert_eq!(old, half.get(before));
            let other = |w: u64| half.set(w, 0);
            prop_assert_eq!(other(word), other(before), "the other half as the others left it");
            let expected = match op {
                Op32::Apply(_, x) => old.wrapping_add(x),
                Op32::Cswap { compare, value } => if old == compare { value } else { old },
            };
            prop_assert_eq!(half.get(word), expected);
        }
    }
}
