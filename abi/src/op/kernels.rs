//! The predefined operations on packed elements of each basic kind.

#[cfg(target_arch = "x86_64")]
use super::extended::F80;
use super::quad::F128;
use crate::datatype::{Pair, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;

/// What kind of operation `h` is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// MIN, MAX: ordered values.
    Order,
    /// SUM, PROD: arithmetic.
    Arith,
    /// LAND, LOR, LXOR.
    Logic,
    /// BAND, BOR, BXOR.
    Bits,
    /// MINLOC, MAXLOC.
    Loc,
    /// REPLACE, NO_OP (accumulates).
    Move,
}

fn class(h: Handle) -> Option<Class> {
    Some(match h {
        MPI_MIN | MPI_MAX => Class::Order,
        MPI_SUM | MPI_PROD => Class::Arith,
        MPI_LAND | MPI_LOR | MPI_LXOR => Class::Logic,
        MPI_BAND | MPI_BOR | MPI_BXOR => Class::Bits,
        MPI_MINLOC | MPI_MAXLOC => Class::Loc,
        MPI_REPLACE | MPI_NO_OP => Class::Move,
        _ => return None,
    })
}

/// Whether this library computes on `p`: not on `long double` but on x86-64 (its
/// x87 format, [`super::extended`]). Half floats are computed as the `half` crate
/// does: each operation in `f32`, rounded back once (exact to the last bit: `f32`
/// has more than twice the bits a half float's sum or product needs); quadruple
/// ones in software ([`super::quad`]).
fn computable(p: Prim) -> bool {
    let long_double = matches!(
        p,
        Prim::LongDouble | Prim::ComplexLongDouble | Prim::Pair(Pair::LongDoubleInt)
    );
    !long_double || cfg!(target_arch = "x86_64")
}

/// Whether predefined `h` applies to `p`.
pub fn supports(h: Handle, p: Prim) -> bool {
    let Some(c) = class(h) else { return false };
    if c == Class::Move {
        return true;
    }
    if !computable(p) {
        return false;
    }
    matches!(
        (c, p),
        (
            Class::Order,
            Prim::Int { .. } | Prim::Float(_) | Prim::LongDouble
        ) | (
            Class::Arith,
            Prim::Int { .. }
                | Prim::Float(_)
                | Prim::Complex(_)
                | Prim::LongDouble
                | Prim::ComplexLongDouble
        ) | (Class::Logic, Prim::Int { .. } | Prim::Logical(_))
            | (Class::Bits, Prim::Int { .. } | Prim::Byte)
            | (Class::Loc, Prim::Pair(_))
    )
}

/// Why `h` does not apply to `p`.
pub fn why_not(h: Handle, p: Prim) -> &'static str {
    if class(h).is_some() && !computable(p) {
        "this library has no arithmetic for long double but on x86-64"
    } else {
        "the standard does not define it for this type (MPI 6.9.2)"
    }
}

/// Read element `i` of kind `T` at `p` (packed data is not aligned).
///
/// # Safety
///
/// `p` holds at least `i + 1` elements of `T`.
#[inline(always)]
unsafe fn get<T: Copy>(p: *const u8, i: usize) -> T {
    // SAFETY: the caller's contract.
    unsafe { p.cast::<T>().add(i).read_unaligned() }
}

/// Write element `i` of kind `T` at `p`.
///
/// # Safety
///
/// As [`get`].
#[inline(always)]
unsafe fn set<T: Copy>(p: *mut u8, i: usize, v: T) {
    // SAFETY: the caller's contract.
    unsafe { p.cast::<T>().add(i).write_unaligned(v) }
}

/// `inout = f(input, inout)` over `n` elements of `T` (they may overlap).
///
/// # Safety
///
/// Both hold `n` elements of `T`.
#[inline(always)]
unsafe fn each<T: Copy>(input: *const u8, inout: *mut u8, n: usize, f: impl Fn(T, T) -> T) {
    let (align, bytes) = (std::mem::align_of::<T>(), n * std::mem::size_of::<T>());
    let (a, b) = (input as usize, inout as usize);
    let apart = a + bytes <= b || b + bytes <= a;
    if apart && a % align == 0 && b % align == 0 {
        // Apart and aligned (always, for bytes): as slices, which the compiler
        // vectorises.
        // SAFETY: the caller's contract: `n` elements each; apart and aligned as
        // just checked.
        let (a, b) = unsafe {
            (
                rbtl::btl::slice_at(input.cast::<T>(), n),
                rbtl::btl::slice_at_mut(inout.cast::<T>(), n),
            )
        };
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512bw") {
                // SAFETY: the processor has the instructions (just asked).
                return unsafe { zip_avx512(a, b, f) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: as above.
                return unsafe { zip_avx2(a, b, f) };
            }
        }
        return zip(a, b, f);
    }
    for i in 0..n {
        // SAFETY: the caller's contract.
        unsafe { set(inout, i, f(get::<T>(input, i), get::<T>(inout, i))) };
    }
}

