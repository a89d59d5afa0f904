//! The `self` transport: the contract suite, selection, and every kind of bad input.

use rbtl_btl::{
    Access, ActiveMessage, DescriptorRequest, Endpoint, Error, Framework, Local, MemHandle, Module,
    Proc, Remote, RemoteHandle, Result, SingletonModex, Tag, Transfer,
};
use rbtl_config::Registry;
use rbtl_self::{Limits, SelfComponent, SelfModule};
use rbtl_sm::SmComponent;
use rbtl_tcp::TcpComponent;

/// The framework over this crate's transports, in the order `rbtl::framework` lists
/// them.
fn framework() -> Framework {
    Framework::new(vec![
        Box::new(SelfComponent),
        Box::new(SmComponent),
        Box::new(TcpComponent::default()),
    ])
}

/// The `self` module of a one-process job, opened through the framework as an
/// embedding library would, with its endpoint to itself.
fn open_self(settings: &[(&str, &str)]) -> (Box<dyn Module>, Endpoint) {
    let mut fw = framework();
    let mut reg = Registry::new();
    fw.register_params(&mut reg).unwrap();
    let mut b = reg.builder().set("btl", "self");
    for (k, v) in settings {
        b = b.set(k, *v);
    }
    let cfg = b.build().unwrap();
    let mut modex = SingletonModex::new();
    let mut modules = fw.open(&cfg, &mut modex).unwrap();
    assert_eq!(modules.len(), 1);
    let mut m = modules.pop().unwrap();
    let procs = [
        Proc {
            rank: 0,
            node: "here".into(),
        },
        Proc {
            rank: 1,
            node: "there".into(),
        },
    ];
    let eps = m.add_procs(&procs, &mut modex).unwrap();
    assert!(eps[1].is_none(), "self reaches only itself");
    (m, eps[0].expect("self reaches itself"))
}

/// Start `t` as a put whose completion is never looked at (the tests that use it
/// expect it refused).
fn put(m: &mut dyn Module, t: &Transfer<'_>) -> Result<()> {
    m.put(t, Box::new(|_, _| {}))
}

/// As [`put`], a get.
fn get(m: &mut dyn Module, t: &Transfer<'_>) -> Result<()> {
    m.get(t, Box::new(|_, _| {}))
}

/// 8 bytes over `ep` at `addr` on both sides, registered as `local` here and `remote`
/// there.
fn eight_bytes_at<'a>(
    ep: Endpoint,
    addr: usize,
    local: &'a MemHandle,
    remote: &'a RemoteHandle,
) -> Transfer<'a> {
    Transfer::new(
        ep,
        Local::new(addr, local),
        Remote::new(addr as u64, remote),
        8,
    )
}

fn run_suite(m: &mut dyn Module, ep: Endpoint) {
    rbtl_conformance::run_all(m, ep);
    // Every operation at both widths against the reference (one origin: itself).
    rbtl_conformance::atomics_on_shared_words(m, &[Some(ep)], 0, &mut |mine| vec![mine.to_vec()]);
}

#[test]
fn contract_suite_passes() {
    let (mut m, ep) = open_self(&[]);
    run_suite(m.as_mut(), ep);
}

#[test]
fn contract_suite_passes_with_small_limits_and_few_fragments() {
    // Two fragments: every send path has to wait for completions and retry. Put and
    // get limits and alignments: the suite's refusals of transfers over them run.
    let (mut m, ep) = open_self(&[
        ("btl_self_max_send_size", "1000"),
        ("btl_self_eager_limit", "100"),
        ("btl_self_rndv_eager_limit", "100"),
        ("btl_self_free_list_max", "2"),
        ("btl_self_put_limit", "4096"),
        ("btl_self_put_alignment", "8"),
        ("btl_self_get_limit", "2048"),
        ("btl_self_get_alignment", "4"),
    ]);
    let a = m.attributes();
    assert_eq!(a.max_send_size, 1000);
    assert_eq!((a.put_limit, a.put_alignment), (4096, 8));
    assert_eq!((a.get_limit, a.get_alignment), (2048, 4));
    run_suite(m.as_mut(), ep);
}

