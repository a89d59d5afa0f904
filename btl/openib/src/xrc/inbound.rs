//! The receiving side of XRC: the targets this process holds for other processes'
//! initiators, and the answers to their requests (Open MPI: `udcm_xrc_handle_xconnect`).
//!
//! A sender's messages to this process come through one target of this node, which
//! names the sender: the first process of the node it reached made the target for its
//! initiator (`Connect`); every other one opens that same target (`Attach`), a
//! reference that keeps it alive while this process still hears the sender. A sender
//! that connects or attaches again (its node's connection was made anew) replaces its
//! earlier target here; one that ended, or was forgotten, releases it.

use super::engine::{Device, Event};
use rbtl_cpc::xrc::Message;
use std::collections::HashMap;

/// The targets held for senders.
#[derive(Debug, Default)]
pub struct Inbound {
    /// Per sender: the target its messages to this process come through.
    by_sender: HashMap<u32, u32>,
}

impl Inbound {
    /// The target `sender`'s messages come through, if it connected or attached.
    pub fn target_of(&self, sender: u32) -> Option<u32> {
        self.by_sender.get(&sender).copied()
    }

    /// The answer to `sender`'s request `m` (`None` for a message that is not a
    /// request); what it changes for the receives goes to `events`.
    pub fn answer(
        &mut self,
        sender: u32,
        m: Message,
        dev: &mut impl Device,
        events: &mut Vec<Event>,
    ) -> Option<Message> {
        match m {
            Message::Connect(initiator) => {
                // Its earlier target, if any, served an initiator it no longer uses.
                self.release(sender, dev, events);
                let made = dev
                    .srqn()
                    .and_then(|srqn| Ok((dev.create_target(&initiator)?, srqn)));
                Some(match made {
                    Ok((target, srqn)) => {
                        self.hold(sender, target.qpn, events);
                        Message::Accept {
                            initiator: initiator.qpn,
                            target,
                            srqn,
                        }
                    }
                    Err(why) => {
                        tracing::warn!(sender, %why, "xrc: no target for a connecting process");
                        Message::Refuse { qpn: initiator.qpn }
                    }
                })
            }
            Message::Attach { qpn } => {
                let srqn = match dev.srqn() {
                    Ok(srqn) => srqn,
                    Err(why) => {
                        tracing::warn!(sender, %why, "xrc: no receive queue for an attaching process");
                        return Some(Message::Refuse { qpn });
                    }
                };
                if self.target_of(sender) == Some(qpn) {
                    return Some(Message::Attached { qpn, srqn });
                }
                self.release(sender, dev, events);
                Some(match dev.open_target(qpn) {
                    Ok(()) => {
                        self.hold(sender, qpn, events);
                        Message::Attached { qpn, srqn }
                    }
                    Err(why) => {
                        tracing::debug!(sender, qpn, %why, "xrc: a target to attach to is gone");
                        Message::Gone { qpn }
                    }
                })
            }
            Message::Accept { .. }
            | Message::Attached { .. }
            | Message::Gone { .. }
            | Message::Refuse { .. } => None,
        }
    }

    fn hold(&mut self, sender: u32, qpn: u32, events: &mut Vec<Event>) {
        self.by_sender.insert(sender, qpn);
        events.push(Event::Serve { qpn, rank: sender });
    }

    /// Release the target held for `sender` (it ended, was forgotten, or moved on).
    pub fn release(&mut self, sender: u32, dev: &mut impl Device, events: &mut Vec<Event>) {
        if let Some(qpn) = self.by_sender.remove(&sender) {
            dev.drop_target(qpn);
            events.push(Event::Unserve { qpn });
        }
    }
}
