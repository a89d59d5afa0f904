//! The `self` transport: the whole contract for a process to itself (Open MPI:
//! `btl/self`). Sends are copied into a fragment and delivered by `progress`; put, get
//! and atomics are checked against the target registration and done with plain memory
//! operations; every completion runs from `progress`.

#![warn(missing_docs)]

mod component;
mod module;

pub use component::{default_attributes, Limits, SelfComponent};
pub use module::SelfModule;
