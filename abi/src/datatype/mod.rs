//! Datatypes: what a count of elements of a type means in memory.
//!
//! A datatype is flattened once, when it is made, into the runs of contiguous bytes
//! one element occupies ([`Datatype::blocks`], in the order of its type map, adjacent
//! runs merged; very many runs of one older type kept as its runs and their strides)
//! with its bounds; packing and unpacking walk those runs. A type whose
//! one run starts at 0 and fills its extent is contiguous: messages of it move
//! straight from and to the user's buffer.

pub mod api;
pub mod arrays;
pub mod attr;
mod build;
pub mod constructors;
pub mod external;
pub mod f90;
pub mod indexed;
pub mod pack;
pub mod predefined;
pub mod query;
pub mod runs;

pub use build::Layout;
pub use runs::Blocks;

use crate::ffi::*;
use std::sync::Arc;

/// The basic element kinds, for reductions and element counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prim {
    /// Integers of 1, 2, 4, 8 or 16 bytes.
    Int { bytes: u8, signed: bool },
    /// IEEE floats of 2, 4, 8 or 16 bytes.
    Float(u8),
    /// C's `long double` here: x87 extended precision, stored (and moved) in 16 bytes.
    LongDouble,
    /// Complex numbers: two floats of this many bytes each.
    Complex(u8),
    /// Two `long double`s.
    ComplexLongDouble,
    /// C's `bool` and Fortran's logicals, of this many bytes.
    Logical(u8),
    /// Bytes without arithmetic (`MPI_BYTE`, `MPI_PACKED`, `MPI_CHARACTER`).
    Byte,
    /// A value and an index, for `MPI_MINLOC`/`MPI_MAXLOC`.
    Pair(Pair),
}

/// The value-index pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pair {
    FloatInt,
    DoubleInt,
    LongInt,
    TwoInt,
    ShortInt,
    LongDoubleInt,
    TwoFloat,
    TwoDouble,
}

impl Prim {
    /// Bytes of one element's data.
    #[inline]
    pub fn size(self) -> usize {
        match self {
            Prim::Int { bytes, .. } | Prim::Float(bytes) | Prim::Logical(bytes) => bytes as usize,
            Prim::LongDouble => 16,
            Prim::Complex(b) => 2 * b as usize,
            Prim::ComplexLongDouble => 32,
            Prim::Byte => 1,
            Prim::Pair(p) => p.size(),
        }
    }

    /// Bytes one element takes in memory (its extent as a predefined type).
    pub fn extent(self) -> usize {
        match self {
            Prim::Pair(p) => p.extent(),
            p => p.size(),
        }
    }

    /// Its basic elements, for `external32` (where the type's own size is kept).
    pub fn signature(self) -> external::Sig {
        use external::{Conv, Sig};
        let one = |c| Sig::One(c);
        match self {
            Prim::Byte | Prim::Int { bytes: 1, .. } | Prim::Logical(1) => one(Conv::Byte),
            Prim::Int { bytes, .. } | Prim::Float(bytes) | Prim::Logical(bytes) => {
                one(Conv::Swap(bytes))
            }
            Prim::LongDouble => one(Conv::LongDouble),
            Prim::Complex(b) => Sig::Complex(Conv::Swap(b)),
            Prim::ComplexLongDouble => Sig::Complex(Conv::LongDouble),
            Prim::Pair(p) => {
                let (value, index) = p.parts();
                Sig::seq(vec![(value.signature(), 1), (index.signature(), 1)])
            }
        }
    }

    /// Its alignment in a C struct.
    pub fn align(self) -> usize {
        match self {
            Prim::Complex(b) => b as usize,
            Prim::LongDouble | Prim::ComplexLongDouble => 16,
            Prim::Int { bytes: 16, .. } | Prim::Float(16) => 16,
            Prim::Pair(p) => p.align(),
            p => p.size(),
        }
    }
}

impl Pair {
    /// The kinds of the value and of the index.
    pub fn parts(self) -> (Prim, Prim) {
        let int = Prim::Int {
            bytes: 4,
            signed: true,
        };
        let long = Prim::Int {
            bytes: 8,
            signed: true,
        };
        let short = Prim::Int {
            bytes: 2,
            signed: true,
        };
        match self {
            Pair::FloatInt => (Prim::Float(4), int),
            Pair::DoubleInt => (Prim::Float(8), int),
            Pair::LongInt => (long, int),
            Pair::TwoInt => (int, int),
            Pair::ShortInt => (short, int),
            Pair::LongDoubleInt => (Prim::LongDouble, int),
            Pair::TwoFloat => (Prim::Float(4), Prim::Float(4)),
            Pair::TwoDouble => (Prim::Float(8), Prim::Float(8)),
        }
    }

    /// Offset of the index in the C struct.
    pub fn index_offset(self) -> usize {
        let (value, index) = self.parts();
        value.extent().next_multiple_of(index.align())
    }

    /// Bytes of data.
    pub fn size(self) -> usize {
        let (value, index) = self.parts();
        value.size() + index.size()
    }

    /// The C struct's alignment.
    pub fn align(self) -> usize {
        let (value, index) = self.parts();
        value.align().max(index.align())
    }

    /// The C struct's size, padding included.
    pub fn extent(self) -> usize {
        let (_, index) = self.parts();
        (self.index_offset() + index.extent()).next_multiple_of(self.align())
    }