#[test]
fn registration_bad_input() {
    let (mut m, ep) = open_self(&[]);
    let mut buf = vec![0u8; 64];
    let base = buf.as_mut_ptr() as usize;
    // SAFETY: `buf` outlives every handle made in this test (a zero length is refused).
    let zero = unsafe { m.register_mem(Some(ep), base, 0, Access::all()) };
    assert!(matches!(zero, Err(Error::ZeroLength)), "{zero:?}");
    // SAFETY: a range that wraps is refused before anything is registered.
    let wrap = unsafe { m.register_mem(Some(ep), usize::MAX - 8, 64, Access::all()) };
    assert!(matches!(wrap, Err(Error::Overflow { .. })), "{wrap:?}");

    // SAFETY: `buf` outlives `h`.
    let mut h = unsafe { m.register_mem(Some(ep), base, 64, Access::all()) }.unwrap();
    let remote = *h.remote();
    m.deregister_mem(&mut h).unwrap();
    assert!(
        matches!(m.deregister_mem(&mut h), Err(Error::Deregistered)),
        "deregistering twice"
    );
    assert!(!h.is_live());

    // A dead handle, locally and remotely.
    // SAFETY: `buf` outlives the handle.
    let mut other = unsafe { m.register_mem(Some(ep), base, 64, Access::all()) }.unwrap();
    let e = put(m.as_mut(), &eight_bytes_at(ep, base, &h, other.remote()));
    assert!(matches!(e, Err(Error::Deregistered)), "{e:?}");
    let e = put(m.as_mut(), &eight_bytes_at(ep, base, &other, &remote));
    assert!(matches!(e, Err(Error::BadRemoteHandle(_))), "{e:?}");
    m.deregister_mem(&mut other).unwrap();
    drop(buf);
}

#[test]
fn handles_and_descriptors_of_another_module_are_refused() {
    let (mut a, ep_a) = open_self(&[]);
    let (mut b, _ep_b) = open_self(&[]);
    assert_ne!(a.id(), b.id());
    let mut buf = vec![0u8; 64];
    let base = buf.as_mut_ptr() as usize;
    // SAFETY: `buf` outlives both handles.
    let mut ha = unsafe { a.register_mem(None, base, 64, Access::all()) }.unwrap();
    // SAFETY: as above.
    let mut hb = unsafe { b.register_mem(None, base, 64, Access::all()) }.unwrap();

    let e = put(a.as_mut(), &eight_bytes_at(ep_a, base, &hb, ha.remote()));
    assert!(
        matches!(e, Err(Error::ForeignHandle { .. })),
        "foreign local handle: {e:?}"
    );
    let e = put(a.as_mut(), &eight_bytes_at(ep_a, base, &ha, hb.remote()));
    assert!(
        matches!(e, Err(Error::BadRemoteHandle(_))),
        "remote handle of another module: {e:?}"
    );
    assert!(matches!(
        a.deregister_mem(&mut hb),
        Err(Error::ForeignHandle { .. })
    ));
    assert!(hb.is_live(), "a refused deregistration changes nothing");
    b.deregister_mem(&mut hb).unwrap();
    a.deregister_mem(&mut ha).unwrap();

    let des = a.alloc(&DescriptorRequest::new(ep_a, 8)).unwrap();
    let err = b.send(Endpoint(0), des, Tag::USR).unwrap_err();
    assert!(matches!(
        err.error,
        Error::ForeignHandle {
            what: "descriptor",
            ..
        }
    ));
    let des = err.descriptor;
    let foreign = b.free(des);
    assert!(
        matches!(foreign, Err(Error::ForeignHandle { .. })),
        "{foreign:?}"
    );
    drop(buf);
}

#[test]
fn sends_with_bad_tags_endpoints_and_sizes_are_refused() {
    let (mut m, ep) = open_self(&[]);
    let max = m.attributes().max_send_size;
    assert!(matches!(
        m.alloc(&DescriptorRequest::new(ep, max + 1)),
        Err(Error::TooLarge(_))
    ));
    assert!(matches!(
        m.alloc(&DescriptorRequest::new(Endpoint(9), 1)),
        Err(Error::UnknownEndpoint(9))
    ));
    let des = m.alloc(&DescriptorRequest::new(ep, 1)).unwrap();
    let err = m.send(ep, des, Tag(0x99)).unwrap_err();
    assert!(matches!(err.error, Error::BadTag { why, .. } if why.contains("no receive callback")));
    m.free(err.descriptor).unwrap();
    let e = m.sendi(&ActiveMessage::new(ep, Tag(0x99), b"h", b"p"));
    assert!(matches!(e, Err(Error::BadTag { .. })), "{e:?}");
    assert!(matches!(
        m.register_am(Tag(0x10), Box::new(|_, _| {})),
        Err(Error::BadTag { .. })
    ));
}

