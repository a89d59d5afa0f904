//! Arithmetic on IEEE quadruple precision (binary128: `MPI_REAL16`, and the two
//! halves of `MPI_COMPLEX32`), which Rust has no stable type for: each operation in
//! software by `rustc_apfloat` (LLVM's `APFloat`, as rustc computes constants),
//! rounded to nearest, ties to even, as GCC's `__float128` and gfortran's
//! `real(16)` round.

use rustc_apfloat::ieee::Quad;
use rustc_apfloat::{Float, Round};
use std::cmp::Ordering;

/// One binary128 number, as it lies in memory (16 bytes, the processor's order).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct F128(pub u128);

impl F128 {
    #[inline]
    fn quad(self) -> Quad {
        Quad::from_bits(self.0)
    }

    #[inline]
    fn from(q: Quad) -> F128 {
        F128(q.to_bits())
    }
}

impl std::ops::Add for F128 {
    type Output = F128;
    #[inline]
    fn add(self, y: F128) -> F128 {
        F128::from(self.quad().add_r(y.quad(), Round::NearestTiesToEven).value)
    }
}

impl std::ops::Mul for F128 {
    type Output = F128;
    #[inline]
    fn mul(self, y: F128) -> F128 {
        F128::from(self.quad().mul_r(y.quad(), Round::NearestTiesToEven).value)
    }
}

impl std::ops::Sub for F128 {
    type Output = F128;
    #[inline]
    fn sub(self, y: F128) -> F128 {
        F128::from(self.quad().sub_r(y.quad(), Round::NearestTiesToEven).value)
    }
}

impl PartialEq for F128 {
    /// As C's `==`: NaN equals nothing, zeros of both signs are equal.
    fn eq(&self, y: &F128) -> bool {
        self.partial_cmp(y) == Some(Ordering::Equal)
    }
}

impl PartialOrd for F128 {
    fn partial_cmp(&self, y: &F128) -> Option<Ordering> {
        self.quad().partial_cmp(&y.quad())
    }
}

#[cfg(test)]
mod tests {
    use super::F128;

    /// `x` (an integer, or a half of one) in binary128.
    fn q(x: f64) -> F128 {
        // f64 to binary128 exactly: the same sign, the exponent rebiased, the
        // fraction widened (normal numbers only, as every one here).
        let b = x.to_bits() as u128;
        let (sign, exp, frac) = (b >> 63, (b >> 52) & 0x7ff, b & ((1 << 52) - 1));
        if x == 0.0 {
            return F128(sign << 127);
        }
        F128(sign << 127 | (exp + 16383 - 1023) << 112 | frac << 60)
    }

    #[test]
    fn sums_products_and_order_round_as_binary128() {
        assert_eq!((q(1.5) + q(2.25)).0, q(3.75).0);
        assert_eq!((q(-3.0) * q(0.5)).0, q(-1.5).0);
        assert_eq!((q(1.0) - q(4.0)).0, q(-3.0).0);
        // 1 + 2^-112 is the next after 1; adding 2^-113 ties to even: 1 + 2^-111.
        let (one, ulp) = (q(1.0).0, 1u128);
        let next = F128(one + ulp);
        let half_ulp = F128((16383u128 - 113) << 112);
        assert_eq!((next + half_ulp).0, one + 2 * ulp);
        assert!(q(-1.0) < q(0.5) && q(2.0) > q(1.0));
        assert!(q(0.0) == q(-0.0));
        let nan = F128(0x7fff_8000_0000_0000_0000_0000_0000_0000);
        assert!(nan.partial_cmp(&q(1.0)).is_none() && nan != nan);
    }
}
