//! Choosing connection pseudo-components (Open MPI:
//! `opal_btl_openib_connect_base_select_for_local_port` and `..._find_match`).
//!
//! Per port: the CPCs the configuration allows (`btl_openib_cpc_include` or
//! `btl_openib_cpc_exclude`, never both) are asked whether they can run there; the
//! usable ones, with their priorities (`btl_openib_cpc_<name>_priority` overrides a
//! CPC's own), are published in the modex. Per peer: the CPC both sides offer with the
//! highest priority on either side, ties broken by name so that both sides agree; none
//! in common is an error naming both lists.

use crate::{ConnectionHost, CpcComponent, CpcModule, Error, PortInfo, Selection};
use rbtl_config::{Config, Registry, Value};

/// The include list parameter.
pub const INCLUDE: &str = "btl_openib_cpc_include";
/// The exclude list parameter.
pub const EXCLUDE: &str = "btl_openib_cpc_exclude";

/// The priority override parameter of CPC `name`.
pub fn priority_param(name: &str) -> String {
    format!("btl_openib_cpc_{name}_priority")
}

/// Register the selection parameters for these CPCs, and each CPC's own.
pub fn register_params<H: ConnectionHost + ?Sized>(
    registry: &mut Registry,
    components: &[Box<dyn CpcComponent<H>>],
) -> Result<(), Error> {
    registry.register(
        INCLUDE,
        Value::List(Vec::new()),
        "connection methods to use, in no particular order (empty: all)",
    )?;
    registry.register(
        EXCLUDE,
        Value::List(Vec::new()),
        "connection methods not to use",
    )?;
    for c in components {
        registry.register(
            &priority_param(c.name()),
            Value::Int(-1),
            "priority of this connection method (0-100; -1 keeps its own)",
        )?;
        c.register_params(registry)?;
    }
    Ok(())
}

/// The CPCs the configuration allows, in the components' order.
pub fn allowed<'a>(config: &Config, names: &[&'a str]) -> Result<Vec<&'a str>, Error> {
    let include = config.list(INCLUDE)?;
    let exclude = config.list(EXCLUDE)?;
    if !include.is_empty() && !exclude.is_empty() {
        return Err(Selection::IncludeAndExclude {
            include: include.to_vec(),
            exclude: exclude.to_vec(),
        }
        .into());
    }
    for name in include.iter().chain(exclude) {
        if !names.contains(&name.as_str()) {
            return Err(Selection::Unknown {
                name: name.clone(),
                valid: names.iter().map(|n| n.to_string()).collect(),
            }
            .into());
        }
    }
    Ok(names
        .iter()
        .copied()
        .filter(|n| {
            (include.is_empty() || include.iter().any(|i| i == n))
                && !exclude.iter().any(|e| e == n)
        })
        .collect())
}

/// One usable CPC as published in the modex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// The CPC's name.
    pub name: String,
    /// Its priority (higher wins).
    pub priority: u8,
    /// What a peer needs to connect with it.
    pub blob: Vec<u8>,
}

/// A CPC that can run on a port: its module and what it publishes.
pub type Usable<H> = (Box<dyn CpcModule<H>>, Offer);

/// Ask every allowed CPC about `port`: the usable modules and their offers (highest
/// priority first), or an error saying why none can run there.
pub fn select_for_port<H: ConnectionHost + ?Sized>(
    config: &Config,
    components: &mut [Box<dyn CpcComponent<H>>],
    port: &PortInfo,
) -> Result<Vec<Usable<H>>, Error> {
    let names: Vec<&str> = components.iter().map(|c| c.name()).collect();
    let allowed: Vec<String> = allowed(config, &names)?
        .into_iter()
        .map(String::from)
        .collect();
    let mut usable = Vec::new();
    let mut why_not = Vec::new();
    for c in components
        .iter_mut()
        .filter(|c| allowed.iter().any(|a| a == c.name()))
    {
        match c.query(config, port) {
            Ok(module) => {
                let over = config.int(&priority_param(c.name()))?;
                let priority = if (0..=100).contains(&over) {
                    over as u8
                } else {
                    module.priority()
                };
                let offer = Offer {
                    name: c.name().to_string(),
                    priority,
                    blob: module.modex_blob(),
                };
                usable.push((module, offer));
            }
            Err(e) => why_not.push(e.to_string()),
        }
    }
    if usable.is_empty() {
        return Err(Selection::NoneUsable {
            device: port.device.clone(),
            port: port.port,
            allowed,
            why_not,
        }
        .into());
    }
    usable.sort_by(|a, b| {
        b.1.priority
            .cmp(&a.1.priority)
            .then_with(|| a.1.name.cmp(&b.1.name))
    });
    Ok(usable)
}

