//! Arithmetic on C's `long double` of x86-64: the x87 unit's 80-bit extended format
//! (a 64-bit significand with its integer bit, a 15-bit exponent, the sign), kept
//! in 16 bytes of which the last 6 are padding. Rust has no such type, so each
//! operation loads its operands into the x87 unit, computes there with its default
//! 64-bit precision (as C compilers do for `long double`) and stores the result, as
//! GCC's code for `long double` does. The padding of a result is zero.

use std::arch::asm;
use std::cmp::Ordering;

/// One `long double`, as it lies in memory.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(16))]
pub struct F80(pub [u8; 16]);

/// `$name(x, y)`: load `x` then `y` into the x87 unit, combine them with `$insn`
/// (which pops one), store the result.
macro_rules! x87_binary {
    ($(#[$doc:meta])* $name:ident, $insn:literal) => {
        $(#[$doc])*
        #[inline]
        pub fn $name(self, y: F80) -> F80 {
            let mut out = F80([0; 16]);
            // SAFETY: `fld` reads 10 bytes of each operand and `fstp` writes 10 of
            // the result, all in values of this frame of 16 bytes each; the two
            // loads and the popping operation and store leave the x87 stack empty,
            // as it was (the ABI's rule), and the clobbered registers are declared.
            unsafe {
                asm!(
                    "fld tbyte ptr [{x}]",
                    "fld tbyte ptr [{y}]",
                    $insn,
                    "fstp tbyte ptr [{o}]",
                    x = in(reg) &self,
                    y = in(reg) &y,
                    o = in(reg) &mut out,
                    out("st(0)") _,
                    out("st(1)") _,
                    options(nostack),
                );
            }
            out
        }
    };
}

impl F80 {
    x87_binary!(
        /// `x + y`, rounded as the x87 unit rounds.
        add,
        "faddp st(1), st"
    );
    x87_binary!(
        /// `x * y`, rounded as the x87 unit rounds.
        mul,
        "fmulp st(1), st"
    );

    /// `-x`: the sign bit flipped (exact, as C's negation).
    #[inline]
    pub fn neg(mut self) -> F80 {
        self.0[9] ^= 0x80;
        self
    }

    /// Whether `x > y` (false when either is a NaN).
    #[inline]
    fn above(self, y: F80) -> bool {
        let above: u8;
        // SAFETY: two loads, a compare that pops one, a pop of the other: the x87
        // stack is left empty; the flags the compare sets are read at once.
        unsafe {
            asm!(
                "fld tbyte ptr [{y}]",
                "fld tbyte ptr [{x}]",
                "fucomip st, st(1)",
                "fstp st(0)",
                "seta {a}",
                x = in(reg) &self,
                y = in(reg) &y,
                a = out(reg_byte) above,
                out("st(0)") _,
                out("st(1)") _,
                options(nostack),
            );
        }
        above != 0
    }
}

impl std::ops::Add for F80 {
    type Output = F80;
    #[inline]
    fn add(self, y: F80) -> F80 {
        F80::add(self, y)
    }
}

impl std::ops::Mul for F80 {
    type Output = F80;
    #[inline]
    fn mul(self, y: F80) -> F80 {
        F80::mul(self, y)
    }
}

impl std::ops::Sub for F80 {
    type Output = F80;
    /// `x + -y`: the x87 unit's subtraction rounds alike.
    #[inline]
    fn sub(self, y: F80) -> F80 {
        F80::add(self, y.neg())
    }
}

impl PartialEq for F80 {
    /// As C's `==` on `long double`: NaN equals nothing, zeros of both signs are
    /// equal; the padding is not looked at.
    fn eq(&self, y: &F80) -> bool {
        self.partial_cmp(y) == Some(Ordering::Equal)
    }
}

impl PartialOrd for F80 {
    fn partial_cmp(&self, y: &F80) -> Option<Ordering> {
        if self.above(*y) {
            Some(Ordering::Greater)
        } else if y.above(*self) {
            Some(Ordering::Less)
        } else if self.is_nan() || y.is_nan() {
            None
        } else {
            Some(Ordering::Equal)
        }
    }
}

impl F80 {
    /// Whether it is a NaN: the largest exponent with a fraction beyond the
    /// integer bit (or an invalid encoding, which the x87 unit treats alike).
    fn is_nan(&self) -> bool {
        let exponent = u16::from_le_bytes([self.0[8], self.0[9]]) & 0x7fff;
        let significand = u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"));
        exponent == 0x7fff && significand << 1 != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `v` as a `long double` (every `f64` is one exactly): built from its parts.
    fn of(v: f64) -> F80 {
        let bits = v.to_bits();
        let sign = (bits >> 63) as u16;
        let exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & ((1 << 52) - 1);
        let (e, significand) = match exp {
            0 if frac == 0 => (0, 0),
            0x7ff if frac == 0 => (0x7fff, 1 << 63),
            0x7ff => (0x7fff, (1 << 63) | (frac << 11)),
            0 => unreachable!("no subnormals in these tests"),
            _ => ((exp - 1023 + 16383) as u16, (1 << 63) | (frac << 11)),
        };
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&u64::to_le_bytes(significand));
        b[8..10].copy_from_slice(&(e | (sign << 15)).to_le_bytes());
        F80(b)
    }

    #[test]
    fn sums_products_and_orders_agree_with_the_values() {
        assert_eq!(of(1.5).add(of(2.25)), of(3.75));
        assert_eq!(of(-3.0).mul(of(0.5)), of(-1.5));
        assert_eq!(of(2.0).neg(), of(-2.0));
        assert_eq!(of(0.0), of(-0.0));
        assert!(of(1.0) > of(-1.0) && of(-1.0) < of(1.0));
        // 1 + 2^-60 is a long double, not a double: the extra precision is kept.
        let tiny = F80({
            let mut b = of(1.0).0;
            b[..8].copy_from_slice(&((1u64 << 63) | 8).to_le_bytes());
            b
        });
        assert!(of(1.0).add(tiny.add(of(-1.0))) > of(1.0));
        let nan = of(f64::NAN);
        assert!(nan.is_nan() && !of(f64::INFINITY).is_nan());
        assert_eq!(of(1.0).partial_cmp(&nan), None);
        assert!(nan != nan);
        assert_eq!(of(f64::INFINITY).add(of(1.0)), of(f64::INFINITY));
        // The padding of a result is zero, whatever the operands held there.
        let mut dirty = of(1.0);
        dirty.0[12] = 0xff;
        assert_eq!(dirty.add(of(1.0)).0[10..], [0; 6]);
    }
}
