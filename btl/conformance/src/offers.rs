//! What each transport must offer: the flags and atomics it advertises, pinned per
//! transport, so that a build that loses a capability (and refuses it, as the other
//! checks then expect) fails the suite instead of passing it.

use rbtl_btl::{AtomicFlags, BtlFlags, Module};

/// The flags and atomics transport `name` must advertise at least; `None` for a
/// transport the suite does not know.
///
/// `openib`'s atomics are those of the devices the suite runs on (`rxe`, and the
/// adapters Open MPI's openib served): add and compare-and-swap on 64-bit words, the
/// 32-bit ones emulated.
pub fn pinned(name: &str) -> Option<(BtlFlags, AtomicFlags)> {
    let every_rdma = BtlFlags::SEND
        | BtlFlags::PUT
        | BtlFlags::GET
        | BtlFlags::ATOMIC_OPS
        | BtlFlags::ATOMIC_FOPS
        | BtlFlags::RDMA_REMOTE_COMPLETION;
    match name {
        "self" | "sm" => Some((
            every_rdma | BtlFlags::REMOTE_HANDLES_CHECKED,
            AtomicFlags::all(),
        )),
        "tcp" => Some((every_rdma, AtomicFlags::all())),
        "openib" => Some((
            every_rdma | BtlFlags::REGISTRATION_REQUIRED | BtlFlags::PROVIDER_KEYS,
            AtomicFlags::ADD | AtomicFlags::CSWAP | AtomicFlags::U64 | AtomicFlags::U32,
        )),
        _ => None,
    }
}

/// The module advertises at least what [`pinned`] says its transport must.
pub fn offers_what_it_must(m: &dyn Module) {
    let name = m.name();
    let (flags, atomics) =
        pinned(name).unwrap_or_else(|| panic!("the suite pins no capabilities for {name}"));
    let a = m.attributes();
    assert!(
        a.flags.contains(flags),
        "{name} lost capabilities: it advertises {:?}, it must advertise {:?}",
        a.flags,
        flags
    );
    assert!(
        a.atomic_flags.contains(atomics),
        "{name} lost atomics: it advertises {:?}, it must advertise {:?}",
        a.atomic_flags,
        atomics
    );
    // The hints of the flags it does not set say so.
    if !a.flags.contains(BtlFlags::UNATTENDED_RDMA) {
        assert_eq!(
            a.unattended_from,
            usize::MAX,
            "{name}: no unattended transfers"
        );
    }
    if !a.flags.contains(BtlFlags::UNREGISTERED_REMOTE) {
        let below = a.unregistered_remote_below;
        assert_eq!(below, 0, "{name}: nothing named by address alone");
    }
}
