//! Making derived datatypes: every constructor places copies of older types at
//! displacements, and the new type's runs, bounds and kind follow from that.

use super::external::Sig;
use super::{Block, Datatype, Envelope, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;
use std::sync::Arc;

/// The elements of a type being made: copies of older types at byte displacements.
#[derive(Default)]
pub struct Layout<'a> {
    parts: Vec<(isize, &'a Datatype, usize)>,
}

impl<'a> Layout<'a> {
    /// An empty layout.
    pub fn new() -> Self {
        Layout { parts: Vec::new() }
    }

    /// `count` elements of `ty`, one after the other from byte `disp`.
    pub fn push(&mut self, disp: isize, ty: &'a Datatype, count: usize) {
        self.parts.push((disp, ty, count));
    }

    /// The new type. `padded`: round its extent up to its alignment, as a C struct
    /// (`MPI_Type_create_struct`).
    pub fn finish(self, padded: bool, envelope: Envelope) -> Result<Datatype> {
        let too_big = || {
            Error::new(
                MPI_ERR_COUNT,
                "the datatype's size overflows the address space",
            )
        };
        let mut blocks: Vec<Block> = Vec::new();
        let (mut size, mut elements) = (0usize, 0usize);
        let mut bounds: Option<(isize, isize)> = None;
        let mut prim: Option<Option<Prim>> = None;
        let mut align = 1;
        for &(disp, ty, count) in &self.parts {
            if count == 0 {
                continue;
            }
            size = ty
                .size
                .checked_mul(count)
                .and_then(|s| s.checked_add(size))
                .ok_or_else(too_big)?;
            elements = ty
                .elements
                .checked_mul(count)
                .and_then(|e| e.checked_add(elements))
                .ok_or_else(too_big)?;
            align = align.max(ty.align);
            prim = Some(match prim {
                None => ty.prim,
                Some(p) if p == ty.prim => p,
                Some(_) => None,
            });
            let extent = ty.extent();
            let last = isize::try_from(count - 1)
                .ok()
                .and_then(|c| c.checked_mul(extent))
                .and_then(|o| o.checked_add(disp))
                .ok_or_else(too_big)?;
            let lb = (disp + ty.lb).min(last + ty.lb);
            let ub = (disp + ty.ub).max(last + ty.ub);
            bounds = Some(match bounds {
                None => (lb, ub),
                Some((l, u)) => (l.min(lb), u.max(ub)),
            });
            // Copies of a type without gaps (its one run as long as its extent) touch
            // one another: one run for all of them, however many.
            if let [(off, len)] = ty.blocks[..] {
                if len as isize == extent {
                    let all = len.checked_mul(count).ok_or_else(too_big)?;
                    push_run(&mut blocks, disp + off, all);
                    continue;
                }
            }
            if blocks
                .len()
                .saturating_add(count.saturating_mul(ty.blocks.len()))
                > MAX_BLOCKS
            {
                return Err(too_many_runs());
            }
            for k in 0..count as isize {
                let at = disp + k * extent;
                for &(off, len) in ty.blocks.iter() {
                    push_run(&mut blocks, at + off, len);
                }
            }
        }
        let (mut lb, mut ub) = bounds.unwrap_or((0, 0));
        if padded {
            let extent = ub - lb;
            let rem = extent.rem_euclid(align as isize);
            if rem != 0 {
                ub += align as isize - rem;
            }
        }
        if self.parts.iter().all(|p| p.2 == 0) {
            lb = 0;
            ub = 0;
        }
        let true_lb = blocks.iter().map(|b| b.0).min().unwrap_or(0);
        let true_ub = blocks.iter().map(|b| b.0 + b.1 as isize).max().unwrap_or(0);
        let contiguous = match blocks[..] {
            [] => size == 0 && lb == ub,
            [(0, len)] => lb == 0 && ub == len as isize,
            _ => false,
        };
        Ok(Datatype {
            size,
            lb,
            ub,
            true_lb,
            true_ub,
            blocks: Arc::from(blocks),
            prim: prim.flatten(),
            elements,
            align,
            contiguous,
            name: "".into(),
            committed: false,
            predefined: false,
            envelope: Some(Arc::new(envelope)),
            made_of: Arc::from(Vec::new()),
            sig: Sig::seq(
                self.parts
                    .iter()
                    .filter(|p| p.2 > 0)
                    .map(|&(_, ty, count)| (ty.sig.clone(), count))
                    .collect(),
            ),
        })
    }
}

/// Most runs of bytes a flattened type may hold.
pub const MAX_BLOCKS: usize = 1 << 24;

/// The error of a type of more than [`MAX_BLOCKS`] runs.
pub fn too_many_runs() -> Error {
    Error::new(
        MPI_ERR_TYPE,
        format!("the datatype has more than {MAX_BLOCKS} separate runs of bytes: this library flattens types and cannot hold it"),
    )
}

/// Append a run, joining it to the last when they touch.
fn push_run(blocks: &mut Vec<Block>, at: isize, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(last) = blocks.last_mut() {
        if last.0 + last.1 as isize == at {
            last.1 += len;
            return;
        }
    }
    blocks.push((at, len));
}

/// `old` with new bounds (`MPI_Type_create_resized`).
pub fn resized(old: &Datatype, lb: isize, extent: isize, envelope: Envelope) -> Datatype {
    let mut t = old.clone();
    t.lb = lb;
    t.ub = lb + extent;
    t.contiguous = matches!(t.blocks[..], [(0, len)] if lb == 0 && extent == len as isize);
    t.name = "".into();
    t.committed = false;
    t.predefined = false;
    t.envelope = Some(Arc::new(envelope));
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::predefined;

    fn ty(h: Handle) -> Datatype {
        predefined::all()[h - predefined::FIRST].clone().unwrap()
    }

    fn env() -> Envelope {
        Envelope {
            combiner: MPI_COMBINER_CONTIGUOUS,
            ints: vec![],
            addresses: vec![],
            types: vec![],
        }
    }

    #[test]
    fn a_vector_of_ints() {
        let int = ty(MPI_INT);
        let mut l = Layout::new();
        // vector(3, 2, 4, MPI_INT): blocks of two ints every four.
        for i in 0..3 {
            l.push(i * 16, &int, 2);
        }
        let t = l.finish(false, env()).unwrap();
        assert_eq!(&t.blocks[..], &[(0, 8), (16, 8), (32, 8)]);
        assert_eq!((t.size, t.lb, t.ub, t.extent()), (24, 0, 40, 40));
        assert_eq!(
            t.prim,
            Some(Prim::Int {
                bytes: 4,
                signed: true
            })
        );
        assert!(!t.contiguous);
        let mut l = Layout::new();
        l.push(0, &t, 2);
        let tt = l.finish(false, env()).unwrap();
        assert_eq!(
            tt.blocks.len(),
            5,
            "the last run of one joins the first of the next"
        );
        assert_eq!(tt.extent(), 80);
    }

    #[test]
    fn a_struct_is_padded_to_its_alignment() {
        let (double, ch) = (ty(MPI_DOUBLE), ty(MPI_CHAR));
        let mut l = Layout::new();
        l.push(0, &double, 1);
        l.push(8, &ch, 1);
        let t = l.finish(true, env()).unwrap();
        assert_eq!((t.size, t.extent()), (9, 16));
        assert_eq!(t.prim, None, "mixed kinds");
        assert_eq!(&t.blocks[..], &[(0, 9)]);
    }

    #[test]
    fn contiguous_types_are_recognised() {
        let int = ty(MPI_INT);
        let mut l = Layout::new();
        l.push(0, &int, 10);
        let t = l.finish(false, env()).unwrap();
        assert!(t.contiguous);
        assert_eq!(t.size, 40);
        assert!(!resized(&t, 0, 48, env()).contiguous);
        assert!(ty(MPI_DOUBLE_INT).blocks.len() == 1 && !ty(MPI_DOUBLE_INT).contiguous);
        assert_eq!(ty(MPI_SHORT_INT).blocks.len(), 2);
        assert_eq!(
            (
                ty(MPI_LONG_DOUBLE_INT).size,
                ty(MPI_LONG_DOUBLE_INT).extent()
            ),
            (20, 32)
        );
    }
}
