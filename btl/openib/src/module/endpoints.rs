//! The module's peers: adding them from what each process published, removing them,
//! connecting them on first use through the connection method both sides chose, and
//! giving up on connections not up by their deadline.

use super::OpenibModule;
use crate::address::Address;
use crate::flow::Credits;
use crate::peer::{Link, Peer};
use rbtl_btl::{Endpoint, Error, Modex, PeerFailure, Proc, Result};
use rbtl_cpc::deadline::timed_out;
use rbtl_cpc::select::{self, Offer};
use std::time::Instant;

impl OpenibModule {
    pub(super) fn endpoint(&mut self, ep: Endpoint) -> Result<&mut Peer> {
        // (`let else`, not `ok_or`: that builds and drops an error on every send.)
        let Some(peer) = self.core.peers.get_mut(ep.0 as usize) else {
            return Err(Error::UnknownEndpoint(ep.0));
        };
        Ok(peer)
    }

    /// Make sure `ep` is connected or on its way; a failed peer is an error.
    pub(super) fn connect(&mut self, ep: Endpoint) -> Result<()> {
        let peer = self.endpoint(ep)?;
        match &peer.link {
            Link::Up | Link::Connecting => Ok(()),
            Link::Failed(why) => Err(Error::PeerFailed {
                rank: peer.rank,
                why: why.clone(),
            }),
            Link::Idle => {
                peer.link = Link::Connecting;
                let (rank, cpc) = (peer.rank, peer.cpc);
                self.core.connecting += 1;
                self.core.deadlines.start(rank, Instant::now());
                if let Err(e) = self.cpcs[cpc].0.start_connect(rank, &mut self.core) {
                    let why = PeerFailure::Connect(e.to_string());
                    self.core.fail(ep.0 as usize, why.clone());
                    return Err(Error::PeerFailed { rank, why });
                }
                // A method may fail the peer at once through its host (`xrc`: its
                // node's connection broke before).
                if let Link::Failed(why) = &self.core.peers[ep.0 as usize].link {
                    return Err(Error::PeerFailed {
                        rank,
                        why: why.clone(),
                    });
                }
                Ok(())
            }
        }
    }

    /// Give up on the connections not up by their deadline (`btl_openib_connect_timeout`
    /// after they were first needed): each one's connection method drops it, and the
    /// peer fails, saying what the method was waiting for; what waits for it fails with
    /// `PeerFailed`, and the error callback hears. How many were given up.
    pub(super) fn expire_connections(&mut self) -> usize {
        let now = Instant::now();
        if !self.core.deadlines.due(now) {
            return 0;
        }
        let waited = self.core.deadlines.timeout();
        let expired = self.core.deadlines.expired(now);
        for &rank in &expired {
            let Some(&ep) = self.core.by_rank.get(&rank) else {
                continue;
            };
            if !matches!(self.core.peers[ep].link, Link::Connecting) {
                continue;
            }
            let cpc = self.core.peers[ep].cpc;
            self.cpcs[cpc].0.time_out(rank, waited, &mut self.core);
            if matches!(self.core.peers[ep].link, Link::Connecting) {
                // The method had nothing pending for it (it never started): fail it all
                // the same.
                let name = self.cpcs[cpc].0.name();
                let why = timed_out(
                    name,
                    waited,
                    "its connection method had no handshake under way",
                );
                self.core.fail(ep, PeerFailure::Connect(why.to_string()));
            }
        }
        expired.len()
    }