#[test]
fn put_and_get_without_permission_leave_memory_unchanged() {
    let (mut m, ep) = open_self(&[]);
    let mut target = vec![5u8; 128];
    let mut local = vec![9u8; 128];
    let [t, l] = [
        (&mut target, Access::REMOTE_READ),
        (&mut local, Access::LOCAL_READ),
    ]
    .map(|(buf, access)| {
        // SAFETY: both vectors outlive the handles.
        unsafe { m.register_mem(Some(ep), buf.as_mut_ptr() as usize, 128, access) }.unwrap()
    });
    // 16 bytes from the start of each buffer.
    let start = Transfer::new(
        ep,
        Local::new(l.base(), &l),
        Remote::new(t.base() as u64, t.remote()),
        16,
    );
    let e = put(m.as_mut(), &start);
    assert!(
        matches!(e, Err(Error::AccessDenied { side: "remote", .. })),
        "{e:?}"
    );
    let e = get(m.as_mut(), &start);
    assert!(
        matches!(e, Err(Error::AccessDenied { side: "local", .. })),
        "{e:?}"
    );
    let past_the_end = Transfer {
        remote: Remote::new(t.base() as u64 + 120, t.remote()),
        ..start
    };
    let e = put(m.as_mut(), &past_the_end);
    assert!(matches!(e, Err(Error::OutOfRange { .. })), "{e:?}");
    let malformed = RemoteHandle::from_bytes(&[1, 2, 3]).unwrap();
    let malformed_remote = Transfer {
        remote: Remote::new(t.base() as u64, &malformed),
        len: 1,
        ..start
    };
    let e = put(m.as_mut(), &malformed_remote);
    assert!(matches!(e, Err(Error::MalformedHandle(3))), "{e:?}");
    assert!(matches!(
        RemoteHandle::from_bytes(&[0; 257]),
        Err(Error::MalformedHandle(257))
    ));
    m.flush(None).unwrap();
    drop((t, l));
    assert!(target.iter().all(|&b| b == 5) && local.iter().all(|&b| b == 9));
}

#[test]
fn registrations_go_through_the_cache() {
    let (mut m, ep) = open_self(&[]);
    let mut buf = vec![0u8; 1 << 16];
    let base = buf.as_mut_ptr() as usize;
    // SAFETY: `buf` outlives the handles.
    let hs: Vec<_> = (0..4)
        .map(|i| unsafe { m.register_mem(Some(ep), base + i * 100, 100, Access::all()) }.unwrap())
        .collect();
    drop(hs);
    let _ = buf.as_mut_ptr();
    // Downcast is not available through dyn Module; open a module directly.
    let mut direct =
        SelfModule::new(rbtl_self::default_attributes(), Limits::default(), 0).unwrap();
    let mut modex = SingletonModex::new();
    let ep = direct
        .add_procs(
            &[Proc {
                rank: 0,
                node: "n".into(),
            }],
            &mut modex,
        )
        .unwrap()[0]
        .unwrap();
    for _ in 0..3 {
        // SAFETY: `buf` outlives the handle.
        let h = unsafe { direct.register_mem(Some(ep), base, 4096, Access::all()) }.unwrap();
        drop(h);
    }
    let s = direct.rcache_stats();
    assert_eq!((s.misses, s.hits), (1, 2), "{s:?}");
}

#[test]
fn selection_by_configuration() {
    let fw = framework();
    let mut reg = Registry::new();
    fw.register_params(&mut reg).unwrap();
    let sel = |v: &str| fw.selected(&reg.builder().set("btl", v).build().unwrap());
    assert_eq!(sel("").unwrap(), vec!["self", "sm", "tcp"]);
    assert_eq!(sel("self").unwrap(), vec!["self"]);
    assert_eq!(sel("^self").unwrap(), vec!["sm", "tcp"]);
    assert_eq!(sel("^self,sm,tcp").unwrap(), Vec::<&str>::new());
    let e = sel("self,warp").unwrap_err();
    assert!(matches!(e, Error::UnknownTransport { .. }));
    assert!(
        e.to_string().contains("valid transports: self, sm, tcp"),
        "{e}"
    );
    let e = sel("self,^self").unwrap_err();
    assert!(e.to_string().contains("cannot be mixed"), "{e}");
    let e = reg
        .builder()
        .set("btl_self_eagerlimit", "1")
        .build()
        .unwrap_err();
    assert!(
        e.to_string().contains("btl_self_eager_limit"),
        "lists valid names: {e}"
    );
}

