//! The registration cache's parameters (Open MPI: `mpi_leave_pinned`,
//! `rcache_grdma_*`; UCX: `UCX_RCACHE_*`), shared by every transport that registers.

use crate::Result;
use rbtl_config::{Config, Registry, Value};
use rbtl_rcache::Options;

/// Register `rcache_leave_pinned`, `rcache_max_pinned_bytes` and `rcache_max_entries`.
pub fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    let d = Options::default();
    registry
        .register(
            "rcache_leave_pinned",
            Value::Bool(d.leave_pinned),
            "keep idle registrations pinned for reuse (least recently used evicted first)",
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

/// The cache options these parameters give.
pub fn options(config: &Config) -> Result<Options> {
    let max_entries = config.int("rcache_max_entries")?;
    Ok(Options {
        leave_pinned: config.bool("rcache_leave_pinned")?,
        max_pinned_bytes: config.size("rcache_max_pinned_bytes")?,
        max_entries: usize::try_from(max_entries).map_err(|_| {
            crate::Error::NotAvailable(format!("rcache_max_entries = {max_entries} must be >= 0"))
        })?,
    })
}
