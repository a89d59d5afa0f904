//! The `self` component: its attributes, its limits (`btl_self_*`) and its one
//! module per process.

use super::module::SelfModule;
use rbtl_btl::transport_kit::keytable;
use rbtl_btl::{exclusivity, AtomicFlags, Attributes, BtlFlags, Component, Modex, Module, Result};
use rbtl_config::{Config, Registry, Value};
use rbtl_rcache::Options;

pub(super) const NAME: &str = "self";

/// Default attributes of the `self` transport.
pub fn default_attributes() -> Attributes {
    Attributes {
        eager_limit: 4 << 10,
        rndv_eager_limit: 4 << 10,
        max_send_size: 64 << 10,
        put_limit: usize::MAX,
        put_alignment: 1,
        get_limit: usize::MAX,
        get_alignment: 1,
        exclusivity: exclusivity::SELF,
        latency: 0,
        bandwidth: 100_000,
        flags: BtlFlags::SEND
            | BtlFlags::PUT
            | BtlFlags::GET
            | BtlFlags::ATOMIC_OPS
            | BtlFlags::ATOMIC_FOPS
            | BtlFlags::RDMA_REMOTE_COMPLETION
            | BtlFlags::REMOTE_HANDLES_CHECKED,
        atomic_flags: AtomicFlags::all(),
        registration_handle_size: keytable::HANDLE_SIZE,
        unregistered_remote_below: 0,
        unattended_from: usize::MAX,
    }
}

/// The `self` component: one module per process.
#[derive(Debug, Default)]
pub struct SelfComponent;

impl Component for SelfComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "a process to itself: memory copies, completed by progress"
    }

    fn register_params(&self, registry: &mut Registry) -> rbtl_config::Result<()> {
        Attributes::register_params(registry, NAME, &default_attributes())?;
        registry
            .register(
                "btl_self_free_list_max",
                Value::Int(256),
                "most send fragments (of max_send_size bytes) outstanding at once",
            )?
            .register(
                "btl_self_max_registrations",
                Value::Int(4096),
                "most memory registrations alive at once",
            )?;
        Ok(())
    }

    fn init(&mut self, config: &Config, modex: &mut dyn Modex) -> Result<Vec<Box<dyn Module>>> {
        let attrs = Attributes::from_config(config, NAME, &default_attributes())?;
        use rbtl_btl::transport_kit::at_least_one;
        let limits = Limits {
            max_frags: at_least_one(
                config,
                "btl_self_free_list_max",
                "the send descriptors outstanding at once",
            )?,
            max_registrations: at_least_one(
                config,
                "btl_self_max_registrations",
                "the registrations alive at once",
            )?,
            rcache: rbtl_btl::transport_kit::rcache_params::options(config)?,
        };
        Ok(vec![Box::new(SelfModule::new(
            attrs,
            limits,
            modex.rank(),
        )?)])
    }
}

/// Sizes of a `self` module's pools.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most send fragments outstanding.
    pub max_frags: usize,
    /// Most live registrations.
    pub max_registrations: usize,
    /// Registration cache options.
    pub rcache: Options,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frags: 256,
            max_registrations: 4096,
            rcache: Options::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SelfComponent;
    use rbtl_btl::transport_kit::init_with;
    use rbtl_btl::Error;

    /// The pools cannot be sized to nothing: 0 is refused by name.
    #[test]
    fn zero_limits_are_refused_by_name() {
        for name in ["btl_self_free_list_max", "btl_self_max_registrations"] {
            match init_with(&mut SelfComponent, name, "0") {
                Err(Error::ParamOutOfRange {
                    name: refused,
                    value: 0,
                    ..
                }) => assert_eq!(refused, name),
                other => panic!("{name} = 0: {:?}", other.map(|m| m.len())),
            }
        }
    }
}
