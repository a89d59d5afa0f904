//! The `xrc` connection method's component. XRC shares receive queues among the
//! processes of a node; it needs a device with XRC domains, which no software device
//! has, and its connection logic is not written yet. `query` therefore says why it
//! cannot run: no XRC on the device, or not implemented.

use crate::core::Core;
use rbtl_config::{Config, Registry};
use rbtl_cpc::{CpcComponent, CpcModule, Error, PortInfo};

/// The component.
pub struct XrcComponent;

impl CpcComponent<Core> for XrcComponent {
    fn name(&self) -> &'static str {
        "xrc"
    }

    fn register_params(&self, _: &mut Registry) -> Result<(), Error> {
        Ok(())
    }

    fn query(&mut self, _: &Config, port: &PortInfo) -> Result<Box<dyn CpcModule<Core>>, Error> {
        let why = if port.xrc {
            "the xrc connection method is not implemented yet"
        } else {
            "the device has no XRC domains"
        };
        Err(Error::Unusable {
            cpc: "xrc",
            device: port.device.clone(),
            port: port.port,
            why: why.into(),
        })
    }
}
