//! The `xrc` connection method's component. XRC shares receive queues among the
//! processes of a node; it needs a device with XRC domains, which no software device
//! has. Its handshake is written and tested on its own (`rbtl_cpc::xrc`), but this
//! transport's XRC path (initiators, targets, receives through XRC shared receive
//! queues) is not. `query` therefore says why it cannot run: no XRC on the device,
//! or no XRC path in the transport.

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
            "the transport's XRC path is not written (only the xrc handshake is)"
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