/// `b[i] = f(a[i], b[i])`, in the widest vectors the compiler is given.
#[inline(always)]
fn zip<T: Copy>(a: &[T], b: &mut [T], f: impl Fn(T, T) -> T) {
    for (y, &x) in b.iter_mut().zip(a) {
        *y = f(x, *y);
    }
}

/// [`zip`] in AVX-512 vectors (64 bytes, four times the baseline's: a quarter of
/// the steps, which count where each step's loads wait on the stores before it).
///
/// # Safety
///
/// The processor has AVX-512 (F and BW).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn zip_avx512<T: Copy>(a: &[T], b: &mut [T], f: impl Fn(T, T) -> T) {
    zip(a, b, f)
}

/// [`zip`] in AVX2 vectors (32 bytes).
///
/// # Safety
///
/// The processor has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn zip_avx2<T: Copy>(a: &[T], b: &mut [T], f: impl Fn(T, T) -> T) {
    zip(a, b, f)
}

macro_rules! int_ops {
    ($h:expr, $t:ty, $input:expr, $inout:expr, $n:expr) => {{
        let (a, b, n) = ($input, $inout, $n);
        // SAFETY: for each arm: the caller's contract, `n` elements of the type.
        unsafe {
            match $h {
                MPI_MIN => each::<$t>(a, b, n, |x, y| x.min(y)),
                MPI_MAX => each::<$t>(a, b, n, |x, y| x.max(y)),
                MPI_SUM => each::<$t>(a, b, n, |x, y| x.wrapping_add(y)),
                MPI_PROD => each::<$t>(a, b, n, |x, y| x.wrapping_mul(y)),
                MPI_LAND => each::<$t>(a, b, n, |x, y| <$t>::from(x != 0 && y != 0)),
                MPI_LOR => each::<$t>(a, b, n, |x, y| <$t>::from(x != 0 || y != 0)),
                MPI_LXOR => each::<$t>(a, b, n, |x, y| <$t>::from((x != 0) != (y != 0))),
                MPI_BAND => each::<$t>(a, b, n, |x, y| x & y),
                MPI_BOR => each::<$t>(a, b, n, |x, y| x | y),
                MPI_BXOR => each::<$t>(a, b, n, |x, y| x ^ y),
                _ => unreachable!("checked by supports"),
            }
        }
    }};
}

macro_rules! float_ops {
    ($h:expr, $t:ty, $input:expr, $inout:expr, $n:expr) => {{
        let (a, b, n) = ($input, $inout, $n);
        // SAFETY: for each arm: the caller's contract, `n` elements of the type.
        unsafe {
            match $h {
                MPI_MIN => each::<$t>(a, b, n, |x, y| if y < x { y } else { x }),
                MPI_MAX => each::<$t>(a, b, n, |x, y| if y > x { y } else { x }),
                MPI_SUM => each::<$t>(a, b, n, |x, y| x + y),
                MPI_PROD => each::<$t>(a, b, n, |x, y| x * y),
                _ => unreachable!("checked by supports"),
            }
        }
    }};
}

macro_rules! complex_ops {
    ($h:expr, $t:ty, $input:expr, $inout:expr, $n:expr) => {{
        let (a, b, n) = ($input, $inout, $n);
        // SAFETY: for each arm: the caller's contract, `n` complex numbers, each two
        // floats of the type.
        unsafe {
            match $h {
                MPI_SUM => each::<$t>(a, b, 2 * n, |x, y| x + y),
                MPI_PROD => {
                    for i in 0..n {
                        let (xr, xi) = (get::<$t>(a, 2 * i), get::<$t>(a, 2 * i + 1));
                        let (yr, yi) = (get::<$t>(b, 2 * i), get::<$t>(b, 2 * i + 1));
                        set(b, 2 * i, xr * yr - xi * yi);
                        set(b, 2 * i + 1, xr * yi + xi * yr);
                    }
                }
                _ => unreachable!("checked by supports"),
            }
        }
    }};
}

