//! The `external32` representation (MPI 4.1 13.5.2): every basic element big-endian,
//! of the sizes the standard's table gives, whatever the host. Most elements keep
//! their size and only change byte order; C's `long` and `unsigned long` take 4 bytes
//! there (8 here), `wchar_t` 2 (4 here), and `long double` is IEEE's quadruple
//! precision (x87 extended precision here).
//!
//! Every datatype carries its signature ([`Sig`]): the basic elements of its type
//! map, in order, as a tree of the types it was made from with their counts (never
//! expanded). Packing to `external32` packs natively first (the runs of the type),
//! then converts the packed bytes element by element along the signature; unpacking
//! converts back first.

use super::{pack, Datatype};
use crate::comm::api::read_str;
use crate::entry::call;
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::p2p::check_count;
use std::sync::Arc;

/// How one basic element is converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conv {
    /// One byte, as it is.
    Byte,
    /// An element of this many bytes, byte order reversed.
    Swap(u8),
    /// An 8-byte integer (C's `long`) in 4 bytes; `signed` or not.
    Narrow { signed: bool },
    /// A 4-byte `wchar_t` in 2 bytes.
    Wchar,
    /// x87 extended precision in 16 bytes, as IEEE quadruple precision.
    LongDouble,
}

impl Conv {
    /// Bytes of the element here, and in `external32`.
    fn sizes(self) -> (usize, usize) {
        match self {
            Conv::Byte => (1, 1),
            Conv::Swap(n) => (n as usize, n as usize),
            Conv::Narrow { .. } => (8, 4),
            Conv::Wchar => (4, 2),
            Conv::LongDouble => (16, 16),
        }
    }
}

/// The basic elements of a type map, in order.
#[derive(Clone, Debug)]
pub enum Sig {
    One(Conv),
    /// One basic element of two parts converted alike (a complex number).
    Complex(Conv),
    /// Each part's elements, its count of times, one part after the other.
    Seq(Arc<[(Sig, usize)]>),
}

impl Sig {
    /// The signature of several parts.
    pub fn seq(parts: Vec<(Sig, usize)>) -> Sig {
        Sig::Seq(Arc::from(parts))
    }

    /// Bytes of one element in `external32` (`None`: beyond the address space).
    pub fn external_size(&self) -> Option<usize> {
        self.size(|c| c.sizes().1)
    }

    /// Whether its elements take as many bytes in `external32` as here (no `long`,
    /// `unsigned long` nor `wchar_t`): their layout is the same in both.
    pub fn keeps_size(&self) -> bool {
        self.external_size() == self.native_size()
    }

    /// Bytes of one element here, packed.
    fn native_size(&self) -> Option<usize> {
        self.size(|c| c.sizes().0)
    }

    fn size(&self, of: impl Fn(Conv) -> usize + Copy) -> Option<usize> {
        match self {
            Sig::One(c) => Some(of(*c)),
            Sig::Complex(c) => Some(2 * of(*c)),
            Sig::Seq(parts) => parts.iter().try_fold(0usize, |sum, (s, n)| {
                sum.checked_add(s.size(of)?.checked_mul(*n)?)
            }),
        }
    }

    /// The basic elements (`MPI_Get_elements`' count) in the first `bytes` packed
    /// bytes of one element: `None` where they end inside a basic element (or
    /// beyond the element).
    pub fn elements_within(&self, bytes: usize) -> Option<usize> {
        let (elements, used) = self.whole_elements_within(bytes)?;
        (used == bytes).then_some(elements)
    }

    /// The basic elements that the first `bytes` packed bytes of one element hold
    /// whole, and the bytes they take (`None`: beyond the address space).
    pub fn whole_elements_within(&self, bytes: usize) -> Option<(usize, usize)> {
        match self {
            Sig::One(_) | Sig::Complex(_) => {
                let size = self.native_size()?;
                Some(if bytes >= size { (1, size) } else { (0, 0) })
            }
            Sig::Seq(parts) => {
                let (mut left, mut elements) = (bytes, 0usize);
                for (s, n) in parts.iter() {
                    let each = s.native_size()?;
                    let whole = left.checked_div(each).map_or(*n, |k| k.min(*n));
                    elements = elements.checked_add(s.elements()?.checked_mul(whole)?)?;
                    left -= whole * each;
                    if whole < *n {
                        let (more, used) = s.whole_elements_within(left)?;
                        return Some((elements.checked_add(more)?, bytes - left + used));
                    }
                }
                Some((elements, bytes - left))
            }
        }
    }

