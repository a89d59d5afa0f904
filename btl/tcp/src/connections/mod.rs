//! Connections: which interfaces (`interfaces`, `family`), how two ranks' interfaces
//! pair (`pairing`, `assignment`), what each rank publishes (`published`), the
//! listener and the handshake (`acceptor`, `handshake`, `attempt`), and the links they
//! become with their writing side (`net`, `peer`, `slot`, `link`, `conn`, `readiness`,
//! `sockets`).

pub mod acceptor;
pub(crate) mod assignment;
pub(crate) mod attempt;
pub(crate) mod conn;
pub mod family;
pub(crate) mod handshake;
pub mod interfaces;
pub(crate) mod link;
pub(crate) mod net;
pub(crate) mod pairing;
pub(crate) mod peer;
pub mod published;
pub(crate) mod readiness;
pub(crate) mod slot;
pub(crate) mod sockets;