#[test]
fn receive_callbacks_can_reply_through_the_module() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let (mut m, ep) = open_self(&[]);
    let pongs = Arc::new(AtomicUsize::new(0));
    m.register_am(
        Tag::USR,
        Box::new(move |m, r| {
            let n = r.segments[0][0];
            if n > 0 {
                m.sendi(&ActiveMessage::new(r.endpoint, Tag::USR, &[n - 1], &[]))
                    .expect("reply from a callback");
            }
        }),
    )
    .unwrap();
    let p = pongs.clone();
    m.register_am(
        Tag(Tag::USR.0 + 1),
        Box::new(move |_, _| {
            p.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .unwrap();
    m.sendi(&ActiveMessage::new(ep, Tag::USR, &[10], &[]))
        .unwrap();
    let mut rounds = 0;
    while m.progress() > 0 {
        rounds += 1;
    }
    assert_eq!(
        rounds, 11,
        "each progress call delivers only what was queued before it"
    );
    assert_eq!(pongs.load(Ordering::SeqCst), 0);
}

/// Memory handed over to a registration (`OwnedMemory`): a put between two such
/// buffers lands, `release` runs the pending completion (a flush) before it gives the
/// bytes back, refuses another module's release keeping the memory registered, and a
/// buffer dropped without release leaves no registration peers can use.
#[test]
fn owned_memory_is_given_back_only_after_a_flush_and_the_deregistration() {
    use rbtl_btl::OwnedMemory;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (mut m, ep) = open_self(&[]);
    let (mut other, _) = open_self(&[]);
    let src =
        OwnedMemory::register(m.as_mut(), Some(ep), vec![7u8; 256].into(), Access::all()).unwrap();
    let dst =
        OwnedMemory::register(m.as_mut(), Some(ep), vec![0u8; 256].into(), Access::all()).unwrap();
    assert_eq!((src.len(), dst.len()), (256, 256));
    let done = Arc::new(AtomicBool::new(false));
    let seen = done.clone();
    m.put(
        &Transfer::new(
            ep,
            src.local(16),
            Remote::new(dst.addr() as u64 + 32, dst.handle().remote()),
            100,
        ),
        Box::new(move |_, c| {
            c.status.unwrap();
            seen.store(true, Ordering::SeqCst);
        }),
    )
    .unwrap();
    assert!(
        !done.load(Ordering::SeqCst),
        "completions wait for progress"
    );
    // Another module's release is refused; the memory comes back still registered.
    let refused = src.release(other.as_mut()).unwrap_err();
    assert!(
        matches!(refused.error, Error::ForeignHandle { .. }),
        "{refused}"
    );
    assert!(refused.memory.handle().is_live());
    let src = refused.memory.release(m.as_mut()).unwrap();
    assert!(done.load(Ordering::SeqCst), "release flushed first");
    assert_eq!(&src[..], &[7u8; 256][..]);
    let remote = *dst.handle().remote();
    let dst_addr = dst.addr() as u64;
    let dst = dst.release(m.as_mut()).unwrap();
    assert!(dst[..32].iter().all(|&b| b == 0) && dst[132..].iter().all(|&b| b == 0));
    assert!(dst[32..132].iter().all(|&b| b == 7));
    // Dropped without release: the registration ends with it.
    let kept =
        OwnedMemory::register(m.as_mut(), Some(ep), vec![1u8; 64].into(), Access::all()).unwrap();
    let (gone, kept_addr) = (*kept.handle().remote(), kept.addr() as u64);
    drop(kept);
    let local =
        OwnedMemory::register(m.as_mut(), Some(ep), vec![0u8; 64].into(), Access::all()).unwrap();
    for (addr, handle) in [(dst_addr, &remote), (kept_addr, &gone)] {
        let e = m.get(
            &Transfer::new(ep, local.local(0), Remote::new(addr, handle), 8),
            Box::new(|_, _| {}),
        );
        assert!(e.is_err(), "a released registration still reached: {e:?}");
    }
    // A refused registration registers nothing.
    let e = OwnedMemory::register(m.as_mut(), Some(ep), Vec::new().into(), Access::all());
    assert!(matches!(e, Err(Error::ZeroLength)), "{e:?}");
    local.release(m.as_mut()).unwrap();
}