/// MINLOC or MAXLOC over value-index pairs: `V` the value, `I` the index.
///
/// # Safety
///
/// Both hold `n` pairs laid out as `pair` packs them.
unsafe fn loc<V: Copy + PartialOrd, I: Copy + PartialOrd>(
    max: bool,
    pair: Pair,
    a: *const u8,
    b: *mut u8,
    n: usize,
) {
    let size = pair.size();
    let at = std::mem::size_of::<V>();
    for k in 0..n {
        let (pa, pb) = (a.wrapping_add(k * size), b.wrapping_add(k * size));
        // SAFETY: the caller's contract: pair `k` of each, its value then its index.
        unsafe {
            let (av, ai) = (
                pa.cast::<V>().read_unaligned(),
                pa.add(at).cast::<I>().read_unaligned(),
            );
            let (bv, bi) = (
                pb.cast::<V>().read_unaligned(),
                pb.add(at).cast::<I>().read_unaligned(),
            );
            let better = if max { av > bv } else { av < bv };
            let (v, i) = if better {
                (av, ai)
            } else if av == bv {
                (av, if ai < bi { ai } else { bi })
            } else {
                (bv, bi)
            };
            pb.cast::<V>().write_unaligned(v);
            pb.add(at).cast::<I>().write_unaligned(i);
        }
    }
}

