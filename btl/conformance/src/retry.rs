//! Operations driven to the end through a transport that may be out of resources:
//! tried again after progress, with a hang guard.

use crate::Peer;
use rbtl_btl::{
    ActiveMessage, DesFlags, Descriptor, DescriptorRequest, Error, Module, SendOutcome,
    SendiOutcome, Tag,
};
use std::time::{Duration, Instant};

/// Progress once; give the processor away if nothing happened (the peer may need it).
pub(crate) fn idle_progress(m: &mut dyn Module) {
    if m.progress() == 0 {
        std::thread::yield_now();
    }
}

/// Send `des`, retrying after progress while the transport is out of resources, and
/// take back a descriptor that comes back at once.
pub(crate) fn send_all(p: &mut Peer<'_>, des: Descriptor, tag: Tag) {
    send_progressing(p, des, tag, &mut idle_progress);
}

/// [`send_all`], progressing through `progress`.
pub(crate) fn send_progressing(
    p: &mut Peer<'_>,
    mut des: Descriptor,
    tag: Tag,
    progress: &mut impl FnMut(&mut dyn Module),
) {
    let start = Instant::now();
    loop {
        match p.module.send(p.endpoint, des, tag) {
            Ok(SendOutcome::Done(Some(back))) => {
                p.module.free(back).expect("free a returned descriptor");
                return;
            }
            Ok(_) => return,
            Err(e) if matches!(e.error, Error::OutOfResource(_)) => {
                des = e.descriptor;
                progress(p.module);
                assert!(start.elapsed() < Duration::from_secs(60), "send stuck");
            }
            Err(e) => panic!("send on tag {tag}: {}", e.error),
        }
    }
}

/// Run `op` until the transport stops answering `OutOfResource`, progressing between
/// tries.
pub(crate) fn retry<T>(
    p: &mut Peer<'_>,
    what: &str,
    op: impl FnMut(&mut dyn Module) -> Result<T, Error>,
) -> T {
    retry_on(&mut *p.module, what, op)
}

/// [`retry`] on module `m` alone (for checks that run without a [`Peer`]).
pub(crate) fn retry_on<T>(
    m: &mut dyn Module,
    what: &str,
    mut op: impl FnMut(&mut dyn Module) -> Result<T, Error>,
) -> T {
    let start = Instant::now();
    loop {
        match op(&mut *m) {
            Ok(v) => return v,
            Err(Error::OutOfResource(_)) => {
                idle_progress(m);
                assert!(start.elapsed() < Duration::from_secs(60), "{what} stuck");
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Send `header` then `payload` through `sendi`, or the descriptor it hands back,
/// retrying after progress while the transport is out of resources.
pub(crate) fn sendi_all(p: &mut Peer<'_>, header: &[u8], payload: &[u8], tag: Tag) {
    sendi_progressing(p, header, payload, tag, idle_progress);
}

/// [`sendi_all`], progressing through `progress`.
pub(crate) fn sendi_progressing(
    p: &mut Peer<'_>,
    header: &[u8],
    payload: &[u8],
    tag: Tag,
    mut progress: impl FnMut(&mut dyn Module),
) {
    let (ep, start) = (p.endpoint, Instant::now());
    let mut des = loop {
        match p
            .module
            .sendi(&ActiveMessage::new(ep, tag, header, payload))
        {
            Ok(SendiOutcome::Sent) => return,
            Ok(SendiOutcome::Descriptor(d)) => break d,
            Err(Error::OutOfResource(_)) => {
                progress(p.module);
                assert!(start.elapsed() < Duration::from_secs(60), "sendi stuck");
            }
            Err(e) => panic!("sendi on tag {tag}: {e}"),
        }
    };
    des.flags |= DesFlags::OWNERSHIP;
    send_progressing(p, des, tag, &mut progress);
}

pub(crate) fn alloc_retry(p: &mut Peer<'_>, size: usize, flags: DesFlags) -> Descriptor {
    let ep = p.endpoint;
    let request = DescriptorRequest::new(ep, size).flagged(flags);
    retry(p, "alloc", |m| m.alloc(&request))
}
