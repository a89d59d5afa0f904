//! The error type shared by every part of this crate.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong while mapping memory or handing out fragments.
///
/// Each message says what happened and, where there is one, what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A region of zero bytes was asked for.
    #[error("a memory region must be at least one byte long; ask for a non-zero length")]
    ZeroLength,

    /// The requested length overflows once rounded up to the page size.
    #[error("length {len} is too large to map once rounded up to whole pages")]
    TooLarge {
        /// The length that was asked for.
        len: usize,
    },

    /// An anonymous mapping could not be made.
    #[error(
        "cannot map {len} bytes of anonymous memory: {source}; ask for less, \
         or check `ulimit -v` and vm.overcommit_memory"
    )]
    Map {
        /// Bytes asked for.
        len: usize,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },

    /// `O_EXCL` creation of a shared segment failed because the file exists.
    #[error(
        "shared segment {path} already exists; use another tag, or call cleanup_stale() \
         if a crashed process left it behind"
    )]
    AlreadyExists {
        /// The file that is in the way.
        path: PathBuf,
    },

    /// A shared segment file could not be created or sized.
    #[error(
        "cannot create shared segment {path}: {source}; check that the directory exists, \
         is writable and has room (set RBTL_SHM_DIR to use another directory)"
    )]
    Create {
        /// The file that was being created.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },

    /// An unnamed shared segment could not be created, sized or sealed.
    #[error(
        "cannot create an unnamed shared segment `{tag}` of {len} bytes: {source}; \
         ask for less (memfd_create needs Linux 3.17 or later)"
    )]
    CreateUnnamed {
        /// Its tag.
        tag: String,
        /// Bytes asked for.
        len: usize,
        /// What the system said.
        #[source]
        source: io::Error,
    },

    /// Another process's unnamed segment could not be opened through /proc.
    #[error(
        "cannot open the shared segment of process {pid} through /proc/{pid}/fd/{fd}: \
         {source}; the processes must run as the same user in one pid namespace, and the \
         owner must still be alive"
    )]
    OpenOfProcess {
        /// The owner.
        pid: u32,
        /// Its descriptor of the segment.
        fd: i32,
        /// What the system said.
        #[source]
        source: io::Error,
    },

    /// An existing shared segment could not be opened.
    #[error(
        "cannot open shared segment {path}: {source}; the owner may have exited or unlinked \
         it already (peers must open a segment before its owner calls unlink()), or \
         RBTL_SHM_DIR differs between the processes"
    )]
    Open {
        /// The file that was being opened.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },

    /// A shared segment file exists but cannot be mapped.
    #[error("cannot map shared segment {path} ({len} bytes): {source}")]
    MapShared {
        /// The segment file.
        path: PathBuf,
        /// Its length.
        len: usize,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },

    /// A shared segment file could not be removed.
    #[error("cannot unlink shared segment {path}: {source}; remove it by hand")]
    Unlink {
        /// The segment file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },

    /// A segment tag or name is not acceptable.
    #[error("invalid shared segment tag or name {name:?}: {why}")]
    InvalidName {
        /// The offending tag or name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },

    /// The shared-memory directory could not be listed.
    #[error("cannot scan {dir} for stale segments: {source}; check RBTL_SHM_DIR")]
    Scan {
        /// The directory being scanned.
        dir: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },

    /// Process information could not be read from `/proc`.
    #[error("cannot read process information from {path}: {source}; /proc must be mounted")]
    Proc {
        /// The `/proc` file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },

    /// The free list is at its `max_frags` limit and nothing is free.
    #[error(
        "free list exhausted: all {max_frags} fragments are in use; progress outstanding \
         operations so fragments come back and retry, or raise max_frags"
    )]
    Exhausted {
        /// The configured limit.
        max_frags: usize,
    },

    /// A fixed-size chunk source (such as a `CarveSource`) has no room left.
    #[error(
        "chunk source is full: asked for {requested} bytes but only {remaining} of \
         {capacity} are left; progress outstanding operations and retry, or create a \
         larger region"
    )]
    SourceFull {
        /// Bytes asked for.
        requested: usize,
        /// Bytes left in the source.
        remaining: usize,
        /// Total bytes the source can hand out.
        capacity: usize,
    },

    /// A free-list configuration makes no sense.
    #[error("invalid free-list configuration: {0}")]
    InvalidConfig(String),

    /// A chunk registration callback failed.
    #[error("registering a free-list chunk failed: {reason}")]
    Registration {
        /// Why the registration failed.
        reason: String,
    },
}

impl Error {
    /// True for errors that go away once fragments are returned
    /// ([`Error::Exhausted`] and [`Error::SourceFull`]): transports map these
    /// to "retry after progress" rather than to a failure.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Exhausted { .. } | Error::SourceFull { .. })
    }
}
