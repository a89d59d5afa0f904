//! The registration cache's parameters (Open MPI: `mpi_leave_pinned`,
//! `rcache_grdma_*`; UCX: `UCX_RCACHE_*`, `UCX_MEM_EVENTS`), shared by every transport
//! that registers.
//!
//! `rcache_leave_pinned` defaults to on exactly where the memory monitor runs
//! (`rbtl_rcache::monitor`): there no registration of freed memory can be reused,
//! whoever frees it. Where it does not run, the default is off and the reason is
//! logged; a cache that asked for the monitor keeps nothing idle then even if
//! `rcache_leave_pinned` is set.

use crate::Result;
use rbtl_config::{Config, Registry, Source, Value};
use rbtl_rcache::{monitor, Options};

/// The values of `rcache_monitor`.
const MONITORS: [&str; 2] = ["userfaultfd", "none"];

/// Register `rcache_leave_pinned`, `rcache_monitor`, `rcache_max_pinned_bytes` and
/// `rcache_max_entries`. Starts the memory monitor (to know the default of
/// `rcache_leave_pinned`).
pub fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    let d = Options::default();
    registry
        .register(
            "rcache_leave_pinned",
            Value::Bool(monitor::status().is_running()),
            "keep idle registrations for reuse (least recently used evicted first); the \
             default is on where the memory monitor runs (rbtl_info says), off elsewhere",
        )?
        .register(
            "rcache_monitor",
            Value::Str(MONITORS[0].into()),
            "what tells the registration cache about memory leaving the address space: \
             userfaultfd (whoever unmaps it), or none (the program reports it through \
             rbtl_rcache::auto; then keep rcache_leave_pinned off unless it does)",
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

/// Whether `rcache_monitor` asks for the memory monitor.
pub fn monitor_wanted(config: &Config) -> Result<bool> {
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

/// `leave_pinned` as configured: an explicit setting stands; the default follows the
/// monitor the configuration gives (logging why it is off).
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

/// The cache options these parameters give.
pub fn options(config: &Config) -> Result<Options> {
    let max_entries = config.int("rcache_max_entries")?;
    Ok(Options {
        leave_pinned: leave_pinned(config, "rcache_leave_pinned")?,
        max_pinned_bytes: config.size("rcache_max_pinned_bytes")?,
        max_entries: usize::try_from(max_entries).map_err(|_| {
            crate::Error::NotAvailable(format!("rcache_max_entries = {max_entries} must be >= 0"))
        })?,
        monitor: monitor_wanted(config)?,
    })
}
