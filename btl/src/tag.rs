//! Active-message tags (Open MPI: `mca_btl_base_tag_t` and the `MCA_BTL_TAG_*` ranges).

use std::fmt;

/// A tag selects the receive callback of a message: 0..=255, in ranges reserved per
/// layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(pub u8);

impl Tag {
    /// First tag of the transports' own control messages (0x00..0x40): not
    /// registrable by upper layers.
    pub const BTL: Tag = Tag(0x00);
    /// First tag of the point-to-point message layer's range (0x40..0x60;
    /// Open MPI's `MCA_BTL_TAG_PML`).
    pub const PML: Tag = Tag(0x40);
    /// First tag of the one-sided layer's range (0x60..0x80; `MCA_BTL_TAG_OSC_RDMA`).
    pub const OSC: Tag = Tag(0x60);
    /// First tag free for any other user (0x80..=0xff; `MCA_BTL_TAG_USR`).
    pub const USR: Tag = Tag(0x80);

    /// Whether the tag is reserved for transports themselves.
    pub fn is_reserved(self) -> bool {
        self < Tag::PML
    }

    /// Every tag an upper layer may register.
    pub fn registrable() -> impl Iterator<Item = Tag> {
        (Tag::PML.0..=u8::MAX).map(Tag)
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x}", self.0)
    }
}
