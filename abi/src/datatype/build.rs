//! Making derived datatypes: every constructor places copies of older types at
//! displacements, and the new type's runs, bounds and kind follow from that.

use super::external::Sig;
use super::{Block, Blocks, Datatype, Envelope, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;
use std::sync::Arc;

/// The elements of a type being made: copies of older types at byte displacements.
#[derive(Default)]
pub struct Layout<'a> {
    /// (displacement, type, count, bytes from one copy to the next).
    parts: Vec<(isize, &'a Datatype, usize, isize)>,
}

impl<'a> Layout<'a> {
    /// An empty layout.
    pub fn new() -> Self {
        Layout { parts: Vec::new() }
    }

    /// `count` elements of `ty`, one after the other from byte `disp`.
    pub fn push(&mut self, disp: isize, ty: &'a Datatype, count: usize) {
        self.parts.push((disp, ty, count, ty.extent()));
    }

    /// `count` elements of `ty` from byte `disp`, each `stride` bytes after the
    /// one before.
    pub fn push_strided(&mut self, disp: isize, ty: &'a Datatype, count: usize, stride: isize) {
        self.parts.push((disp, ty, count, stride));
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
        let (mut size, mut elements) = (0usize, 0usize);
        let mut bounds: Option<(isize, isize)> = None;
        let mut prim: Option<Option<Prim>> = None;
        let mut align = 1;
        for &(disp, ty, count, stride) in &self.parts {
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
            let last = isize::try_from(count - 1)
                .ok()
                .and_then(|c| c.checked_mul(stride))
                .and_then(|o| o.checked_add(disp))
                .ok_or_else(too_big)?;
            let lb = (disp + ty.lb).min(last + ty.lb);
            let ub = (disp + ty.ub).max(last + ty.ub);
            bounds = Some(match bounds {
                None => (lb, ub),
                Some((l, u)) => (l.min(lb), u.max(ub)),
            });
        }
        let blocks = self.runs()?;
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
        let (true_lb, true_ub) = blocks.bounds().unwrap_or((0, 0));
        let contiguous = match blocks.single() {
            None => blocks.is_empty() && size == 0 && lb == ub,
            Some((0, len)) => lb == 0 && ub == len as isize,
            Some(_) => false,
        };
        Ok(Datatype {
            size,
            lb,
            ub,
            true_lb,
            true_ub,
            blocks,
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
                    .map(|&(_, ty, count, _)| (ty.sig.clone(), count))
                    .collect(),
            ),
        })
    }

    /// The runs of the parts (whose bounds have been checked): listed, or, when one
    /// part alone would make more than [`FLAT_MOST`] of them, its type's runs and
    /// their stride.
    fn runs(&self) -> Result<Blocks> {
        let parts: Vec<_> = self.parts.iter().filter(|p| p.2 > 0).collect();
        // Copies of a type without gaps (its one run as long as the stride) touch one
        // another: one run for all of them, however many.
        let touching = |ty: &Datatype, stride: isize| {
            ty.blocks
                .single()
                .filter(|&(_, len)| len as isize == stride)
        };
        let total = parts.iter().fold(0usize, |n, &&(_, ty, count, stride)| {
            let runs = match touching(ty, stride) {
                Some(_) => 1,
                None => ty.blocks.len().saturating_mul(count),
            };
            n.saturating_add(runs)
        });
        if let [&(disp, ty, count, stride)] = parts[..] {
            if total > FLAT_MOST && touching(ty, stride).is_none() {
                return Ok(ty.blocks.repeated(count, stride, disp));
            }
        }
        if total > MAX_BLOCKS {
            return Err(too_many_runs());
        }
        let mut blocks: Vec<Block> = Vec::new();
        for &&(disp, ty, count, stride) in &parts {
            if let Some((off, len)) = touching(ty, stride) {
                // (Within the size, which has been checked.)
                push_run(&mut blocks, disp + off, len * count);
                continue;
            }
            for k in 0..count as isize {
                let at = disp + k * stride;
                for (off, len) in ty.blocks.iter() {
                    push_run(&mut blocks, at + off, len);
                }
            }
        }
        Ok(Blocks::flat(blocks))
    }
}

/// Most runs a type lists one by one when it is made of one older type: beyond,
/// it keeps that type's runs and their stride ([`Blocks::repeated`]).
pub const FLAT_MOST: usize = 1 << 16;

/// Most runs a type made of several parts may list.
pub const MAX_BLOCKS: usize = 1 << 24;

/// The error of a type of more than [`MAX_BLOCKS`] runs in several parts.
pub fn too_many_runs() -> Error {
    Error::new(
        MPI_ERR_TYPE,
        format!("the datatype's parts make more than {MAX_BLOCKS} separate runs of bytes: this library lists the runs of a type made of several older types and cannot hold it"),
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
    t.contiguous = matches!(t.blocks.single(), Some((0, len)) if lb == 0 && extent == len as isize);
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
            counts: Vec::new(),
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
        assert_eq!(
            t.blocks.iter().collect::<Vec<_>>(),
            [(0, 8), (16, 8), (32, 8)]
        );
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
        assert_eq!(t.blocks.single(), Some((0, 9)));
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
