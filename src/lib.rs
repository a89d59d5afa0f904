//! `rbtl`: a byte-transfer layer for message-passing libraries, in the tradition of
//! Open MPI's BTL framework. This crate is what an embedding library depends on: it
//! re-exports the contract and its parts ([`btl`]) and the transports ([`loopback`] for
//! `self`, [`sm`], [`tcp`]; `openib` with its feature), opens the transports compiled in
//! ([`framework`]), and builds a configuration over every parameter of every framework
//! and component ([`configure`]). Writing a transport of one's own takes
//! [`btl::transport_kit`] besides the contract.
//!
//! ```
//! use rbtl::btl::{Module, Proc, SingletonModex};
//! let config = rbtl::configure(&[("btl", "self")]).unwrap();
//! let mut modex = SingletonModex::new();
//! let mut modules = rbtl::framework().open(&config, &mut modex).unwrap();
//! let me = Proc { rank: 0, node: "localhost".into() };
//! let endpoints = modules[0].add_procs(&[me], &mut modex).unwrap();
//! assert!(endpoints[0].is_some());
//! ```

#![warn(missing_docs)]

pub use rbtl_btl as btl;
pub use rbtl_config as config;
pub use rbtl_cpc as cpc;
pub use rbtl_mpool as mpool;
pub use rbtl_rcache as rcache;
pub use rbtl_self as loopback;
pub use rbtl_sm as sm;
pub use rbtl_tcp as tcp;

pub mod launcher;
pub mod msg;
pub mod pmi;

// The README's programs compile as doctests (the embedding guide's is an example,
// examples/btl_hello.rs, run by tests/osu.rs).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use rbtl_config::{Config, Registry};

/// The framework over every transport compiled in, in this order: `self`, `sm`, `tcp`,
/// and `openib` with the `openib` feature.
pub fn framework() -> btl::Framework {
    let components: Vec<Box<dyn btl::Component>> = vec![
        Box::new(loopback::SelfComponent),
        Box::new(sm::SmComponent),
        Box::new(tcp::TcpComponent::default()),
        #[cfg(feature = "openib")]
        Box::new(rbtl_openib::OpenibComponent::default()),
    ];
    btl::Framework::new(components)
}

/// Every parameter of every framework and component compiled in.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    framework()
        .register_params(&mut registry)
        .expect("built-in parameters are consistent");
    msg::register_params(&mut registry).expect("built-in parameters are consistent");
    registry
}

/// The configuration from defaults, the file named by `RBTL_CONFIG_FILE`, `RBTL_*`
/// environment variables and then `settings` (the program's own, highest first).
pub fn configure(settings: &[(&str, &str)]) -> config::Result<Config> {
    let registry = registry();
    let mut builder = registry.builder().env();
    for (name, value) in settings {
        builder = builder.set(name, *value);
    }
    builder.build()
}
