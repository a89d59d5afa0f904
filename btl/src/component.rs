//! Components and the framework that opens them (Open MPI: `mca_btl_base_component_t`
//! and `mca_btl_base_select`).
//!
//! The `btl` parameter chooses components the Open MPI way: empty for all, a list to
//! include (`self,sm`), or a list prefixed by `^` to exclude (`^tcp,openib`). Modules
//! come back ordered by exclusivity, highest first.

use crate::{Error, Modex, Module, Result};
use rbtl_config::{Config, Registry, Value};

/// A transport's factory: registers its parameters, then finds its devices and makes
/// one module per usable device or port.
pub trait Component: Send {
    /// The transport name (`self`, `sm`, `tcp`, `openib`).
    fn name(&self) -> &'static str;

    /// One line for `rbtl_info`.
    fn description(&self) -> &'static str;

    /// Register `btl_<name>_*` parameters (Open MPI: `mca_register_component_params`).
    fn register_params(&self, registry: &mut Registry) -> rbtl_config::Result<()>;

    /// Query devices and make modules, publishing their address blobs in `modex`
    /// (Open MPI: `btl_component_init`). An empty list means nothing usable here.
    fn init(&mut self, config: &Config, modex: &mut dyn Modex) -> Result<Vec<Box<dyn Module>>>;

    /// Why the last [`Component::init`] made no module, when it can say (the
    /// configuration chose nothing usable, say), for the error of a rank that no
    /// transport reaches.
    fn closed_why(&self) -> Option<String> {
        None
    }
}

/// `component` initialised (with a singleton modex) on its own parameters and the
/// cache's, `name` set to `value`: for tests of how it takes its parameters.
pub fn init_with(
    component: &mut dyn Component,
    name: &str,
    value: &str,
) -> Result<Vec<Box<dyn Module>>> {
    let mut registry = Registry::new();
    crate::rcache_params::register_params(&mut registry)?;
    component.register_params(&mut registry)?;
    let config = registry.builder().set(name, value).build()?;
    component.init(&config, &mut crate::SingletonModex::new())
}

/// The name of the selection parameter.
pub const SELECT_PARAM: &str = "btl";
/// The directory of shared-memory segments (environment: `RBTL_SHM_DIR`).
pub const SHM_DIR_PARAM: &str = "shm_dir";

/// The set of compiled-in components and the selection among them.
pub struct Framework {
    components: Vec<Box<dyn Component>>,
}

impl Framework {
    /// A framework over these components.
    pub fn new(components: Vec<Box<dyn Component>>) -> Framework {
        Framework { components }
    }

    /// Names of every component, in the order given.
    pub fn names(&self) -> Vec<&'static str> {
        self.components.iter().map(|c| c.name()).collect()
    }

    /// The components, for listing.
    pub fn components(&self) -> &[Box<dyn Component>] {
        &self.components
    }

    /// Register the `btl` selection parameter, the registration cache's parameters and
    /// every component's parameters.
    pub fn register_params(&self, registry: &mut Registry) -> rbtl_config::Result<()> {
        registry.register(
            SELECT_PARAM,
            Value::List(Vec::new()),
            "transports to use: empty for all, a list to include, or ^list to exclude",
        )?;
        crate::rcache_params::register_params(registry)?;
        registry.register(
            SHM_DIR_PARAM,
            Value::Str(rbtl_mpool::shm_dir().display().to_string()),
            "directory of shared-memory segments (also read by the launcher's cleanup)",
        )?;
        for c in &self.components {
            c.register_params(registry)?;
        }
        Ok(())
    }

    /// Which components the `btl` parameter selects, in framework order.
    pub fn selected(&self, config: &Config) -> Result<Vec<&'static str>> {
        let list = config.list(SELECT_PARAM)?;
        let names = self.names();
        let exclude = list.first().is_some_and(|f| f.starts_with('^'));
        let mut named = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let name = if i == 0 && exclude {
                &item[1..]
            } else {
                item.as_str()
            };
            if name.starts_with('^') {
                return Err(Error::NotAvailable(format!(
                    "btl = {}: `^` must come first and applies to the whole list; \
                     include and exclude cannot be mixed",
                    list.join(",")
                )));
            }
            if !names.contains(&name) {
                return Err(Error::UnknownTransport {
                    name: name.to_string(),
                    valid: names.iter().map(|n| n.to_string()).collect(),
                });
            }
            named.push(name);
        }
        Ok(names
            .into_iter()
            .filter(|n| list.is_empty() || named.contains(n) != exclude)
            .collect())
    }

    /// Initialise the selected components and return their modules, highest
    /// exclusivity first.
    pub fn open(&mut self, config: &Config, modex: &mut dyn Modex) -> Result<Vec<Box<dyn Module>>> {
        let selected = self.selected(config)?;
        let mut modules = Vec::new();
        for c in self.components.iter_mut() {
            if selected.contains(&c.name()) {
                let found = c.init(config, modex)?;
                tracing::debug!(component = c.name(), modules = found.len(), "opened");
                modules.extend(found);
            }
        }
        modules.sort_by_key(|m| std::cmp::Reverse(m.attributes().exclusivity));
        Ok(modules)
    }

    /// Why selected components opened no module, as far as they say: `name: why`
    /// each, after [`Framework::open`].
    pub fn closed(&self) -> Vec<String> {
        self.components
            .iter()
            .filter_map(|c| Some(format!("{}: {}", c.name(), c.closed_why()?)))
            .collect()
    }
}
