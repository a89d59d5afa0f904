//! The registration cache's parameters (Open MPI: `mpi_leave_pinned`,
//! `rcache_grdma_*`; UCX: `UCX_RCACHE_*`, `UCX_MEM_EVENTS`), shared by every transport
//! that registers.
//!
//! The memory monitor (`rbtl_rcache::monitor`) serves only caches whose registrations
//! pin pages (`openib`): there a cached registration of freed memory would point the
//! device at the old pages, so such a transport's `leave_pinned` defaults to on exactly
//! where the monitor runs ([`leave_pinned`]; off elsewhere, with the reason logged), and
//! its cache keeps nothing idle without the monitor even if `leave_pinned` is set. The
//! caches of `self`, `sm` and `tcp` pin nothing ([`NoPin`]): a transfer resolves the
//! address anew, so they need no monitor and `rcache_leave_pinned`, which they follow,
//! defaults to on everywhere.
//!
//! [`NoPin`]: crate::registrations::NoPin

use crate::Result;
use rbtl_config::{Config, Registry, Source, Value};
use rbtl_rcache::{monitor, Options};

/// The values of `rcache_monitor`.
const MONITORS: [&str; 2] = ["userfaultfd", "none"];

/// Register `rcache_leave_pinned`, `rcache_monitor`, `rcache_monitor_mmap_hooks`,
/// `rcache_max_pinned_bytes` and `rcache_max_entries`.
pub fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    let d = Options::default();
    registry
        .register(
            "rcache_leave_pinned",
            Value::Bool(d.leave_pinned),
            "keep idle registrations of self, sm and tcp for reuse (the oldest not used \
             since evicted first); safe without a memory monitor, as they pin nothing",
        )?
        .register(
            "rcache_monitor",
            Value::Str(MONITORS[0].into()),
            "what tells caches of registrations that pin pages (openib) about memory \
             leaving the address space: userfaultfd (whoever unmaps it), or none (the \
             program reports it through rbtl_rcache::auto; then keep \
             btl_openib_leave_pinned off unless it does)",
        )?
        .register(
            "rcache_monitor_mmap_hooks",
            Value::Bool(true),
            "with the userfaultfd monitor, patch libc's mmap, mremap, shmat and brk to \
             count mappings, so that a lookup asks the kernel about unmaps in flight only \
             after one (as UCX's UCM_MMAP_HOOK_MODE=bistro); false: every lookup asks \
             (one system call more per lookup, and also covers mappings made by raw \
             system calls)",
        )?
        .register(
            "rcache_max_pinned_bytes",
            Value::Size(d.max_pinned_bytes),
            "most bytes registered at once, 0 for no limit",
        )?
        .register(
            "rcache_max_entries",
            Value::Int(d.max_entries as i64),
            "most registrations at once, 0 for no limit",
        )?;
    Ok(())
}

/// Whether `rcache_monitor` asks for the memory monitor (and how it should check for
/// unmaps in flight, `rcache_monitor_mmap_hooks`, which the monitor reads when it
/// starts).
pub fn monitor_wanted(config: &Config) -> Result<bool> {
    monitor::use_mapping_hooks(config.bool("rcache_monitor_mmap_hooks")?);
    match config.str("rcache_monitor")? {
        "userfaultfd" => Ok(true),
        "none" => Ok(false),
        other => Err(crate::Error::NotAvailable(format!(
            "rcache_monitor = {other:?}: use one of {MONITORS:?}"
        ))),
    }
}

/// Which memory monitor the configuration gives caches, or why none (for `rbtl_info`).
pub fn monitor_status(config: &Config) -> Result<monitor::Status> {
    Ok(if monitor_wanted(config)? {
        monitor::status()
    } else {
        monitor::Status::None(monitor::Unavailable::Disabled)
    })
}

/// `leave_pinned` of a transport whose registrations pin pages, as configured in
/// `name`: an explicit setting stands; the default follows the monitor the
/// configuration gives (logging why it is off).
pub fn leave_pinned(config: &Config, name: &str) -> Result<bool> {
    let (_, source) = config.value(name)?;
    let set = config.bool(name)?;
    if !matches!(source, Source::Default) {
        return Ok(set);
    }
    let status = monitor_status(config)?;
    if !status.is_running() {
        tracing::info!(%status, "{name} is off: no memory monitor");
    }
    Ok(status.is_running())
}

/// The cache options these parameters give (`leave_pinned` from
/// `rcache_leave_pinned`: a transport whose registrations pin pages sets its own
/// through [`leave_pinned`]).
pub fn options(config: &Config) -> Result<Options> {
    Ok(Options {
        leave_pinned: config.bool("rcache_leave_pinned")?,
        max_pinned_bytes: config.size("rcache_max_pinned_bytes")?,
        // 0: no limit, as documented.
        max_entries: crate::count_params::count(config, "rcache_max_entries")?,
        monitor: monitor_wanted(config)?,
    })
}
