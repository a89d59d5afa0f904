//! The receive callbacks of a module, by tag (Open MPI:
//! `mca_btl_base_active_message_trigger`).

use crate::{AmCallback, Error, Result, Tag};

/// Callbacks by tag. A callback is taken out while it runs (it gets the module, which
/// owns this table) and put back after; a tag stays registered meanwhile.
pub struct AmTable {
    /// (An array, not a vector: a `u8` index needs no bounds check.)
    callbacks: Box<[Option<AmCallback>; 256]>,
    registered: [bool; 256],
}

impl Default for AmTable {
    fn default() -> Self {
        AmTable {
            callbacks: Box::new([const { None }; 256]),
            registered: [false; 256],
        }
    }
}

impl AmTable {
    /// Install `callback` for `tag`; reserved tags are refused.
    pub fn register(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        check_not_reserved(tag)?;
        self.callbacks[usize::from(tag.0)] = Some(callback);
        self.registered[usize::from(tag.0)] = true;
        Ok(())
    }

    /// Whether `tag` has a callback (running or not).
    #[inline]
    pub fn is_registered(&self, tag: Tag) -> bool {
        self.registered[usize::from(tag.0)]
    }

    /// Take `tag`'s callback out to run it; `None` while it is already running.
    #[inline]
    pub fn take(&mut self, tag: Tag) -> Option<AmCallback> {
        self.callbacks[usize::from(tag.0)].take()
    }

    /// Put a callback back after it ran, unless it registered a successor meanwhile.
    #[inline]
    pub fn restore(&mut self, tag: Tag, callback: AmCallback) {
        self.callbacks[usize::from(tag.0)].get_or_insert(callback);
    }
}

/// Refuse tags reserved for transports.
pub fn check_not_reserved(tag: Tag) -> Result<()> {
    if tag.is_reserved() {
        Err(Error::BadTag {
            tag,
            why: "reserved for transports",
        })
    } else {
        Ok(())
    }
}