/// The offers as modex bytes: per offer, name length, name, priority, blob length,
/// blob.
pub fn encode(offers: &[Offer]) -> Vec<u8> {
    let mut out = vec![offers.len() as u8];
    for o in offers {
        out.push(o.name.len() as u8);
        out.extend_from_slice(o.name.as_bytes());
        out.push(o.priority);
        out.extend_from_slice(&(o.blob.len() as u32).to_le_bytes());
        out.extend_from_slice(&o.blob);
    }
    out
}

/// Offers from modex bytes (all of them: bytes after the last offer are refused).
pub fn decode(bytes: &[u8]) -> Result<Vec<Offer>, Error> {
    let bad = || Error::from(Selection::Malformed { len: bytes.len() });
    let mut rest = bytes;
    let mut take = |n: usize| -> Result<&[u8], Error> {
        let (head, tail) = rest.split_at_checked(n).ok_or_else(bad)?;
        rest = tail;
        Ok(head)
    };
    let count = take(1)?[0];
    let mut offers = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let len = usize::from(take(1)?[0]);
        let name = String::from_utf8(take(len)?.to_vec()).map_err(|_| bad())?;
        let priority = take(1)?[0];
        let blob_len = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?) as usize;
        let blob = take(blob_len)?.to_vec();
        offers.push(Offer {
            name,
            priority,
            blob,
        });
    }
    // Nothing may follow the last offer.
    match take(1) {
        Ok(_) => Err(bad()),
        Err(_) => Ok(offers),
    }
}