/// `inout = input op inout` over `n` packed elements of `p`.
///
/// # Safety
///
/// Both hold `n` packed elements of `p`.
pub unsafe fn apply(h: Handle, p: Prim, input: *const u8, inout: *mut u8, n: usize) -> Result<()> {
    if !supports(h, p) {
        return Err(Error::new(
            MPI_ERR_OP,
            format!(
                "{} does not apply to this type ({})",
                super::name(h),
                why_not(h, p)
            ),
        ));
    }
    match h {
        MPI_NO_OP => return Ok(()),
        MPI_REPLACE => {
            // SAFETY: the caller's contract.
            unsafe { rbtl::btl::move_bytes(input, inout, n * p.size()) };
            return Ok(());
        }
        _ => {}
    }
    match p {
        Prim::Int {
            bytes: 1,
            signed: true,
        } => int_ops!(h, i8, input, inout, n),
        Prim::Int {
            bytes: 2,
            signed: true,
        } => int_ops!(h, i16, input, inout, n),
        Prim::Int {
            bytes: 4,
            signed: true,
        } => int_ops!(h, i32, input, inout, n),
        Prim::Int {
            bytes: 8,
            signed: true,
        } => int_ops!(h, i64, input, inout, n),
        Prim::Int {
            bytes: 16,
            signed: true,
        } => int_ops!(h, i128, input, inout, n),
        Prim::Int { bytes: 1, .. } | Prim::Byte | Prim::Logical(1) => {
            int_ops!(h, u8, input, inout, n)
        }
        Prim::Int { bytes: 2, .. } | Prim::Logical(2) => int_ops!(h, u16, input, inout, n),
        Prim::Int { bytes: 4, .. } | Prim::Logical(4) => int_ops!(h, u32, input, inout, n),
        Prim::Int { bytes: 8, .. } | Prim::Logical(8) => int_ops!(h, u64, input, inout, n),
        Prim::Int { bytes: 16, .. } | Prim::Logical(16) => int_ops!(h, u128, input, inout, n),
        Prim::Float(2) => float_ops!(h, half::f16, input, inout, n),
        Prim::Float(4) => float_ops!(h, f32, input, inout, n),
        Prim::Float(8) => float_ops!(h, f64, input, inout, n),
        Prim::Float(16) => float_ops!(h, F128, input, inout, n),
        Prim::Complex(2) => complex_ops!(h, half::f16, input, inout, n),
        Prim::Complex(4) => complex_ops!(h, f32, input, inout, n),
        Prim::Complex(8) => complex_ops!(h, f64, input, inout, n),
        Prim::Complex(16) => complex_ops!(h, F128, input, inout, n),
        Prim::Pair(pair) => {
            let max = h == MPI_MAXLOC;
            // SAFETY: for each arm: the caller's contract, `n` pairs.
            unsafe {
                match pair {
                    Pair::FloatInt => loc::<f32, i32>(max, pair, input, inout, n),
                    Pair::DoubleInt => loc::<f64, i32>(max, pair, input, inout, n),
                    Pair::LongInt => loc::<i64, i32>(max, pair, input, inout, n),
                    Pair::TwoInt => loc::<i32, i32>(max, pair, input, inout, n),
                    Pair::ShortInt => loc::<i16, i32>(max, pair, input, inout, n),
                    Pair::TwoFloat => loc::<f32, f32>(max, pair, input, inout, n),
                    Pair::TwoDouble => loc::<f64, f64>(max, pair, input, inout, n),
                    #[cfg(target_arch = "x86_64")]
                    Pair::LongDoubleInt => loc::<F80, i32>(max, pair, input, inout, n),
                    #[cfg(not(target_arch = "x86_64"))]
                    Pair::LongDoubleInt => unreachable!("checked by supports"),
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        Prim::LongDouble => float_ops!(h, F80, input, inout, n),
        #[cfg(target_arch = "x86_64")]
        Prim::ComplexLongDouble => complex_ops!(h, F80, input, inout, n),
        _ => unreachable!("checked by supports"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Copy>(h: Handle, p: Prim, a: &[T], b: &mut [T]) {
        // SAFETY: both slices hold `a.len()` elements of the kind `p` describes.
        unsafe { apply(h, p, a.as_ptr().cast(), b.as_mut_ptr().cast(), a.len()).unwrap() };
    }

    #[test]
    fn integers_floats_and_complex() {
        let int = Prim::Int {
            bytes: 4,
            signed: true,
        };
        let mut b = [5, -3, 7];
        run(MPI_SUM, int, &[1, 2, 3], &mut b);
        assert_eq!(b, [6, -1, 10]);
        run(MPI_MIN, int, &[1, 2, 3], &mut b);
        assert_eq!(b, [1, -1, 3]);
        run(MPI_BXOR, int, &[1, 1, 1], &mut b);
        assert_eq!(b, [0, -2, 2]);
        run(MPI_LAND, int, &[1, 0, 5], &mut b);
        assert_eq!(b, [0, 0, 1]);
        let mut f = [1.5f64, 2.0];
        run(MPI_PROD, Prim::Float(8), &[2.0f64, 0.5], &mut f);
        assert_eq!(f, [3.0, 1.0]);
        // (1 + 2i)(3 + 4i) = -5 + 10i
        let mut c = [3.0f64, 4.0];
        run(MPI_PROD, Prim::Complex(8), &[1.0f64, 2.0], &mut c);
        assert_eq!(c, [-5.0, 10.0]);
        // Half floats: 1 + 2^-10 (the next after 1) plus 2^-11 ties to even, 1 + 2^-9.
        let h = |x: f32| half::f16::from_f32(x);
        let next = 1.0 + 2f32.powi(-10);
        let mut x = [h(next), h(3.0)];
        run(
            MPI_SUM,
            Prim::Float(2),
            &[h(2f32.powi(-11)), h(-0.5)],
            &mut x,
        );
        assert_eq!(x, [h(1.0 + 2f32.powi(-9)), h(2.5)]);
        run(MPI_MAX, Prim::Float(2), &[h(2.0), h(-1.0)], &mut x);
        assert_eq!(x, [h(2.0), h(2.5)]);
        let mut z = [h(3.0), h(4.0)];
        run(MPI_PROD, Prim::Complex(2), &[h(1.0), h(2.0)], &mut z);
        assert_eq!(z, [h(-5.0), h(10.0)]);
    }

    #[test]
    fn minloc_takes_the_lower_index_on_ties() {
        let mut b = [3i32, 7, 1, 9];
        run(
            MPI_MINLOC,
            Prim::Pair(Pair::TwoInt),
            &[3i32, 2, 5, 0],
            &mut b,
        );
        assert_eq!(b, [3, 2, 1, 9]);
        run(
            MPI_MAXLOC,
            Prim::Pair(Pair::TwoInt),
            &[3i32, 2, 5, 0],
            &mut b,
        );
        assert_eq!(b, [3, 2, 5, 0]);
    }

    #[test]
    fn what_does_not_apply_is_refused() {
        assert!(!supports(MPI_SUM, Prim::Byte));
        assert!(!supports(MPI_MIN, Prim::Complex(8)));
        assert_eq!(
            supports(MPI_SUM, Prim::LongDouble),
            cfg!(target_arch = "x86_64")
        );
        assert!(supports(MPI_SUM, Prim::Float(16)));
        assert!(supports(MPI_PROD, Prim::Complex(2)));
        assert!(!supports(MPI_MIN, Prim::Complex(2)));
        assert!(!supports(MPI_MIN, Prim::ComplexLongDouble));
        assert!(supports(MPI_REPLACE, Prim::LongDouble));
        assert!(!supports(MPI_MAXLOC, Prim::Float(8)));
        assert!(supports(MPI_BAND, Prim::Byte));
    }
}
