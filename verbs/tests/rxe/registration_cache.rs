//! The registration cache over the wrapper's registrar.

use crate::support::{device, pair, Buf, WAIT};
use rbtl_verbs::{MrAccess, Op};

/// Registrations through the registration cache are real memory regions: a second
/// registration of the same buffer hits, and the handle's key works for RDMA.
#[test]
fn registrations_through_the_cache() {
    use rbtl_rcache::{Access, Options, Rcache};
    use rbtl_verbs::VerbsRegistrar;
    let Some(ctx) = device() else { return };
    let mut p = pair(&ctx);
    let cache = Rcache::new(VerbsRegistrar::new(p.pd.clone()), Options::default());
    let mut target = vec![0u8; 8192];
    let src = Buf::new(&p.pd, 64, 0x5c, MrAccess::LOCAL_WRITE);
    let base = target.as_mut_ptr() as usize;
    let r1 = cache
        .register(base, 8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let r2 = cache
        .register(base + 100, 1000, Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(r1.id(), r2.id(), "covered with enough access: a hit");
    assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
    let write = Op::Write {
        remote: base as u64 + 4096,
        rkey: r2.handle().rkey(),
    };
    // SAFETY: the local range lies inside `src`; the target is registered and alive.
    unsafe { p.a.post_send(1, write, &src.mr, src.addr(), 64, false) }.unwrap();
    p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
    // SAFETY: reading our buffer after the completion.
    let got: Vec<u8> = (0..64)
        .map(|i| unsafe { std::ptr::read_volatile(target.as_ptr().add(4096 + i)) })
        .collect();
    assert_eq!(got, vec![0x5c; 64]);
    drop((r1, r2));
    assert_eq!(cache.invalidate(base, 8192), 1);
    assert_eq!(
        cache.stats().entries,
        0,
        "deregistered once invalidated and idle"
    );
    drop(p.b);
}