/// The CPC to use with a peer: of the names both lists hold, the one with the highest
/// priority on either side, ties broken by name. The same answer on both sides.
/// Indices into `local` and `remote`.
pub fn find_match(local: &[Offer], remote: &[Offer], peer: u32) -> Result<(usize, usize), Error> {
    let mut best: Option<(u8, &str, usize, usize)> = None;
    for (i, l) in local.iter().enumerate() {
        for (j, r) in remote.iter().enumerate().filter(|(_, r)| r.name == l.name) {
            let priority = l.priority.max(r.priority);
            let better = match best {
                None => true,
                Some((p, name, _, _)) => priority > p || (priority == p && l.name.as_str() < name),
            };
            if better {
                best = Some((priority, l.name.as_str(), i, j));
            }
        }
    }
    best.map(|(_, _, i, j)| (i, j)).ok_or_else(|| {
        let names = |o: &[Offer]| o.iter().map(|o| o.name.clone()).collect();
        Error::from(Selection::NoneInCommon {
            peer,
            ours: names(local),
            theirs: names(remote),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No transport: selection never connects.
    struct NoHost;

    impl ConnectionHost for NoHost {
        type Qp = ();
        fn rank(&self) -> u32 {
            0
        }
        fn post_receives(&mut self, _: u32, _: &mut ()) -> Result<(), Error> {
            Ok(())
        }
        fn connected(&mut self, _: u32, _: ()) {}
        fn failed(&mut self, _: u32, _: crate::Failure) {}
        fn heard(&mut self, _: u32) {}
    }

    /// A CPC for the selection logic only: usable where `usable` says, with a fixed
    /// priority. (Real CPCs connect queue pairs; selection does not care how.)
    struct Fixed {
        name: &'static str,
        priority: u8,
        usable: fn(&PortInfo) -> Result<(), crate::Unusable>,
    }

    struct FixedModule(&'static str, u8);

    impl CpcModule<NoHost> for FixedModule {
        fn name(&self) -> &'static str {
            self.0
        }
        fn priority(&self) -> u8 {
            self.1
        }
        fn modex_blob(&self) -> Vec<u8> {
            self.0.as_bytes().to_vec()
        }
        fn endpoint_init(&mut self, _: u32, _: &[u8]) -> Result<(), Error> {
            Ok(())
        }
        fn start_connect(&mut self, _: u32, _: &mut NoHost) -> Result<(), Error> {
            Ok(())
        }
        fn progress(&mut self, _: &mut NoHost) -> usize {
            0
        }
        fn time_out(&mut self, _: u32, _: std::time::Duration, _: &mut NoHost) {}
        fn endpoint_finalize(&mut self, _: u32) {}
        fn finalize(&mut self) {}
    }

    impl CpcComponent<NoHost> for Fixed {
        fn name(&self) -> &'static str {
            self.name
        }
        fn query(
            &mut self,
            _: &Config,
            port: &PortInfo,
        ) -> Result<Box<dyn CpcModule<NoHost>>, Error> {
            (self.usable)(port).map_err(|why| Error::Unusable {
                cpc: self.name,
                device: port.device.clone(),
                port: port.port,
                why,
            })?;
            Ok(Box::new(FixedModule(self.name, self.priority)))
        }
    }

    fn components() -> Vec<Box<dyn CpcComponent<NoHost>>> {
        vec![
            Box::new(Fixed {
                name: "oob",
                priority: 50,
                usable: |_| Ok(()),
            }),
            Box::new(Fixed {
                name: "xrc",
                priority: 60,
                usable: |p| {
                    if p.xrc {
                        Ok(())
                    } else {
                        Err(crate::Unusable::NoXrc { detail: None })
                    }
                },
            }),
            Box::new(Fixed {
                name: "rdma_cm",
                priority: 30,
                usable: |p| {
                    if p.ip_addresses.is_empty() {
                        Err(crate::Unusable::NoIpv4Address)
                    } else {
                        Ok(())
                    }
                },
            }),
        ]
    }

    fn port(ip: bool, xrc: bool) -> PortInfo {
        PortInfo {
            device: "rxe0".into(),
            port: 1,
            ip_addresses: if ip {
                vec!["198.18.0.1".parse().unwrap()]
            } else {
                vec![]
            },
            xrc,
        }
    }

    fn config(settings: &[(&str, &str)]) -> Result<Config, Error> {
        let mut reg = Registry::new();
        register_params(&mut reg, &components())?;
        let mut b = reg.builder();
        for (k, v) in settings {
            b = b.set(k, *v);
        }
        Ok(b.build()?)
    }

    fn offered(settings: &[(&str, &str)], p: &PortInfo) -> Result<Vec<String>, Error> {
        let cfg = config(settings)?;
        Ok(select_for_port(&cfg, &mut components(), p)?
            .into_iter()
            .map(|(_, o)| o.name)
            .collect())
    }

    #[test]
    fn usable_cpcs_by_priority_and_what_query_refuses() {
        assert_eq!(
            offered(&[], &port(true, false)).unwrap(),
            ["oob", "rdma_cm"]
        );
        assert_eq!(
            offered(&[], &port(true, true)).unwrap(),
            ["xrc", "oob", "rdma_cm"]
        );
        assert_eq!(
            offered(&[], &port(false, false)).unwrap(),
            ["oob"],
            "rdma_cm needs an IP address"
        );
        let e = offered(&[(INCLUDE, "rdma_cm,xrc")], &port(false, false)).unwrap_err();
        assert!(
            matches!(&e, Error::Selection(Selection::NoneUsable { allowed, why_not, .. })
                if allowed.len() == 2 && why_not.len() == 2),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(e.contains("no IPv4 address") && e.contains("no XRC"), "{e}");
    }

    #[test]
    fn include_exclude_and_priority_overrides() {
        let p = port(true, true);
        assert_eq!(
            offered(&[(INCLUDE, "rdma_cm,oob")], &p).unwrap(),
            ["oob", "rdma_cm"]
        );
        assert_eq!(
            offered(&[(EXCLUDE, "oob")], &p).unwrap(),
            ["xrc", "rdma_cm"]
        );
        assert_eq!(
            offered(&[("btl_openib_cpc_rdma_cm_priority", "90")], &p).unwrap(),
            ["rdma_cm", "xrc", "oob"]
        );
        let both = offered(&[(INCLUDE, "oob"), (EXCLUDE, "xrc")], &p).unwrap_err();
        assert!(
            matches!(&both, Error::Selection(Selection::IncludeAndExclude { include, exclude })
                if include == &["oob"] && exclude == &["xrc"]),
            "{both:?}"
        );
        let both = both.to_string();
        assert!(both.contains("cannot both be set"), "{both}");
        let unknown = offered(&[(INCLUDE, "oob,udcm")], &p).unwrap_err();
        assert!(
            matches!(&unknown, Error::Selection(Selection::Unknown { name, .. }) if name == "udcm"),
            "{unknown:?}"
        );
        let unknown = unknown.to_string();
        assert!(
            unknown.contains("unknown connection method `udcm`")
                && unknown.contains("oob, xrc, rdma_cm"),
            "{unknown}"
        );
        let param = config(&[("btl_openib_cpc_rdmacm_priority", "1")])
            .unwrap_err()
            .to_string();
        assert!(param.contains("btl_openib_cpc_rdma_cm_priority"), "{param}");
    }

    fn offers(list: &[(&str, u8)]) -> Vec<Offer> {
        list.iter()
            .map(|&(n, p)| Offer {
                name: n.into(),
                priority: p,
                blob: vec![p; 3],
            })
            .collect()
    }

    #[test]
    fn both_sides_pick_the_same_cpc() {
        let a = offers(&[("xrc", 60), ("oob", 50), ("rdma_cm", 30)]);
        let b = offers(&[("oob", 50), ("rdma_cm", 30)]);
        let (i, j) = find_match(&a, &b, 1).unwrap();
        let (j2, i2) = find_match(&b, &a, 0).unwrap();
        assert_eq!((a[i].name.as_str(), b[j].name.as_str()), ("oob", "oob"));
        assert_eq!((i, j), (i2, j2), "symmetric");
        // The higher of the two sides' priorities counts; ties go by name, on both sides.
        let a = offers(&[("oob", 10), ("rdma_cm", 70)]);
        let b = offers(&[("oob", 70), ("rdma_cm", 10)]);
        let (i, _) = find_match(&a, &b, 1).unwrap();
        let (j, _) = find_match(&b, &a, 0).unwrap();
        assert_eq!((a[i].name.as_str(), b[j].name.as_str()), ("oob", "oob"));
    }

    #[test]
    fn no_cpc_in_common_names_both_lists() {
        let e = find_match(&offers(&[("oob", 50)]), &offers(&[("rdma_cm", 30)]), 3).unwrap_err();
        assert!(
            matches!(
                &e,
                Error::Selection(Selection::NoneInCommon { peer: 3, .. })
            ),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(
            e.contains("rank 3")
                && e.contains("[oob]")
                && e.contains("[rdma_cm]")
                && e.contains(INCLUDE),
            "{e}"
        );
    }

    #[test]
    fn offers_travel_through_the_modex_bytes() {
        let list = offers(&[("xrc", 60), ("oob", 50)]);
        assert_eq!(decode(&encode(&list)).unwrap(), list);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
        let bytes = encode(&list);
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "truncated at {cut}");
        }
    }
}
