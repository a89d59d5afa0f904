//! A module's address in the modex: its port's subnet, whether it receives through a
//! shared receive queue, and the connection methods it offers (`rbtl_cpc::select`).

use rbtl_cpc::select::{self, Offer};

/// A peer's address as published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Address {
    /// The port's subnet prefix (the first half of its GID).
    pub subnet: [u8; 8],
    /// It receives through a shared receive queue.
    pub shared: bool,
    /// Its connection methods.
    pub offers: Vec<Offer>,
}

impl Address {
    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.subnet.to_vec();
        b.push(u8::from(self.shared));
        b.extend(select::encode(&self.offers));
        b
    }

    /// From its bytes; why not, if they are not one.
    pub fn decode(blob: &[u8]) -> Result<Address, String> {
        let Some((subnet, [shared @ (0 | 1), offers @ ..])) = blob.split_first_chunk::<8>() else {
            return Err(format!("an openib address of {} bytes", blob.len()));
        };
        Ok(Address {
            subnet: *subnet,
            shared: *shared == 1,
            offers: select::decode(offers).map_err(|e| e.to_string())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn address() -> impl Strategy<Value = Address> {
        let offer = (
            "[a-z_]{0,8}",
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..24),
        )
            .prop_map(|(name, priority, blob)| Offer {
                name,
                priority,
                blob,
            });
        (
            any::<[u8; 8]>(),
            any::<bool>(),
            prop::collection::vec(offer, 0..3),
        )
            .prop_map(|(subnet, shared, offers)| Address {
                subnet,
                shared,
                offers,
            })
    }

    proptest! {
        /// Any bytes, and addresses cut, extended or with a byte changed: no panic;
        /// what decodes is exactly the bytes of what it decodes to.
        #[test]
        fn addresses_decode_exactly_or_are_refused(
            bytes in prop_oneof![
                prop::collection::vec(any::<u8>(), 0..80),
                (address(), any::<prop::sample::Index>(), any::<u8>(), 0..3u8).prop_map(
                    |(a, at, byte, how)| {
                        let mut b = a.encode();
                        let i = at.index(b.len());
                        match how {
                            0 => b.truncate(i),
                            1 => b[i] = byte,
                            _ => b.push(byte),
                        }
                        b
                    }
                ),
            ]
        ) {
            if let Ok(a) = Address::decode(&bytes) {
                prop_assert_eq!(a.encode(), bytes);
            }
        }

        #[test]
        fn addresses_round_trip(a in address()) {
            prop_assert_eq!(Address::decode(&a.encode()), Ok(a));
        }
    }
}