    /// Its basic elements.
    fn elements(&self) -> Option<usize> {
        match self {
            Sig::One(_) | Sig::Complex(_) => Some(1),
            Sig::Seq(parts) => parts.iter().try_fold(0usize, |sum, (s, n)| {
                sum.checked_add(s.elements()?.checked_mul(*n)?)
            }),
        }
    }

    /// Call `f(conversion, how many)` for the runs of basic elements of `count`
    /// elements, in order.
    fn each(&self, count: usize, f: &mut impl FnMut(Conv, usize) -> Result<()>) -> Result<()> {
        match self {
            Sig::One(c) => f(*c, count),
            Sig::Complex(c) => f(*c, count.saturating_mul(2)),
            Sig::Seq(parts) => {
                if let [(Sig::One(c), n)] = parts[..] {
                    return f(c, n.saturating_mul(count));
                }
                for _ in 0..count {
                    for (s, n) in parts.iter() {
                        s.each(*n, f)?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// Convert `count` elements of signature `sig` from `input` into `output`, each
/// basic element by `one` (given its conversion and its bytes on either side);
/// `outward`: `input` is native and `output` external32, else the other way. It
/// stops at the first basic element that `input` does not hold whole: the bytes
/// written to `output`.
fn convert(
    sig: &Sig,
    count: usize,
    (input, output): (&[u8], &mut [u8]),
    outward: bool,
    one: impl Fn(Conv, &[u8], &mut [u8]) -> Result<()>,
) -> Result<usize> {
    let (mut i, mut o) = (0, 0);
    sig.each(count, &mut |c, n| {
        let (native, external) = c.sizes();
        let (is, os) = if outward {
            (native, external)
        } else {
            (external, native)
        };
        for _ in 0..n {
            if i + is > input.len() {
                return Ok(());
            }
            one(c, &input[i..i + is], &mut output[o..o + os])?;
            i += is;
            o += os;
        }
        Ok(())
    })?;
    Ok(o)
}

/// Convert `count` elements of signature `sig`, packed natively in `native`, into
/// `external32` in `out` (of exactly their size there): the bytes written.
pub fn to_external(sig: &Sig, count: usize, native: &[u8], out: &mut [u8]) -> Result<usize> {
    convert(sig, count, (native, out), true, |c, from, to| {
        match c {
            Conv::Byte => to[0] = from[0],
            Conv::Swap(_) => {
                to.copy_from_slice(from);
                to.reverse();
            }
            Conv::Narrow { signed } => {
                let v = u64::from_le_bytes(from.try_into().expect("8 bytes"));
                let fits = match signed {
                    true => i32::try_from(v as i64).is_ok(),
                    false => u32::try_from(v).is_ok(),
                };
                if !fits {
                    return Err(too_wide(if signed { "long" } else { "unsigned long" }, v));
                }
                to.copy_from_slice(&(v as u32).to_be_bytes());
            }
            Conv::Wchar => {
                let v = u32::from_le_bytes(from.try_into().expect("4 bytes"));
                let Ok(v) = u16::try_from(v) else {
                    return Err(too_wide("wchar_t", v as u64));
                };
                to.copy_from_slice(&v.to_be_bytes());
            }
            Conv::LongDouble => {
                let x = u128::from_le_bytes(from.try_into().expect("16 bytes"));
                to.copy_from_slice(&x87_to_quad(x).to_be_bytes());
            }
        }
        Ok(())
    })
}

/// Convert `count` elements of signature `sig` in `external32` (`input`, their size
/// there or less) into their native packed form in `native`: the bytes written (of
/// the basic elements `input` holds whole).
pub fn from_external(sig: &Sig, count: usize, input: &[u8], native: &mut [u8]) -> Result<usize> {
    convert(sig, count, (input, native), false, |c, from, to| {
        match c {
            Conv::Byte => to[0] = from[0],
            Conv::Swap(_) => {
                to.copy_from_slice(from);
                to.reverse();
            }
            Conv::Narrow { signed } => {
                let v = u32::from_be_bytes(from.try_into().expect("4 bytes"));
                let wide = match signed {
                    true => v as i32 as i64 as u64,
                    false => v as u64,
                };
                to.copy_from_slice(&wide.to_le_bytes());
            }
            Conv::Wchar => {
                let v = u16::from_be_bytes(from.try_into().expect("2 bytes"));
                to.copy_from_slice(&(v as u32).to_le_bytes());
            }
            Conv::LongDouble => {
                let q = u128::from_be_bytes(from.try_into().expect("16 bytes"));
                to.copy_from_slice(&quad_to_x87(q).to_le_bytes());
            }
        }
        Ok(())
    })
}

fn too_wide(what: &str, v: u64) -> Error {
    Error::new(
        MPI_ERR_CONVERSION,
        format!("a {what} of value {v:#x} does not fit its size in external32"),
    )
}

/// Bits of the fraction the quadruple format has beyond x87's 63.
const EXTRA: u32 = 112 - 63;
const INTEGER_BIT: u64 = 1 << 63;

/// An x87 extended-precision value (its 80 bits in the low bytes) as IEEE quadruple
/// precision: the same sign and biased exponent, the fraction without x87's explicit
/// integer bit, widened (exact).
fn x87_to_quad(x: u128) -> u128 {
    let mantissa = x as u64;
    let sign_exp = (x >> 64) as u16 as u128;
    (sign_exp << 112) | (((mantissa & !INTEGER_BIT) as u128) << EXTRA)
}

/// An IEEE quadruple-precision value as x87 extended precision (in the low 80 bits),
/// its fraction rounded to 63 bits (to nearest, ties to even).
fn quad_to_x87(q: u128) -> u128 {
    let sign = (q >> 127) as u16;
    let mut exp = ((q >> 112) & 0x7fff) as u16;
    let frac = q & ((1u128 << 112) - 1);
    let mut m = (frac >> EXTRA) as u64;
    if exp == 0x7fff {
        // Infinity, or a NaN kept a NaN (quiet) when its bits were all in the cut.
        m |= INTEGER_BIT;
        if frac != 0 {
            m |= 1 << 62;
        }
    } else {
        let cut = frac & ((1u128 << EXTRA) - 1);
        let half = 1u128 << (EXTRA - 1);
        if cut > half || (cut == half && m & 1 == 1) {
            m += 1;
        }
        if exp == 0 {
            // A subnormal that rounding made the smallest normal number.
            if m & INTEGER_BIT != 0 {
                exp = 1;
            }
        } else {
            // Rounding carried out of the fraction: the next power of two (perhaps
            // infinity).
            if m & INTEGER_BIT != 0 {
                m = 0;
                exp += 1;
            }
            m |= INTEGER_BIT;
        }
    }
    ((((sign << 15) | exp) as u128) << 64) | m as u128
}

/// The data representation argument: `external32` (in any case), else an error.
///
/// # Safety
///
/// `datarep` is null or a NUL-ended string.
unsafe fn external32(datarep: *const c_char) -> Result<()> {
    // SAFETY: the caller's contract.
    let rep = unsafe { read_str(datarep) }?;
    if rep.eq_ignore_ascii_case("external32") {
        return Ok(());
    }
    Err(Error::new(
        MPI_ERR_UNSUPPORTED_DATAREP,
        format!("data representation {rep:?}: packing knows \"external32\" only"),
    ))
}

/// Bytes of `count` elements of `t` in `external32`.
fn external_bytes(t: &Datatype, count: usize) -> Result<usize> {
    t.sig
        .external_size()
        .and_then(|s| s.checked_mul(count))
        .ok_or_else(|| Error::new(MPI_ERR_COUNT, "the packed size overflows"))
}

/// Bytes of `count` elements of `t` packed natively (which its signature must
/// describe: the conversions walk both).
fn native_bytes(t: &Datatype, count: usize) -> Result<usize> {
    if t.sig.native_size() != Some(t.size) {
        return Err(Error::new(
            MPI_ERR_INTERN,
            "the datatype's signature does not describe its size",
        ));
    }
    t.bytes(count)
        .ok_or_else(|| Error::new(MPI_ERR_COUNT, "the packed size overflows"))
}

/// The position argument, as an offset in a buffer of `size` bytes that has room
/// for `need` bytes there (else `MPI_ERR_TRUNCATE`, saying `what` did not fit).
///
/// # Safety
///
/// `position` is null or points to an `MPI_Aint`.
unsafe fn room_at(position: *mut Aint, size: Aint, need: usize, what: &str) -> Result<usize> {
    // SAFETY: the caller's contract.
    let pos = unsafe { read_arg(position, MPI_ERR_ARG, "position") }?;
    usize::try_from(pos)
        .ok()
        .filter(|at| {
            at.checked_add(need)
                .is_some_and(|end| end as u64 <= size.max(0) as u64)
        })
        .ok_or_else(|| {
            Error::new(
                MPI_ERR_TRUNCATE,
                format!("{need} bytes cannot be {what} the {size}-byte buffer at position {pos}"),
            )
        })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: c_int,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: Aint,
    position: *mut Aint,
) -> c_int {
    call("MPI_Pack_external", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        unsafe { external32(datarep) }?;
        let n = check_count(incount)?;
        let t = mpi.dtype(datatype)?;
        let need = external_bytes(t, n)?;
        // SAFETY: the binding's contract.
        let at = unsafe { room_at(position, outsize, need, "packed into") }?;
        if need > 0 && (outbuf.is_null() || inbuf.is_null()) {
            return Err(Error::new(MPI_ERR_BUFFER, "a buffer pointer is null"));
        }
        let mut native = vec![0u8; native_bytes(t, n)?];
        // SAFETY: `inbuf` holds `incount` elements of the type (the binding's
        // contract); `native` has room for them packed.
        unsafe { pack::pack(t, inbuf.cast(), n, &mut native) };
        // SAFETY: `outbuf` holds `outsize` bytes (the binding's contract), of which
        // `at..at + need` was checked to lie inside.
        let out = unsafe { rbtl::btl::slice_at_mut(outbuf.cast::<u8>().add(at), need) };
        to_external(&t.sig, n, &native, out)?;
        // SAFETY: read above, so not null.
        unsafe { position.write((at + need) as Aint) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: Aint,
    position: *mut Aint,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: Handle,
) -> c_int {
    call("MPI_Unpack_external", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        unsafe { external32(datarep) }?;
        let n = check_count(outcount)?;
        let t = mpi.dtype(datatype)?;
        let need = external_bytes(t, n)?;
        // SAFETY: the binding's contract.
        let at = unsafe { room_at(position, insize, need, "unpacked from") }?;
        if need > 0 && (outbuf.is_null() || inbuf.is_null()) {
            return Err(Error::new(MPI_ERR_BUFFER, "a buffer pointer is null"));
        }
        // SAFETY: `inbuf` holds `insize` bytes (the binding's contract), of which
        // `at..at + need` was checked to lie inside.
        let input = unsafe { rbtl::btl::slice_at(inbuf.cast::<u8>().add(at), need) };
        let mut native = vec![0u8; native_bytes(t, n)?];
        from_external(&t.sig, n, input, &mut native)?;
        // SAFETY: `outbuf` has room for `outcount` elements of the type (the
        // binding's contract), apart from `native`.
        unsafe { pack::unpack(t, &native, outbuf.cast(), n) };
        // SAFETY: read above, so not null.
        unsafe { position.write((at + need) as Aint) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    datatype: Handle,
    size: *mut Aint,
) -> c_int {
    call("MPI_Pack_external_size", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        unsafe { external32(datarep) }?;
        non_null(size, MPI_ERR_ARG, "size")?;
        let bytes = external_bytes(mpi.dtype_any(datatype)?, check_count(incount)?)?;
        let bytes = Aint::try_from(bytes)
            .map_err(|_| Error::new(MPI_ERR_COUNT, "the packed size overflows"))?;
        // SAFETY: checked not null.
        unsafe { size.write(bytes) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// x87 bits of small values: 1.0, -2.5, the largest finite, infinity.
    const ONE: u128 = (0x3fff << 64) | INTEGER_BIT as u128;
    const MINUS_2_5: u128 = (0xc000 << 64) | 0xa000_0000_0000_0000;
    const MAX: u128 = (0x7ffe << 64) | u64::MAX as u128;
    const INF: u128 = (0x7fff << 64) | INTEGER_BIT as u128;

    #[test]
    fn long_doubles_round_trip_through_quadruple_precision() {
        assert_eq!(x87_to_quad(ONE), 0x3fff << 112);
        assert_eq!(x87_to_quad(MINUS_2_5), (0xc000 << 112) | (1u128 << 110));
        assert_eq!(x87_to_quad(INF), 0x7fff << 112);
        for x in [
            ONE,
            MINUS_2_5,
            MAX,
            INF,
            0,
            1 << 79,
            1,
            (1u128 << 64) | INTEGER_BIT as u128,
        ] {
            assert_eq!(quad_to_x87(x87_to_quad(x)), x, "{x:#x}");
        }
        let nan = quad_to_x87((0x7fff << 112) | 1);
        assert_eq!(nan >> 64, 0x7fff);
        assert_ne!(nan as u64 & !INTEGER_BIT, 0, "a NaN stays a NaN");
    }

    #[test]
    fn quadruple_fractions_round_to_nearest_even() {
        let half = 1u128 << (EXTRA - 1);
        // 1.0 plus half of x87's last place: a tie, to even (down).
        assert_eq!(quad_to_x87((0x3fff << 112) | half), ONE);
        // Just above the tie: up.
        assert_eq!(quad_to_x87((0x3fff << 112) | half | 1), ONE + 1);
        // The largest fraction rounds up into the next power of two.
        let below_two = (0x3fffu128 << 112) | ((1u128 << 112) - 1);
        assert_eq!(quad_to_x87(below_two), (0x4000 << 64) | INTEGER_BIT as u128);
    }

    #[test]
    fn every_predefined_signature_describes_its_type() {
        let all = crate::datatype::predefined::all();
        for t in all.iter().flatten() {
            assert_eq!(t.sig.native_size(), Some(t.size), "{}", t.name);
            let ext = t.sig.external_size().unwrap();
            let want = match &*t.name {
                "MPI_LONG" | "MPI_UNSIGNED_LONG" => 4,
                "MPI_WCHAR" => 2,
                "MPI_LONG_INT" => 8,
                _ => t.size,
            };
            assert_eq!(ext, want, "{} in external32", t.name);
        }
    }

    #[test]
    fn elements_within_an_element() {
        // An int, two doubles, a complex float: 4, 8, 8, 8 bytes.
        let sig = Sig::seq(vec![
            (Sig::One(Conv::Swap(4)), 1),
            (Sig::One(Conv::Swap(8)), 2),
            (Sig::Complex(Conv::Swap(4)), 1),
        ]);
        let within = [
            (0, Some(0)),
            (4, Some(1)),
            (6, None),
            (12, Some(2)),
            (20, Some(3)),
        ];
        for (bytes, want) in within
            .into_iter()
            .chain([(24, None), (28, Some(4)), (29, None)])
        {
            assert_eq!(sig.elements_within(bytes), want, "{bytes} bytes");
        }
        // The elements held whole, and their bytes, wherever the bytes end.
        assert_eq!(sig.whole_elements_within(6), Some((1, 4)));
        assert_eq!(sig.whole_elements_within(27), Some((3, 20)));
        assert_eq!(sig.whole_elements_within(29), Some((4, 28)));
        let nested = Sig::seq(vec![(sig, 3), (Sig::One(Conv::Byte), 1)]);
        assert_eq!(nested.elements_within(2 * 28 + 12), Some(10));
        assert_eq!(nested.elements_within(3 * 28 + 1), Some(13));
        assert_eq!(nested.whole_elements_within(2 * 28 + 13), Some((10, 68)));
    }

    #[test]
    fn narrowed_integers_refuse_what_does_not_fit() {
        let sig = Sig::seq(vec![(Sig::One(Conv::Narrow { signed: true }), 2)]);
        let native: Vec<u8> = [-5i64, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut ext = [0u8; 8];
        to_external(&sig, 1, &native, &mut ext).unwrap();
        assert_eq!(ext, [0xff, 0xff, 0xff, 0xfb, 0, 0, 0, 7]);
        let mut back = [0u8; 16];
        from_external(&sig, 1, &ext, &mut back).unwrap();
        assert_eq!(&back[..], &native[..]);
        let big = (1i64 << 40).to_le_bytes().repeat(2);
        let e = to_external(&sig, 1, &big, &mut ext).unwrap_err();
        assert_eq!(e.class, MPI_ERR_CONVERSION);
    }
}
