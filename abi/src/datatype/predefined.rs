//! The predefined datatypes of the standard ABI: handle, name and kind.

use super::external::{Conv, Sig};
use super::{Datatype, Pair, Prim};
use crate::ffi::*;

const fn int(bytes: u8) -> Prim {
    Prim::Int {
        bytes,
        signed: true,
    }
}

const fn uint(bytes: u8) -> Prim {
    Prim::Int {
        bytes,
        signed: false,
    }
}

/// The table's rows, `HANDLE: kind`, each named as its handle's constant.
macro_rules! table {
    ($($handle:ident: $prim:expr),* $(,)?) => {
        &[$(($handle, stringify!($handle), $prim)),*]
    };
}

/// Every predefined datatype: its handle, name and kind (sizes as on x86-64 Linux:
/// `long` 8 bytes, `wchar_t` 4, `char` signed). Of two names of one handle, the
/// type is called by the one the standard lists first (`MPI_LONG_LONG_INT`, whose
/// synonym is `MPI_LONG_LONG`; `MPI_C_COMPLEX`, `MPI_C_FLOAT_COMPLEX`'s), as MPICH
/// calls them.
pub const TABLE: &[(Handle, &str, Prim)] = table![
    MPI_AINT: int(8),
    MPI_COUNT: int(8),
    MPI_OFFSET: int(8),
    MPI_PACKED: Prim::Byte,
    MPI_SHORT: int(2),
    MPI_INT: int(4),
    MPI_LONG: int(8),
    MPI_LONG_LONG_INT: int(8),
    MPI_UNSIGNED_SHORT: uint(2),
    MPI_UNSIGNED: uint(4),
    MPI_UNSIGNED_LONG: uint(8),
    MPI_UNSIGNED_LONG_LONG: uint(8),
    MPI_FLOAT: Prim::Float(4),
    MPI_C_COMPLEX: Prim::Complex(4),
    MPI_CXX_FLOAT_COMPLEX: Prim::Complex(4),
    MPI_DOUBLE: Prim::Float(8),
    MPI_C_DOUBLE_COMPLEX: Prim::Complex(8),
    MPI_CXX_DOUBLE_COMPLEX: Prim::Complex(8),
    MPI_LOGICAL: Prim::Logical(4),
    MPI_INTEGER: int(4),
    MPI_REAL: Prim::Float(4),
    MPI_COMPLEX: Prim::Complex(4),
    MPI_DOUBLE_PRECISION: Prim::Float(8),
    MPI_DOUBLE_COMPLEX: Prim::Complex(8),
    MPI_LONG_DOUBLE: Prim::LongDouble,
    MPI_C_LONG_DOUBLE_COMPLEX: Prim::ComplexLongDouble,
    MPI_CXX_LONG_DOUBLE_COMPLEX: Prim::ComplexLongDouble,
    MPI_FLOAT_INT: Prim::Pair(Pair::FloatInt),
    MPI_DOUBLE_INT: Prim::Pair(Pair::DoubleInt),
    MPI_LONG_INT: Prim::Pair(Pair::LongInt),
    MPI_2INT: Prim::Pair(Pair::TwoInt),
    MPI_SHORT_INT: Prim::Pair(Pair::ShortInt),
    MPI_LONG_DOUBLE_INT: Prim::Pair(Pair::LongDoubleInt),
    MPI_2REAL: Prim::Pair(Pair::TwoFloat),
    MPI_2DOUBLE_PRECISION: Prim::Pair(Pair::TwoDouble),
    MPI_2INTEGER: Prim::Pair(Pair::TwoInt),
    MPI_C_BOOL: Prim::Logical(1),
    MPI_CXX_BOOL: Prim::Logical(1),
    MPI_WCHAR: int(4),
    MPI_INT8_T: int(1),
    MPI_UINT8_T: uint(1),
    MPI_CHAR: int(1),
    MPI_SIGNED_CHAR: int(1),
    MPI_UNSIGNED_CHAR: uint(1),
    MPI_BYTE: Prim::Byte,
    MPI_INT16_T: int(2),
    MPI_UINT16_T: uint(2),
    MPI_INT32_T: int(4),
    MPI_UINT32_T: uint(4),
    MPI_INT64_T: int(8),
    MPI_UINT64_T: uint(8),
    MPI_LOGICAL1: Prim::Logical(1),
    MPI_INTEGER1: int(1),
    MPI_CHARACTER: Prim::Byte,
    MPI_LOGICAL2: Prim::Logical(2),
    MPI_INTEGER2: int(2),
    MPI_REAL2: Prim::Float(2),
    MPI_LOGICAL4: Prim::Logical(4),
    MPI_INTEGER4: int(4),
    MPI_REAL4: Prim::Float(4),
    MPI_COMPLEX4: Prim::Complex(2),
    MPI_LOGICAL8: Prim::Logical(8),
    MPI_INTEGER8: int(8),
    MPI_REAL8: Prim::Float(8),
    MPI_COMPLEX8: Prim::Complex(4),
    MPI_LOGICAL16: Prim::Logical(16),
    MPI_INTEGER16: int(16),
    MPI_REAL16: Prim::Float(16),
    MPI_COMPLEX16: Prim::Complex(8),
    MPI_COMPLEX32: Prim::Complex(16),
];

/// First and one past the last predefined datatype handle.
pub const FIRST: Handle = 0x200;
pub const END: Handle = 0x300;

/// The predefined datatypes, indexed by `handle - FIRST` (`None`: no such type).
pub fn all() -> Vec<Option<Datatype>> {
    let mut v = vec![None; END - FIRST];
    for &(h, name, prim) in TABLE {
        v[h - FIRST] = Some(Datatype::basic(name, prim));
    }
    // The types whose size in `external32` is not their size here.
    let narrow = |signed| Sig::One(Conv::Narrow { signed });
    let narrowed = [
        (MPI_LONG, narrow(true)),
        (MPI_UNSIGNED_LONG, narrow(false)),
        (MPI_WCHAR, Sig::One(Conv::Wchar)),
        (
            MPI_LONG_INT,
            Sig::seq(vec![(narrow(true), 1), (Sig::One(Conv::Swap(4)), 1)]),
        ),
    ];
    for (h, sig) in narrowed {
        if let Some(t) = v[h - FIRST].as_mut() {
            t.sig = sig;
        }
    }
    v
}
