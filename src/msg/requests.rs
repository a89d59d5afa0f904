//! The table of live requests: a slab indexed by the low half of the request id, with
//! a generation in the high half so that a stale id never finds a newer request.

use super::state::Req;

/// A request id.
pub type ReqId = u64;

/// Ids with the top bit set are eager sends that completed when they were started:
/// they have no entry, and carry their status (length and tag) in the id itself.
const COMPLETED_SEND: u64 = 1 << 63;

/// The id of an eager send of `len` bytes with `tag` that completed at once.
pub fn completed_send(len: usize, tag: i32) -> ReqId {
    debug_assert!(len < 1 << 31, "eager messages are small");
    COMPLETED_SEND | (len as u64) << 32 | u64::from(tag as u32)
}

/// Length and tag of such an id.
pub fn as_completed_send(id: ReqId) -> Option<(usize, i32)> {
    (id & COMPLETED_SEND != 0).then_some((((id >> 32) & 0x7fff_ffff) as usize, id as u32 as i32))
}

/// Live requests.
#[derive(Default)]
pub struct Requests {
    slots: Vec<(u32, Option<Req>)>,
    free: Vec<u32>,
}

fn split(id: ReqId) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

impl Requests {
    /// Add the request `make` builds; its id. (Built only once its slot is found
    /// empty, it is written straight into the table: a request built before, on the
    /// stack, was copied from there by loads that waited for older stores, such as a
    /// send's into a ring.)
    #[inline(always)]
    pub fn insert(&mut self, make: impl FnOnce() -> Req) -> ReqId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.0 = slot.0.wrapping_add(1);
        // A free slot is empty (requests leave it through `take`).
        if slot.1.is_some() {
            slot.1 = None;
        }
        slot.1 = Some(make());
        (u64::from(slot.0) << 32) | u64::from(index)
    }

    /// The request `id`, if live.
    pub fn get(&self, id: ReqId) -> Option<&Req> {
        let (i, generation) = split(id);
        match self.slots.get(i) {
            Some((g, Some(r))) if *g == generation => Some(r),
            _ => None,
        }
    }

    /// The request `id`, if live, writable.
    pub fn get_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        let (i, generation) = split(id);
        match self.slots.get_mut(i) {
            Some((g, Some(r))) if *g == generation => Some(r),
            _ => None,
        }
    }

    /// Take request `id` out.
    pub fn remove(&mut self, id: ReqId) -> Option<Req> {
        let (i, generation) = split(id);
        match self.slots.get_mut(i) {
            Some((g, r @ Some(_))) if *g == generation => {
                self.free.push(i as u32);
                r.take()
            }
            _ => None,
        }
    }

    /// Take request `id` out if it has completed: `Err` when it is not live,
    /// `Ok(None)` while it runs.
    #[inline]
    pub fn take_completed(&mut self, id: ReqId) -> Result<Option<Req>, ()> {
        let (i, generation) = split(id);
        match self.slots.get_mut(i) {
            Some((g, r @ Some(_))) if *g == generation => {
                if r.as_ref().is_some_and(|r| r.outcome.is_none()) {
                    return Ok(None);
                }
                self.free.push(i as u32);
                Ok(r.take())
            }
            _ => Err(()),
        }
    }

    /// Every live request with its id.
    pub fn iter(&self) -> impl Iterator<Item = (ReqId, &Req)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, (g, r))| r.as_ref().map(|r| ((u64::from(*g) << 32) | i as u64, r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Status;

    fn req() -> Req {
        Req::new(None)
    }

    #[test]
    fn completed_sends_carry_their_status() {
        for (len, tag) in [(0, 0), (4096, 7), ((1 << 31) - 1, i32::MAX)] {
            assert_eq!(
                as_completed_send(completed_send(len, tag)),
                Some((len, tag))
            );
        }
        let mut r = Requests::default();
        assert_eq!(as_completed_send(r.insert(req)), None);
    }

    #[test]
    fn stale_ids_find_nothing() {
        let mut r = Requests::default();
        let a = r.insert(req);
        assert!(r.get(a).is_some());
        assert!(r.remove(a).is_some());
        let b = r.insert(req);
        assert_ne!(a, b, "the slot is reused under a new generation");
        assert!(r.get(a).is_none() && r.get_mut(a).is_none() && r.remove(a).is_none());
        assert_eq!(r.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![b]);
        assert!(r.take_completed(a).is_err());
        assert!(matches!(r.take_completed(b), Ok(None)), "still running");
        r.get_mut(b).unwrap().outcome = Some(Ok(Status {
            source: 1,
            tag: 2,
            len: 3,
        }));
        assert!(matches!(r.take_completed(b), Ok(Some(_))));
        assert!(r.take_completed(b).is_err(), "taken once");
    }
}
