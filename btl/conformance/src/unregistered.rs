//! The checks of put and get with a side registered with nothing: this process's
//! ([`Local::unregistered`]) and the peer's ([`Remote::unregistered`]).

use crate::pattern::fill;
use crate::rdma::{check_slot, counting, ALL};
use crate::{remote_of, Buffer, Peer};
use rbtl_btl::{
    AtomicKind, AtomicOp, Attributes, BtlFlags, Error, Local, Remote, RemoteAtomic, Transfer,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The bytes of each side's buffers.
const LEN: usize = 4096;

/// As much of [`LEN`] as one put and one get take, in whole alignment units.
fn transfer_len(attrs: &Attributes) -> usize {
    let align = attrs.put_alignment.max(attrs.get_alignment).max(1);
    LEN.min(attrs.put_limit).min(attrs.get_limit) / align * align
}

/// Starts `get` and `put`, each where the module offers it, with a callback counting
/// on `done`; `outcome` judges each call's result, named "a get" or "a put": whether
/// it started (its callback will run). How many started.
fn start_get_and_put(
    p: &mut Peer<'_>,
    (get, put): (&Transfer<'_>, &Transfer<'_>),
    done: &Arc<AtomicUsize>,
    outcome: impl Fn(&str, rbtl_btl::Result<()>) -> bool,
) -> usize {
    let flags = p.module.attributes().flags;
    let mut started = 0;
    if flags.contains(BtlFlags::GET) {
        started += usize::from(outcome("a get", p.module.get(get, counting(done))));
    }
    if flags.contains(BtlFlags::PUT) {
        started += usize::from(outcome("a put", p.module.put(put, counting(done))));
    }
    started
}

/// A put and a get whose local side is unregistered ([`Local::unregistered`]): where
/// the module needs registrations ([`BtlFlags::REGISTRATION_REQUIRED`]) each is
/// refused with [`Error::Unregistered`] and moves nothing; elsewhere the data lands
/// as with a registered one.
pub fn unregistered_local_side(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let required = attrs.flags.contains(BtlFlags::REGISTRATION_REQUIRED);
    let len = transfer_len(&attrs);
    let ep = p.endpoint;
    // What the peer gets from here, and where it puts.
    let source = Buffer::new(p.module, ep, LEN, ALL);
    let target = Buffer::new(p.module, ep, LEN, ALL);
    // SAFETY: nobody has the address of `source` yet; plain writes are fine.
    fill(
        unsafe { std::slice::from_raw_parts_mut(source.addr(0) as *mut u8, LEN) },
        7,
    );
    let mut ad = source.advertise();
    ad.extend_from_slice(&target.advertise());
    let peer = p.swap(&ad);
    let half = peer.len() / 2;
    let ((src, src_h), (dst, dst_h)) = (remote_of(&peer[..half]), remote_of(&peer[half..]));
    let mut plain = crate::Bytes::new(2 * LEN);
    fill(&mut plain[LEN..], 8);
    let (into, from) = (plain.as_mut_ptr() as usize, plain.as_ptr() as usize + LEN);
    let done = Arc::new(AtomicUsize::new(0));
    let outcome = |what: &str, r: rbtl_btl::Result<()>| match r {
        Ok(()) if !required => true,
        Err(Error::Unregistered) if required => false,
        other => panic!("{what} with an unregistered local side: {other:?}"),
    };
    // SAFETY: `plain` lives, untouched, until the flush below has completed the get
    // and the put.
    let (get_into, put_from) = unsafe { (Local::unregistered(into), Local::unregistered(from)) };
    let get = Transfer::new(ep, get_into, Remote::new(src, &src_h), len);
    let put = Transfer::new(ep, put_from, Remote::new(dst, &dst_h), len);
    let started = start_get_and_put(p, (&get, &put), &done, outcome);
    p.module.flush(Some(ep)).expect("flush");
    assert_eq!(done.load(Ordering::SeqCst), started, "one callback each");
    if attrs.flags.contains(BtlFlags::GET) {
        // SAFETY: the get completed (flushed); the bytes are ours.
        let got = unsafe { crate::buffer::snapshot(into, LEN) };
        check_slot(&got, 0, len, !required, 7, "an unregistered get");
    }
    // The peer's put into `target` has completed once it says so.
    let put_by_peer = attrs.flags.contains(BtlFlags::PUT) && !required;
    p.barrier();
    check_slot(
        &target.snapshot(),
        0,
        len,
        put_by_peer,
        8,
        "an unregistered put",
    );
    p.barrier();
}

/// A put and a get that name the peer's memory by its address alone
/// ([`Remote::unregistered`]), out of and into memory the peer never registered: where
/// the module offers it ([`BtlFlags::UNREGISTERED_REMOTE`]) the data lands as with a
/// registration; elsewhere each is refused with [`Error::UnregisteredRemote`] and moves
/// nothing. An atomic so named is refused everywhere.
pub fn unregistered_remote_side(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let offered = attrs.flags.contains(BtlFlags::UNREGISTERED_REMOTE);
    let len = transfer_len(&attrs);
    let ep = p.endpoint;
    // What the peer reaches here: a source to get from, then a target to put into and
    // a word for an atomic, all plain memory.
    let mut plain = crate::Bytes::new(2 * LEN + 8);
    fill(&mut plain[..LEN], 5);
    let base = plain.as_ptr() as u64;
    let peer = p.swap(&base.to_le_bytes());
    let peer_base = u64::from_le_bytes(peer[..8].try_into().expect("an address"));
    // This side, registered: where a get lands, then what a put sends.
    let local = Buffer::new(p.module, ep, 2 * LEN, ALL);
    // SAFETY: nobody has the address of `local` yet; plain writes are fine.
    fill(
        unsafe { std::slice::from_raw_parts_mut(local.addr(LEN) as *mut u8, LEN) },
        6,
    );
    let done = Arc::new(AtomicUsize::new(0));
    let outcome = |what: &str, r: rbtl_btl::Result<()>| match r {
        Ok(()) if offered => true,
        Err(Error::UnregisteredRemote) if !offered => false,
        other => panic!("{what} by the peer's address alone: {other:?}"),
    };
    // The peer keeps `plain` alive, its source unchanged, until the second barrier,
    // after this side's flush.
    // SAFETY: the peer's source and target, as above.
    let (get_from, put_into) = unsafe {
        (
            Remote::unregistered(peer_base),
            Remote::unregistered(peer_base + LEN as u64),
        )
    };
    let get = Transfer::new(ep, Local::new(local.addr(0), &local.handle), get_from, len);
    let put = Transfer::new(
        ep,
        Local::new(local.addr(LEN), &local.handle),
        put_into,
        len,
    );
    let started = start_get_and_put(p, (&get, &put), &done, outcome);
    if attrs.flags.contains(BtlFlags::ATOMIC_OPS) {
        // SAFETY: the peer's word, as above (and refused).
        let word = unsafe { Remote::unregistered(peer_base + 2 * LEN as u64) };
        let add = RemoteAtomic::new(ep, word, AtomicKind::Op(AtomicOp::Add, 1));
        match p.module.atomic(&add, counting(&done)) {
            Err(Error::UnregisteredRemote) => {}
            other => panic!("an atomic by the peer's address alone: {other:?}"),
        }
    }
    p.module.flush(Some(ep)).expect("flush");
    assert_eq!(done.load(Ordering::SeqCst), started, "one callback each");
    if attrs.flags.contains(BtlFlags::GET) {
        let got = &local.snapshot()[..LEN];
        check_slot(got, 0, len, offered, 5, "a get by address");
    }
    // The peer's put into our target has completed once it says so.
    let put_by_peer = attrs.flags.contains(BtlFlags::PUT) && offered;
    p.barrier();
    // SAFETY: our own live bytes; the peer's transfers into them have completed.
    let target = unsafe { crate::buffer::snapshot(base as usize + LEN, LEN + 8) };
    check_slot(
        &target,
        0,
        len,
        put_by_peer,
        6,
        "a put by address (and an atomic)",
    );
    p.barrier();
    drop(plain);
}