    /// Its runs of bytes: the value, then the index (one run when they touch).
    fn blocks(self) -> Vec<Block> {
        let (value, index) = self.parts();
        let at = self.index_offset();
        if value.size() == at {
            vec![(0, at + index.size())]
        } else {
            vec![(0, value.size()), (at as isize, index.size())]
        }
    }
}

/// Runs of contiguous bytes: (displacement from the element's start, length).
pub type Block = (isize, usize);

/// How a derived type was made (`MPI_Type_get_envelope`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub addresses: Vec<Aint>,
    /// The large counts (of a type made by a large-count constructor).
    pub counts: Vec<Count>,
    pub types: Vec<Handle>,
}

/// A datatype.
#[derive(Clone, Debug)]
pub struct Datatype {
    /// Bytes of data in one element.
    pub size: usize,
    /// Lower and upper bound: the extent is `ub - lb`.
    pub lb: isize,
    pub ub: isize,
    /// Bounds of the bytes actually touched.
    pub true_lb: isize,
    pub true_ub: isize,
    /// The runs of one element, in type-map order.
    pub blocks: Blocks,
    /// The one basic kind of every element, if they are all of one kind.
    pub prim: Option<Prim>,
    /// Basic elements in one element.
    pub elements: usize,
    /// Strictest alignment of its basic elements.
    pub align: usize,
    /// One run at 0 filling the extent: data moves without packing.
    pub contiguous: bool,
    /// Shared, as the envelope: a copy of a type (a schedule keeps one) allocates
    /// nothing.
    pub name: Arc<str>,
    pub committed: bool,
    pub predefined: bool,
    /// How it was made (`None` for a predefined type).
    pub envelope: Option<Arc<Envelope>>,
    /// The types it was made from, as they were then, one per type of its
    /// envelope: `MPI_Type_get_contents` hands out new handles of them (the old
    /// handles may have been freed since).
    pub made_of: Arc<[Datatype]>,
    /// Its basic elements in order, for `external32`.
    pub sig: external::Sig,
}

/// What moving elements of a type takes: a contiguous one moves as bytes (and its
/// description is copied for nothing), another is packed (its description boxed:
/// a shape stays small, as it moves through every send and receive).
pub enum Shape {
    /// `unit`: the bytes of the basic element it is made of (a message received
    /// into it ends on a multiple of them), 1 for a type of several kinds.
    Contiguous {
        lb: isize,
        size: usize,
        unit: u32,
    },
    Typed(Box<Datatype>),
}

impl Shape {
    /// The unit a received message's length is checked against (see
    /// [`crate::request::P2p::unit`]).
    pub fn unit(&self) -> u32 {
        match self {
            Shape::Contiguous { unit, .. } => *unit,
            Shape::Typed(_) => 1,
        }
    }

    /// Bytes of data in `count` elements.
    pub fn bytes(&self, count: usize) -> crate::error::Result<usize> {
        let size = match self {
            Shape::Contiguous { size, .. } => *size,
            Shape::Typed(t) => t.size,
        };
        size.checked_mul(count).ok_or_else(|| {
            crate::error::Error::new(
                MPI_ERR_COUNT,
                format!("{count} elements of {size} bytes overflow"),
            )
        })
    }
}

impl Datatype {
    /// What moving elements of it takes.
    #[inline(always)]
    pub fn shape(&self) -> Shape {
        if self.contiguous {
            Shape::Contiguous {
                lb: self.lb,
                size: self.size,
                unit: self.element_unit(),
            }
        } else {
            Shape::Typed(Box::new(self.clone()))
        }
    }

    /// The bytes of the basic element it is made of, 1 for a type of several kinds
    /// (where [`Datatype::ends_on_element`] asks its signature).
    #[inline]
    pub fn element_unit(&self) -> u32 {
        self.prim.map_or(1, |p| p.size() as u32)
    }

    /// Whether `bytes` of it, packed, end on a basic element (`MPI_Get_elements`
    /// defined): a message that does not was sent with another type signature.
    pub fn ends_on_element(&self, bytes: usize) -> bool {
        query::elements_in(self, bytes as u64).is_some()
    }

    /// The extent: where the next element of an array starts.
    pub fn extent(&self) -> isize {
        self.ub - self.lb
    }

    /// Bytes of data in `count` elements, if that fits.
    pub fn bytes(&self, count: usize) -> Option<usize> {
        self.size.checked_mul(count)
    }

    /// A predefined type of one basic kind.
    pub fn basic(name: &str, prim: Prim) -> Datatype {
        let extent = prim.extent() as isize;
        let runs = match prim {
            Prim::Pair(p) => p.blocks(),
            p => vec![(0, p.size())],
        };
        let true_ub = runs.last().map_or(0, |b| b.0 + b.1 as isize);
        let blocks = Blocks::flat(runs);
        Datatype {
            size: prim.size(),
            lb: 0,
            ub: extent,
            true_lb: 0,
            true_ub,
            contiguous: blocks.single().is_some() && prim.size() as isize == extent,
            blocks,
            prim: Some(prim),
            elements: match prim {
                Prim::Pair(_) => 2,
                _ => 1,
            },
            align: prim.align(),
            name: name.into(),
            committed: true,
            predefined: true,
            envelope: None,
            made_of: Arc::from(Vec::new()),
            sig: prim.signature(),
        }
    }
}
