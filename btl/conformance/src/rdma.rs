//! The checks of put, get and flush: alignments, completion, and the checks a
//! transport makes of remote access.

use crate::pattern::{fill, matches_pattern};
use crate::retry::retry;
use crate::{remote_of, Buffer, Peer};
use rbtl_btl::{
    Access, BtlFlags, Error, Local, Module, RdmaCallback, Remote, RemoteHandle, Transfer,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A completion callback that checks the status and counts into `done`.
pub(crate) fn counting(done: &Arc<AtomicUsize>) -> RdmaCallback {
    let done = done.clone();
    Box::new(move |_, c| {
        c.status.expect("rdma status");
        done.fetch_add(1, Ordering::SeqCst);
    })
}

/// Case `case`'s slot after a put or get of `size` bytes at `off`: the pattern there
/// if the operation was accepted, and zeros everywhere else.
pub(crate) fn check_slot(
    slot: &[u8],
    off: usize,
    size: usize,
    landed: bool,
    case: usize,
    what: &str,
) {
    if landed {
        assert!(
            matches_pattern(&slot[off..off + size], case),
            "{what} case {case} data"
        );
    } else {
        assert!(
            slot[off..off + size].iter().all(|&b| b == 0),
            "{what} case {case} was refused yet wrote its range"
        );
    }
    assert!(
        slot[..off].iter().all(|&b| b == 0),
        "{what} case {case} wrote before its range"
    );
    assert!(
        slot[off + size..].iter().all(|&b| b == 0),
        "{what} case {case} wrote past its range"
    );
}

/// Every access, local and remote.
pub(crate) const ALL: Access = Access::all();
const SLOT: usize = 4096 + 16;
const ALIGN_SIZES: [usize; 5] = [1, 7, 8, 100, 4096];

/// Put and get at every local and remote alignment 0..8 and several sizes; data lands
/// exactly where asked and nowhere else; callbacks run once each.
pub fn put_get_every_alignment(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let cases: Vec<(usize, usize, usize)> = (0..8)
        .flat_map(|lo| (0..8).flat_map(move |ro| ALIGN_SIZES.map(|s| (lo, ro, s))))
        .collect();
    let len = cases.len() * SLOT;
    let ep = p.endpoint;
    let mut local = Buffer::new(p.module, ep, len, ALL);
    let target = Buffer::new(p.module, ep, len, ALL);
    // Phase 1: put into the peer's target buffer, slot by case.
    if attrs.flags.contains(BtlFlags::PUT) {
        for (i, &(lo, _, size)) in cases.iter().enumerate() {
            fill(&mut local.mem[i * SLOT + lo..i * SLOT + lo + size], i);
        }
        let peer = p.swap(&target.advertise());
        let (raddr, rh) = remote_of(&peer);
        let ok = start_every_case(p, true, &cases, &local, (raddr, &rh));
        // Which of the peer's puts into our target were accepted (its refusals depend on
        // its local offsets too).
        let landed = p.swap(&ok.iter().map(|&o| u8::from(o)).collect::<Vec<u8>>());
        let got = target.snapshot();
        for (i, &(_, ro, size)) in cases.iter().enumerate() {
            check_slot(
                &got[i * SLOT..(i + 1) * SLOT],
                ro,
                size,
                landed[i] == 1,
                i,
                "put",
            );
        }
    }
    // Phase 2: get from the peer's buffer, whose slots hold patterns.
    if attrs.flags.contains(BtlFlags::GET) {
        let source = Buffer::new(p.module, ep, len, ALL);
        // SAFETY: nobody has the address of `source` yet; plain writes are fine.
        let src = unsafe { std::slice::from_raw_parts_mut(source.addr(0) as *mut u8, len) };
        for (i, &(_, ro, size)) in cases.iter().enumerate() {
            fill(&mut src[i * SLOT + ro..i * SLOT + ro + size], i);
        }
        local.mem.fill(0);
        let peer = p.swap(&source.advertise());
        let (raddr, rh) = remote_of(&peer);
        let ok = start_every_case(p, false, &cases, &local, (raddr, &rh));
        let got = local.snapshot();
        for (i, &(lo, _, size)) in cases.iter().enumerate() {
            check_slot(&got[i * SLOT..(i + 1) * SLOT], lo, size, ok[i], i, "get");
        }
        p.barrier();
        drop(source);
    }
    drop(target);
}

/// Start a put (`put`) or a get of each case `(lo, ro, size)`: `size` bytes between
/// offset `lo` of its slot of `local` and offset `ro` of its slot of the peer's buffer
/// at `raddr`; then flush. Which cases were accepted: a case is refused only with
/// `NotAvailable`, and only where it breaks the module's alignment or limit; every
/// accepted one calls back once.
fn start_every_case(
    p: &mut Peer<'_>,
    put: bool,
    cases: &[(usize, usize, usize)],
    local: &Buffer,
    (raddr, rh): (u64, &RemoteHandle),
) -> Vec<bool> {
    let attrs = p.module.attributes().clone();
    let (what, alignment, limit) = if put {
        ("put", attrs.put_alignment, attrs.put_limit)
    } else {
        ("get", attrs.get_alignment, attrs.get_limit)
    };
    let ep = p.endpoint;
    let done = Arc::new(AtomicUsize::new(0));
    let mut ok = vec![false; cases.len()];
    for (i, &(lo, ro, size)) in cases.iter().enumerate() {
        let l = local.addr(i * SLOT + lo);
        let r = raddr + (i * SLOT + ro) as u64;
        let t = Transfer::new(ep, Local::new(l, &local.handle), Remote::new(r, rh), size);
        let res = if put {
            p.module.put(&t, counting(&done))
        } else {
            p.module.get(&t, counting(&done))
        };
        let aligned = (l | r as usize | size) % alignment == 0;
        match res {
            Ok(()) => ok[i] = true,
            Err(Error::NotAvailable(_)) if !aligned || size > limit => {}
            Err(e) => panic!("{what} lo={lo} ro={ro} size={size}: {e}"),
        }
    }
    p.module.flush(Some(ep)).expect("flush");
    let expected = ok.iter().filter(|&&o| o).count();
    assert_eq!(
        done.load(Ordering::SeqCst),
        expected,
        "one {what} callback each"
    );
    ok
}

/// Many puts in flight, then one flush: every callback has run and all data is there.
pub fn flush_completes_everything(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    if !attrs.flags.contains(BtlFlags::PUT) {
        return;
    }
    const N: usize = 256;
    const SIZE: usize = 1024;
    let ep = p.endpoint;
    let mut local = Buffer::new(p.module, ep, N * SIZE, ALL);
    let target = Buffer::new(p.module, ep, N * SIZE, ALL);
    fill(&mut local.mem, N);
    let peer = p.swap(&target.advertise());
    let (raddr, rh) = remote_of(&peer);
    let done = Arc::new(AtomicUsize::new(0));
    for i in 0..N {
        let off = i * SIZE;
        let (l, r, h) = (local.addr(off), raddr + off as u64, &local.handle);
        // A refused put drops its callback: each try gets a fresh one.
        retry(p, "put", |m| {
            m.put(
                &Transfer::new(ep, Local::new(l, h), Remote::new(r, &rh), SIZE),
                counting(&done),
            )
        });
    }
    p.module.flush(None).expect("flush");
    assert_eq!(done.load(Ordering::SeqCst), N, "flush ran every callback");
    p.barrier();
    assert!(
        matches_pattern(&target.snapshot(), N),
        "all data visible after flush"
    );
    p.barrier();
}

/// Put and get outside the remote registration, without the access they need, or with
/// a malformed handle (or a deregistered one, where the module checks that at the
/// call) are refused, and the target is unchanged.
pub fn remote_access_is_checked(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    if !attrs.flags.intersects(BtlFlags::PUT | BtlFlags::GET) {
        return;
    }
    const LEN: usize = 4096;
    let ep = p.endpoint;
    let local = Buffer::new(p.module, ep, LEN, ALL);
    let read_only = Buffer::new(p.module, ep, LEN, Access::LOCAL_READ | Access::REMOTE_READ);
    let write_only = Buffer::new(
        p.module,
        ep,
        LEN,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let mut dead = Buffer::new(p.module, ep, LEN, ALL);
    for b in [&read_only, &write_only, &dead] {
        // SAFETY: no operation is in flight on these buffers yet.
        let m = unsafe { std::slice::from_raw_parts_mut(b.addr(0) as *mut u8, LEN) };
        fill(m, 3);
    }
    let mut ad = read_only.advertise();
    ad.extend(write_only.advertise());
    ad.extend(dead.advertise());
    let hs = 8 + read_only.handle.remote().as_bytes().len();
    p.module
        .deregister_mem(&mut dead.handle)
        .expect("deregister");
    let peer = p.swap(&ad);
    let (ro, ro_h) = remote_of(&peer[..hs]);
    let (wo, wo_h) = remote_of(&peer[hs..2 * hs]);
    let (dd, dd_h) = remote_of(&peer[2 * hs..]);
    let l = local.addr(0);
    let nop = || -> RdmaCallback { Box::new(|_, _| panic!("refused operation completed")) };
    let put = |m: &mut dyn Module, r: u64, h: &RemoteHandle, size: usize| {
        m.put(
            &Transfer::new(ep, Local::new(l, &local.handle), Remote::new(r, h), size),
            nop(),
        )
    };
    if attrs.flags.contains(BtlFlags::PUT) {
        let e = put(p.module, wo + LEN as u64 - 8, &wo_h, 16);
        assert!(
            matches!(e, Err(Error::OutOfRange { side: "remote", .. })),
            "past the end: {e:?}"
        );
        // (Addresses and sizes that are multiples of 8, so that an alignment a module
        // states does not refuse them first.)
        let e = put(p.module, wo - 8, &wo_h, 8);
        assert!(
            matches!(e, Err(Error::OutOfRange { side: "remote", .. })),
            "before: {e:?}"
        );
        let e = put(p.module, ro, &ro_h, 8);
        assert!(
            matches!(e, Err(Error::AccessDenied { side: "remote", .. })),
            "read-only: {e:?}"
        );
        if attrs.flags.contains(BtlFlags::REMOTE_HANDLES_CHECKED) {
            let e = put(p.module, dd, &dd_h, 8);
            assert!(
                matches!(e, Err(Error::BadRemoteHandle(_))),
                "deregistered: {e:?}"
            );
        }
        let garbage = RemoteHandle::from_bytes(&[7; 5]).unwrap();
        let e = put(p.module, wo, &garbage, 8);
        assert!(
            matches!(
                e,
                Err(Error::MalformedHandle(_)) | Err(Error::BadRemoteHandle(_))
            ),
            "garbage: {e:?}"
        );
        let e = p.module.put(
            &Transfer::new(
                ep,
                Local::new(l + LEN - 8, &local.handle),
                Remote::new(wo, &wo_h),
                16,
            ),
            nop(),
        );
        assert!(
            matches!(e, Err(Error::OutOfRange { side: "local", .. })),
            "local past end: {e:?}"
        );
    }
    if attrs.flags.contains(BtlFlags::GET) {
        let e = p.module.get(
            &Transfer::new(ep, Local::new(l, &local.handle), Remote::new(wo, &wo_h), 8),
            nop(),
        );
        assert!(
            matches!(e, Err(Error::AccessDenied { side: "remote", .. })),
            "write-only: {e:?}"
        );
        let e = p.module.get(
            &Transfer::new(
                ep,
                Local::new(l, &local.handle),
                Remote::new(ro + LEN as u64, &ro_h),
                8,
            ),
            nop(),
        );
        assert!(
            matches!(e, Err(Error::OutOfRange { .. })),
            "get past end: {e:?}"
        );
        let e = p.module.get(
            &Transfer::new(
                ep,
                Local::new(read_only.addr(0), &read_only.handle),
                Remote::new(ro, &ro_h),
                8,
            ),
            nop(),
        );
        assert!(
            matches!(e, Err(Error::AccessDenied { side: "local", .. })),
            "get into a local buffer without LOCAL_WRITE: {e:?}"
        );
    }
    p.module.flush(None).expect("flush");
    p.barrier();
    for b in [&read_only, &write_only] {
        assert!(
            matches_pattern(&b.snapshot(), 3),
            "refused operations left the target unchanged"
        );
    }
    p.barrier();
}

/// Where the module offers it ([`BtlFlags::UNATTENDED_RDMA`]), a get flagged
/// [`RdmaFlags::UNATTENDED`](rbtl_btl::RdmaFlags::UNATTENDED) completes while the target
/// process takes no part: one side (the lower process id) gets the other's buffer
/// while that side sleeps without progressing, then changes its buffer; the getter
/// must have read the buffer as it was (a get the target serves would be served only
/// after the change).
pub fn unattended_get(p: &mut Peer<'_>) {
    const LEN: usize = 4096;
    const ASLEEP: std::time::Duration = std::time::Duration::from_millis(500);
    let flags = p.module.attributes().flags;
    if !flags.contains(BtlFlags::UNATTENDED_RDMA | BtlFlags::GET) {
        return;
    }
    let ep = p.endpoint;
    let me = std::process::id();
    let other = p.swap(&me.to_le_bytes());
    let getter = me < u32::from_le_bytes(other[..4].try_into().expect("a process id"));
    let source = Buffer::new(p.module, ep, LEN, ALL);
    let local = Buffer::new(p.module, ep, LEN, ALL);
    // SAFETY: nobody has the address of `source` yet; plain writes are fine.
    let src = unsafe { std::slice::from_raw_parts_mut(source.addr(0) as *mut u8, LEN) };
    fill(src, 3);
    let peer = p.swap(&source.advertise());
    let (raddr, rh) = remote_of(&peer);
    if getter {
        let done = Arc::new(AtomicUsize::new(0));
        let t = Transfer::new(
            ep,
            Local::new(local.addr(0), &local.handle),
            Remote::new(raddr, &rh),
            LEN,
        )
        .flagged(rbtl_btl::RdmaFlags::UNATTENDED);
        retry(p, "an unattended get", |m| m.get(&t, counting(&done)));
        p.module.flush(Some(ep)).expect("flush");
        assert_eq!(done.load(Ordering::SeqCst), 1, "the get completed");
        assert!(
            matches_pattern(&local.snapshot(), 3),
            "an unattended get read the target's buffer as changed after it woke: the \
             target's process took part"
        );
    } else {
        std::thread::sleep(ASLEEP);
        // SAFETY: our own buffer; the getter read it before (checked on its side).
        fill(
            unsafe { std::slice::from_raw_parts_mut(source.addr(0) as *mut u8, LEN) },
            4,
        );
    }
    p.barrier();
}

/// A put and a get that the module does inside the call ([`Module::transfer_now`]
/// returning `Some`): each side puts into the other's buffer, and the target finds
/// the data there after one exchange; a get's data is here when it returns, before
/// any progress.
/// A put past the end of the peer's registration is never done at once: refused
/// (`Some(Err)`), or left to `put` (`None`), the target unchanged. Where the module
/// returns `None`, nothing is done (the target stays zero).
pub fn transfers_now(p: &mut Peer<'_>) {
    let a = p.module.attributes();
    let len = 4096.min(a.put_limit).min(a.get_limit);
    let ep = p.endpoint;
    let flags = rbtl_btl::RdmaFlags::UNATTENDED;
    let target = Buffer::new(p.module, ep, 2 * len, ALL);
    let source = Buffer::new(p.module, ep, len, ALL);
    let into = Buffer::new(p.module, ep, len, ALL);
    // SAFETY: nobody has the address of `source` yet; plain writes are fine.
    fill(
        unsafe { std::slice::from_raw_parts_mut(source.addr(0) as *mut u8, len) },
        5,
    );
    let peer = p.swap(&target.advertise());
    let (raddr, rh) = remote_of(&peer);
    let local = Local::new(source.addr(0), &source.handle);
    let put = Transfer::new(ep, local, Remote::new(raddr, &rh), len).flagged(flags);
    let put_now = match p.module.transfer_now(&put, true) {
        Some(done) => {
            done.expect("a put done at once");
            true
        }
        None => false,
    };
    let past = Transfer::new(ep, local, Remote::new(raddr + len as u64 + 1, &rh), len);
    let refused = p.module.transfer_now(&past.flagged(flags), true);
    assert!(
        !matches!(refused, Some(Ok(()))),
        "a put past the end of the peer's registration was done"
    );
    let peer_put_now = p.swap(&[u8::from(put_now)])[0] == 1;
    let mine = target.snapshot();
    if peer_put_now {
        assert!(
            matches_pattern(&mine[..len], 5),
            "the peer's put done at once had not landed when it returned"
        );
    } else {
        assert!(
            mine[..len].iter().all(|&b| b == 0),
            "a put not done at once wrote"
        );
    }
    assert!(
        mine[len..].iter().all(|&b| b == 0),
        "a refused put wrote past the buffer's first half"
    );
    // The get reads the peer's buffer: what this side's put left there, or zeros.
    let get = Transfer::new(
        ep,
        Local::new(into.addr(0), &into.handle),
        Remote::new(raddr, &rh),
        len,
    )
    .flagged(flags);
    if let Some(done) = p.module.transfer_now(&get, false) {
        done.expect("a get done at once");
        let got = into.snapshot();
        let as_put = match put_now {
            true => matches_pattern(&got, 5),
            false => got.iter().all(|&b| b == 0),
        };
        assert!(
            as_put,
            "a get done at once read other bytes than the peer's buffer held"
        );
    }
    p.barrier();
}
