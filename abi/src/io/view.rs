//! A file view (MPI 4.1 §14.3): the bytes of a file a process sees, a displacement
//! then its filetype tiled again and again, the data counted in etypes. A position in
//! the view is a count of data bytes from its start; [`View::segments`] maps a span
//! of them to the file's bytes.

use super::datarep::Rep;
use crate::datatype::Datatype;
use crate::ffi::Handle;

/// A view: `disp`, then the filetype's runs tiled every `extent` bytes.
#[derive(Clone)]
pub struct View {
    /// Where the first tile starts, in bytes of the file.
    pub disp: u64,
    /// The etype and the filetype as set (their handles, for `MPI_File_get_view`,
    /// and the types as they were then).
    pub etype: (Handle, Datatype),
    pub filetype: (Handle, Datatype),
    /// Its data representation ([`super::datarep`]).
    pub datarep: Rep,
}

impl View {
    /// Whether the file holds its data in `external32`.
    pub fn external(&self) -> bool {
        self.datarep == Rep::External32
    }

    /// Bytes of one etype.
    pub fn etype_size(&self) -> u64 {
        self.etype.1.size as u64
    }

    /// Whether the filetype is one run filling its extent (the data lies in one
    /// piece from `disp`).
    fn dense(&self) -> bool {
        let t = &self.filetype.1;
        t.contiguous || (t.blocks.single() == Some((0, t.size)) && t.extent() == t.size as isize)
    }

    /// The file's spans holding the `len` data bytes from view position `pos`, in
    /// order: (byte offset in the file, length).
    pub fn segments(&self, pos: u64, len: u64) -> Vec<(u64, u64)> {
        if len == 0 {
            return Vec::new();
        }
        if self.dense() {
            return vec![(self.disp + pos, len)];
        }
        let t = &self.filetype.1;
        let (size, extent) = (t.size as u64, t.extent() as u64);
        let (mut tile, mut skip, mut left) = (pos / size, pos % size, len);
        let mut out: Vec<(u64, u64)> = Vec::new();
        while left > 0 {
            let base = self.disp + tile * extent;
            for (off, run) in t.blocks.iter() {
                let run = run as u64;
                if skip >= run {
                    skip -= run;
                    continue;
                }
                let at = (base as i64 + off as i64) as u64 + skip;
                let take = (run - skip).min(left);
                skip = 0;
                match out.last_mut() {
                    Some(last) if last.0 + last.1 == at => last.1 += take,
                    _ => out.push((at, take)),
                }
                left -= take;
                if left == 0 {
                    break;
                }
            }
            tile += 1;
        }
        out
    }

    /// The view position of the file's byte `end` (its size): the data bytes of the
    /// view that lie below it.
    pub fn position_below(&self, end: u64) -> u64 {
        if end <= self.disp {
            return 0;
        }
        if self.dense() {
            return end - self.disp;
        }
        let t = &self.filetype.1;
        let (size, extent) = (t.size as u64, t.extent() as u64);
        let whole = (end - self.disp) / extent;
        let base = self.disp + whole * extent;
        let part: u64 = t
            .blocks
            .iter()
            .map(|(off, run)| {
                let at = base as i64 + off as i64;
                (end as i64 - at).clamp(0, run as i64) as u64
            })
            .sum();
        whole * size + part
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{predefined, Envelope, Layout};
    use crate::ffi::*;

    fn int() -> Datatype {
        predefined::all()[MPI_INT - predefined::FIRST]
            .clone()
            .unwrap()
    }

    /// A view of every other int (a vector of 2 blocks of 1 int, stride 2), from
    /// byte 4.
    fn every_other() -> View {
        let i = int();
        let mut l = Layout::new();
        l.push(0, &i, 1);
        l.push(8, &i, 1);
        let env = Envelope {
            combiner: MPI_COMBINER_VECTOR,
            ints: vec![2, 1, 2],
            addresses: vec![],
            counts: Vec::new(),
            types: vec![MPI_INT],
        };
        let t = l.finish(false, env).unwrap();
        View {
            disp: 4,
            etype: (MPI_INT, int()),
            filetype: (0, t),
            datarep: Rep::Native,
        }
    }

    #[test]
    fn a_strided_view_maps_to_every_other_int() {
        let v = every_other();
        // The filetype: ints at 0 and 8, extent 12 (the last int ends the type).
        assert_eq!(v.filetype.1.extent(), 12);
        assert_eq!(v.segments(0, 8), vec![(4, 4), (12, 4)]);
        assert_eq!(
            v.segments(4, 8),
            vec![(12, 8)],
            "the tiles meet at 16: one span"
        );
        assert_eq!(v.segments(2, 3), vec![(6, 2), (12, 1)], "inside the runs");
        assert_eq!(v.position_below(4), 0);
        assert_eq!(v.position_below(10), 4);
        assert_eq!(v.position_below(16), 8);
        assert_eq!(v.position_below(18), 10);
    }

    #[test]
    fn a_dense_view_is_one_span() {
        let v = View {
            disp: 100,
            etype: (MPI_INT, int()),
            filetype: (MPI_INT, int()),
            datarep: Rep::Native,
        };
        assert_eq!(v.segments(8, 40), vec![(108, 40)]);
        assert_eq!(v.position_below(50), 0);
        assert_eq!(v.position_below(150), 50);
    }
}