    /// (`Module::add_procs`) An endpoint for each of `procs`: a peer, new or known,
    /// where the process published an address on this port's subnet; `None` for this
    /// process and those elsewhere. Peers connect on first use.
    pub(super) fn add_peers(
        &mut self,
        procs: &[Proc],
        modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        let local: Vec<Offer> = self.cpcs.iter().map(|c| c.1.clone()).collect();
        let mut out = Vec::with_capacity(procs.len());
        let mut xrc_peers = None;
        for p in procs {
            if p.rank == self.core.rank {
                out.push(None);
                continue;
            }
            if let Some(&ep) = self.core.by_rank.get(&p.rank) {
                out.push(Some(Endpoint(ep as u32)));
                continue;
            }
            let Some(blob) = modex.lookup(p.rank, &self.modex_key)? else {
                out.push(None);
                continue;
            };
            let address = Address::decode(&blob)
                .map_err(|why| Error::Modex(format!("rank {}'s address: {why}", p.rank)))?;
            if address.subnet != self.subnet {
                out.push(None);
                continue;
            }
            let (shared, remote) = (address.shared, address.offers);
            let (li, ri) = select::find_match(&local, &remote, p.rank)
                .map_err(|e| Error::NotAvailable(format!("openib: {e}")))?;
            // Over xrc both receive through their XRC shared receive queue, with no
            // credits; otherwise credits flow only between ranks that both count them.
            let xrc = self.cpcs[li].0.name() == crate::xrc::NAME;
            let ours = self.core.shared.is_some();
            if !xrc && shared != ours {
                let how = |shared: bool| match shared {
                    true => "through a shared receive queue",
                    false => "with per-peer buffers",
                };
                return Err(Error::NotAvailable(format!(
                    "openib: rank {} receives {}, this rank (rank {}) {}: every rank must set \
                     btl_openib_srq_depth alike (0, or more than 0)",
                    p.rank,
                    how(shared),
                    self.core.rank,
                    how(ours)
                )));
            }
            self.cpcs[li]
                .0
                .endpoint_init(p.rank, &remote[ri].blob)
                .map_err(|e| Error::NotAvailable(format!("openib: {e}")))?;
            let s = self.core.settings;
            let ep = self.core.peers.len();
            let (per_peer, shared) = crate::core::cq_entries(self.core.caps, &s);
            if shared + (ep + 1) * per_peer > self.core.cq_depth {
                return Err(Error::NotAvailable(format!(
                    "openib: the completion queue's {} entries hold {} peers of {per_peer}; \
                     lower btl_openib_recv_depth, btl_openib_rdma_depth or \
                     btl_openib_srq_depth",
                    self.core.cq_depth,
                    (self.core.cq_depth - shared.min(self.core.cq_depth)) / per_peer
                )));
            }
            self.core.peers.push(Peer {
                rank: p.rank,
                node: p.node.clone(),
                cpc: li,
                link: Link::Idle,
                qp: None,
                xrc: None,
                recv: Vec::new(),
                credits: match (xrc, s.srq_depth) {
                    (false, 0) => Credits::new(s.recv_depth, s.rsv_depth),
                    _ => Credits::unlimited(),
                },
                sq_free: 0,
                waiting: Default::default(),
                rdma_in_flight: 0,
                credit_due: false,
                credit_in_flight: false,
                unsignaled: 0,
                unposted: Vec::new(),
                removed: false,
            });
            self.core.by_rank.insert(p.rank, ep);
            out.push(Some(Endpoint(ep as u32)));
            if xrc {
                xrc_peers = Some(li);
            }
        }
        // `xrc` learns of its new peers at once, and opens the node's domain while
        // every process of the node is in `add_procs`.
        if let Some(i) = xrc_peers {
            self.cpcs[i].0.progress(&mut self.core);
        }
        Ok(out)
    }

    /// (`Module::del_procs`) Fail the peers behind `endpoints` (what waits for them
    /// fails with them) and let their connection methods forget them.
    pub(super) fn remove_peers(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            let peer = self.endpoint(ep)?;
            let (rank, cpc) = (peer.rank, peer.cpc);
            if !matches!(peer.link, Link::Failed(_)) {
                self.core.fail(ep.0 as usize, PeerFailure::Removed);
            }
            self.core.peers[ep.0 as usize].removed = true;
            self.cpcs[cpc].0.endpoint_finalize(rank);
        }
        Ok(())
    }
}
