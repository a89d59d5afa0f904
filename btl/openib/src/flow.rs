//! Per-peer credit-based flow control (Open MPI openib's `rd_credits` and reserved
//! credit buffers). Each side posts `depth` receive buffers for messages and `rsv`
//! more for credit-only messages. A message is sent only against a credit; every
//! message returns, in its trailer, the buffers its sender has reposted since its last
//! message. When nothing flows back, a credit-only message returns them once half are
//! owed; it uses a reserved buffer, and reserved buffers come back the same way. So a
//! sender never sends into a receive queue with no buffer posted (no RNR retries) and
//! no message is dropped.

/// One peer's credits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Credits {
    send: u32,
    rsv: u32,
    owed: u32,
    rsv_owed: u32,
    threshold: u32,
    /// Sends need no credit (the peer receives through a shared receive queue).
    unlimited: bool,
}

impl Credits {
    /// The peer has posted `depth` buffers for messages and `rsv` for credit messages.
    pub fn new(depth: u32, rsv: u32) -> Credits {
        Credits {
            send: depth,
            rsv,
            owed: 0,
            rsv_owed: 0,
            threshold: (depth / 2).max(1),
            unlimited: false,
        }
    }

    /// No credits to count: the peer's receive buffers are shared by all its peers
    /// (a shared receive queue), and the device's receiver-not-ready retries hold a
    /// burst back when they run out. Nothing is owed or returned.
    pub fn unlimited() -> Credits {
        Credits {
            unlimited: true,
            ..Credits::new(0, 0)
        }
    }

    /// Take a credit for a message; false when none is left.
    pub fn take(&mut self) -> bool {
        if self.unlimited {
            return true;
        }
        let ok = self.send > 0;
        self.send -= u32::from(ok);
        ok
    }

    /// Take a reserved credit for a credit-only message; false when none is left.
    pub fn take_rsv(&mut self) -> bool {
        let ok = self.rsv > 0;
        self.rsv -= u32::from(ok);
        ok
    }

    /// Credits the peer returned in a trailer.
    pub fn returned(&mut self, credits: u16, rsv: u8) {
        self.send += u32::from(credits);
        self.rsv += u32::from(rsv);
    }

    /// A receive buffer of the peer's was reposted (a reserved one if `credit_only`).
    pub fn reposted(&mut self, credit_only: bool) {
        if credit_only {
            self.rsv_owed += 1;
        } else {
            self.owed += 1;
        }
    }

    /// What the next message returns; owing starts again from zero.
    pub fn piggyback(&mut self) -> (u16, u8) {
        let c = self.owed.min(u32::from(u16::MAX));
        let r = self.rsv_owed.min(u32::from(u8::MAX));
        self.owed -= c;
        self.rsv_owed -= r;
        (c as u16, r as u8)
    }

    /// Whether enough is owed to send a credit-only message now.
    pub fn wants_credit_message(&self) -> bool {
        self.owed >= self.threshold && self.rsv > 0
    }

    /// Credits left for messages.
    pub fn available(&self) -> u32 {
        self.send
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-way stream: the sender never exceeds the posted buffers and never stalls
    /// for good, whatever the receiver's pace.
    #[test]
    fn unlimited_credits_always_allow_a_send_and_owe_nothing() {
        let mut c = Credits::unlimited();
        for _ in 0..1000 {
            assert!(c.take());
        }
        assert_eq!(c.piggyback(), (0, 0));
        assert!(!c.wants_credit_message());
    }

    #[test]
    fn a_one_way_stream_never_overruns_and_never_stalls() {
        let (depth, rsv) = (8, 2);
        let mut a = Credits::new(depth, rsv); // a's view of b's buffers
        let mut b = Credits::new(depth, rsv); // b's view of a's buffers
        let (mut b_posted, mut a_rsv_posted) = (depth, rsv);
        let mut in_flight_to_b = Vec::new();
        let mut in_flight_to_a: Vec<(u16, u8)> = Vec::new();
        let mut delivered = 0;
        for step in 0..10_000u32 {
            // a sends whenever it may.
            if a.take() {
                assert!(
                    b_posted > 0,
                    "a message with no buffer posted at step {step}"
                );
                b_posted -= 1;
                in_flight_to_b.push(a.piggyback());
            }
            // b handles some, reposts, and returns credits when owed.
            if step % 3 == 0 {
                for (c, r) in in_flight_to_b.drain(..) {
                    b.returned(c, r);
                    b_posted += 1;
                    b.reposted(false);
                    delivered += 1;
                }
                if b.wants_credit_message() {
                    assert!(b.take_rsv());
                    assert!(a_rsv_posted > 0, "a credit message with no reserved buffer");
                    a_rsv_posted -= 1;
                    in_flight_to_a.push(b.piggyback());
                }
            }
            for (c, r) in in_flight_to_a.drain(..) {
                a.returned(c, r);
                a_rsv_posted += 1;
                a.reposted(true);
            }
        }
        assert!(delivered > 5_000, "only {delivered} delivered");
    }

    #[test]
    fn piggyback_returns_everything_owed_once() {
        let mut c = Credits::new(4, 1);
        c.reposted(false);
        c.reposted(false);
        c.reposted(true);
        assert!(c.wants_credit_message());
        assert_eq!(c.piggyback(), (2, 1));
        assert_eq!(c.piggyback(), (0, 0));
        for _ in 0..4 {
            assert!(c.take());
        }
        assert!(!c.take());
        c.returned(3, 0);
        assert_eq!(c.available(), 3);
    }
}
