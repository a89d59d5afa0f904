// Over 600 lines on purpose: one type, its two kinds of segment (named, unnamed) with
// how each is made, opened and cleaned up, and its tests; its constructors share private
// parts that other files would have to open up.
//! Shared-memory segments: named ones, files under `/dev/shm` (or `$RBTL_SHM_DIR`)
//! that other processes map by name, with cleanup of segments left behind by
//! processes that died without removing them; and unnamed ones
//! ([`SharedRegion::create_unnamed`]), which exist only while a process maps them or
//! holds their descriptor, and which peers open through `/proc/<pid>/fd/<fd>`.
//!
//! Segment files are named `rbtl.<pid>.<starttime>.<tag>`, where `starttime`
//! is field 22 of the owner's `/proc/<pid>/stat` (clock ticks since boot). The
//! pair identifies the owning process even when its pid is later reused, which
//! is what [`cleanup_stale`] relies on.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::{MmapMut, MmapOptions};

use crate::error::Error;
use crate::region::Mapping;

/// Environment variable that overrides the segment directory; read on every call.
pub const SHM_DIR_ENV: &str = "RBTL_SHM_DIR";

/// Directory used when [`SHM_DIR_ENV`] is not set.
pub const DEFAULT_SHM_DIR: &str = "/dev/shm";

/// First component of every segment file name.
pub const SEGMENT_PREFIX: &str = "rbtl";

/// Longest tag accepted by [`SharedRegion::create`].
pub const MAX_TAG_LEN: usize = 200;

/// The directory segments live in: `$RBTL_SHM_DIR` if set and non-empty, else `/dev/shm`.
pub fn shm_dir() -> PathBuf {
    match std::env::var_os(SHM_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(DEFAULT_SHM_DIR),
    }
}

/// Fields of `/proc/<pid>/stat` this crate needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcStat {
    state: char,
    start_time: u64,
}

/// Parses the state (field 3) and start time (field 22) of a `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<ProcStat> {
    // The command name (field 2) is in parentheses and may contain spaces or
    // parentheses itself, so fields are counted from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // `fields` now starts at field 4; field 22 is 18 further on.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

/// Start time of the calling process, as used in segment names.
pub fn own_start_time() -> Result<u64, Error> {
    let path = PathBuf::from("/proc/self/stat");
    let text = fs::read_to_string(&path).map_err(|source| Error::Proc {
        path: path.clone(),
        source,
    })?;
    parse_stat(&text)
        .map(|s| s.start_time)
        .ok_or_else(|| Error::Proc {
            path,
            source: io::Error::new(io::ErrorKind::InvalidData, "unexpected format"),
        })
}

/// Whether the process that created a segment named with `pid` and `start_time` still exists.
fn owner_alive(pid: u32, start_time: u64) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => match parse_stat(&text) {
            // Same pid and start time: the owner. A zombie or dead task cannot
            // use the segment any more.
            Some(stat) => stat.start_time == start_time && !matches!(stat.state, 'Z' | 'X' | 'x'),
            // Unreadable format: be conservative and keep the segment.
            None => true,
        },
        // No such process (or it exited while we read): gone. Anything else,
        // e.g. permission problems under hidepid: keep the segment.
        Err(err) => !matches!(err.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH)),
    }
}

/// Splits `rbtl.<pid>.<starttime>.<tag>` into pid and start time.
pub fn parse_segment_name(name: &str) -> Option<(u32, u64)> {
    let rest = name.strip_prefix(SEGMENT_PREFIX)?.strip_prefix('.')?;
    let mut parts = rest.splitn(3, '.');
    let pid = parts.next()?;
    let start = parts.next()?;
    let tag = parts.next()?;
    if tag.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !start.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((pid.parse().ok()?, start.parse().ok()?))
}

fn validate_tag(tag: &str) -> Result<(), Error> {
    let bad = |why| {
        Err(Error::InvalidName {
            name: tag.to_owned(),
            why,
        })
    };
    if tag.is_empty() {
        return bad("the tag must not be empty");
    }
    if tag.len() > MAX_TAG_LEN {
        return bad("the tag is longer than 200 bytes");
    }
    if !tag
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return bad("use only ASCII letters, digits, '-', '_' and '.'");
    }
    Ok(())
}

fn validate_name(name: &str) -> Result<(), Error> {
    let bad = |why| {
        Err(Error::InvalidName {
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() || name == "." || name == ".." {
        return bad("pass the name() of an existing segment");
    }
    if name.contains('/') || name.contains('\0') {
        return bad("a segment name is a plain file name, without '/' or NUL");
    }
    if name.len() > 255 {
        return bad("a segment name is at most 255 bytes");
    }
    Ok(())
}

/// Makes sure tmpfs really has room for the segment, so running out shows up
/// here as an error instead of later as SIGBUS on first touch.
fn reserve_space(file: &fs::File, len: usize) -> io::Result<()> {
    // SAFETY: the descriptor is valid for the life of `file`; posix_fallocate
    // only reads its integer arguments.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    match rc {
        0 => Ok(()),
        // Filesystems without fallocate support: the file is already sized.
        libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Opens the file at `path` for reading and writing and returns it with its length;
/// fails through `open_err`, with `not_file` as the reason when it is not a regular
/// file.
fn open_regular(
    path: &Path,
    open_err: impl Fn(io::Error) -> Error,
    not_file: &'static str,
) -> Result<(fs::File, u64), Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(&open_err)?;
    let meta = file.metadata().map_err(&open_err)?;
    if !meta.is_file() {
        return Err(open_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            not_file,
        )));
    }
    Ok((file, meta.len()))
}

/// Maps the first `len` bytes of `file`, the segment at `path`, shared and writable.
///
/// # Safety
///
/// `file` must stay at least `len` bytes long for as long as the mapping lives.
unsafe fn map_file(file: &fs::File, path: &Path, len: usize) -> Result<MmapMut, Error> {
    // SAFETY: the caller's promise.
    unsafe { MmapOptions::new().len(len).map_mut(file) }.map_err(|source| Error::MapShared {
        path: path.to_owned(),
        len,
        source,
    })
}

/// A file under `/dev/shm` (or `$RBTL_SHM_DIR`) mapped shared, that other
/// processes map by [`name`](SharedRegion::name).
///
/// The process that [`create`](SharedRegion::create)s a segment owns it:
/// dropping the owner unmaps and unlinks the file (unless
/// [`unlink`](SharedRegion::unlink) already did). Regions made with
/// [`open`](SharedRegion::open) only unmap on drop.
///
/// Other processes may write the memory at any time, so no safe slice view is
/// offered: access it through [`as_ptr`](SharedRegion::as_ptr) with volatile or
/// atomic operations and your own protocol.
pub struct SharedRegion {
    _map: MmapMut,
    /// An unnamed segment's descriptor, kept open for peers to reach it through /proc.
    file: Option<fs::File>,
    ptr: NonNull<u8>,
    len: usize,
    name: String,
    path: PathBuf,
    owner: bool,
    creator_pid: u32,
    unlinked: AtomicBool,
}

// SAFETY: the mapping is owned by the value and stays put until drop; the raw
// pointer is only its cached address. No method hands out references into the
// memory, so sharing or sending the handle cannot create aliasing Rust references.
unsafe impl Send for SharedRegion {}
// SAFETY: see the Send impl above; `unlinked` is atomic.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    /// Creates (`O_EXCL`, mode 0600) and maps a new segment of `len` bytes in
    /// [`shm_dir()`], named `rbtl.<pid>.<starttime>.<tag>`.
    ///
    /// `tag` may hold ASCII letters, digits, `-`, `_` and `.`. The memory is
    /// zero-filled and backed (`posix_fallocate`) so a full tmpfs is reported
    /// now rather than as SIGBUS later.
    pub fn create(tag: &str, len: usize) -> Result<SharedRegion, Error> {
        SharedRegion::create_in(&shm_dir(), tag, len)
    }

    /// [`create`](SharedRegion::create) in an explicit directory.
    pub fn create_in(dir: &Path, tag: &str, len: usize) -> Result<SharedRegion, Error> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        validate_tag(tag)?;
        let pid = std::process::id();
        let start = own_start_time()?;
        let name = format!("{SEGMENT_PREFIX}.{pid}.{start}.{tag}");
        let path = dir.join(&name);

        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| {
                if source.kind() == io::ErrorKind::AlreadyExists {
                    Error::AlreadyExists { path: path.clone() }
                } else {
                    Error::Create {
                        path: path.clone(),
                        source,
                    }
                }
            })?;
        // From here on the file is ours: remove it again on any failure.
        let fail = |err: Error| {
            let _ = fs::remove_file(&path);
            err
        };
        file.set_len(len as u64)
            .and_then(|()| reserve_space(&file, len))
            .map_err(|source| {
                fail(Error::Create {
                    path: path.clone(),
                    source,
                })
            })?;
        // SAFETY: the file was just created exclusively by us with mode 0600 and
        // sized to `len`; nobody else knows its name yet, so it cannot shrink
        // under the mapping. Later truncation by a peer would be a protocol
        // violation the raw-pointer API already leaves to its users.
        let map = unsafe { map_file(&file, &path, len) }.map_err(fail)?;
        tracing::debug!(path = %path.display(), len, "created shared segment");
        Ok(SharedRegion::from_map(map, None, len, name, path, true))
    }

    /// Creates and maps a segment of `len` bytes that has no name in any directory
    /// (`memfd_create`): it exists only while some process maps it or holds its
    /// descriptor, so that a process killed at any moment leaves nothing behind. Its
    /// size is sealed (nobody can shrink it under a mapping). Peers open it with
    /// [`open_of_process`](SharedRegion::open_of_process), given this process's pid
    /// and [`fd`](SharedRegion::fd). `tag` (as for [`create`](SharedRegion::create))
    /// names it in `/proc/<pid>/fd` listings. Its pages are backed as they are first
    /// touched (not reserved up front as [`create`](SharedRegion::create)'s are): a
    /// caller that may not use it all checks the machine's memory for what it could.
    pub fn create_unnamed(tag: &str, len: usize) -> Result<SharedRegion, Error> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        validate_tag(tag)?;
        let name = format!("{SEGMENT_PREFIX}.{tag}");
        let fail = |source: io::Error| Error::CreateUnnamed {
            tag: tag.to_owned(),
            len,
            source,
        };
        let c_name = std::ffi::CString::new(name.as_str()).expect("a valid tag has no NUL");
        // SAFETY: a NUL-terminated name and flags; returns a new descriptor or -1.
        let fd = unsafe {
            libc::memfd_create(c_name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(fail(io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just returned to us, owned by nobody else.
        let file = unsafe { <fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        file.set_len(len as u64).map_err(fail)?;
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on our own descriptor with integer arguments.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
            return Err(fail(io::Error::last_os_error()));
        }
        // SAFETY: the segment was just created by us and sized to `len`; its size is
        // sealed, so it cannot shrink under the mapping.
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(fail)?;
        let path = PathBuf::from(format!("/proc/{}/fd/{fd}", std::process::id()));
        let mut region = SharedRegion::from_map(map, Some(file), len, name, path, true);
        // Nothing to remove, ever.
        region.unlinked = AtomicBool::new(true);
        tracing::debug!(fd, len, "created unnamed shared segment");
        Ok(region)
    }

    /// The descriptor of a segment made by
    /// [`create_unnamed`](SharedRegion::create_unnamed), which peers pass with this
    /// process's pid to [`open_of_process`](SharedRegion::open_of_process); `None` for
    /// other segments.
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.file.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Maps the unnamed segment that process `pid` holds as descriptor `fd`, through
    /// `/proc/<pid>/fd/<fd>`. This needs the rights to read that process's memory
    /// (the same user, in the same pid namespace), as cross-memory attach does. The
    /// result is not the owner.
    pub fn open_of_process(pid: u32, fd: i32) -> Result<SharedRegion, Error> {
        let path = PathBuf::from(format!("/proc/{pid}/fd/{fd}"));
        let open_err = |source| Error::OpenOfProcess { pid, fd, source };
        let not_file = "not a shared-memory segment (not a regular file)";
        let (file, file_len) = open_regular(&path, open_err, not_file)?;
        let len = usize::try_from(file_len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| {
                open_err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "empty, or larger than the address space",
                ))
            })?;
        // SAFETY: a segment of `create_unnamed` is sized before anyone can learn its
        // descriptor, and its size is sealed. (Anything else a peer might name is at
        // worst a file we map and then refuse: users check its contents first.)
        let map = unsafe { map_file(&file, &path, len) }?;
        let name = path.display().to_string();
        Ok(SharedRegion::from_map(map, None, len, name, path, false))
    }

    /// Maps an existing segment by the name its owner's [`name`](SharedRegion::name)
    /// returned, looked up in [`shm_dir()`]. The result is not the owner.
    pub fn open(name: &str) -> Result<SharedRegion, Error> {
        SharedRegion::open_in(&shm_dir(), name)
    }

    /// [`open`](SharedRegion::open) in an explicit directory.
    pub fn open_in(dir: &Path, name: &str) -> Result<SharedRegion, Error> {
        validate_name(name)?;
        let path = dir.join(name);
        let open_err = |source| Error::Open {
            path: path.clone(),
            source,
        };
        let (file, file_len) = open_regular(&path, open_err, "not a regular file")?;
        let len = usize::try_from(file_len).map_err(|_| {
            open_err(io::Error::new(
                io::ErrorKind::InvalidData,
                "segment larger than the address space",
            ))
        })?;
        if len == 0 {
            return Err(open_err(io::Error::new(
                io::ErrorKind::InvalidData,
                "segment is empty (not sized by its owner yet?)",
            )));
        }
        // SAFETY: the segment was sized by its owner before its name was
        // published and is never truncated by this crate; see create_in.
        let map = unsafe { map_file(&file, &path, len) }?;
        Ok(SharedRegion::from_map(
            map,
            None,
            len,
            name.to_owned(),
            path,
            false,
        ))
    }

    fn from_map(
        mut map: MmapMut,
        file: Option<fs::File>,
        len: usize,
        name: String,
        path: PathBuf,
        owner: bool,
    ) -> SharedRegion {
        let ptr = NonNull::new(map.as_mut_ptr()).expect("mmap never returns a null mapping");
        SharedRegion {
            _map: map,
            file,
            ptr,
            len,
            name,
            path,
            owner,
            creator_pid: std::process::id(),
            unlinked: AtomicBool::new(false),
        }
    }

    /// The portable name: the file name under the segment directory, short
    /// enough to send to peers, who pass it to [`open`](SharedRegion::open).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Full path of the segment file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this handle created the segment (and so unlinks it on drop).
    pub fn is_owner(&self) -> bool {
        self.owner
    }

    /// Whether [`unlink`](SharedRegion::unlink) has been called on this handle.
    pub fn is_unlinked(&self) -> bool {
        self.unlinked.load(Ordering::Acquire)
    }

    /// Removes the file now but keeps the mapping, typically once every peer
    /// has opened the segment, so that nothing is left behind even after a
    /// crash. Idempotent; a file already gone is not an error.
    pub fn unlink(&self) -> Result<(), Error> {
        if self.unlinked.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => {
                self.unlinked.store(false, Ordering::Release);
                Err(Error::Unlink {
                    path: self.path.clone(),
                    source,
                })
            }
        }
    }
}

byte_span!(SharedRegion, "mapping");

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // Only the creating process removes the file: a forked child holding a
        // copy of the owner's handle must not pull the segment from under it.
        if self.owner && !self.is_unlinked() && std::process::id() == self.creator_pid {
            match fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(path = %self.path.display(), %err, "cannot unlink shared segment")
                }
            }
        }
    }
}

impl fmt::Debug for SharedRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedRegion")
            .field("path", &self.path)
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("owner", &self.owner)
            .field("unlinked", &self.is_unlinked())
            .finish()
    }
}

// SAFETY: the shared mapping lives as long as the SharedRegion and never moves
// (unlinking the file does not unmap it).
unsafe impl Mapping for SharedRegion {
    fn base_ptr(&self) -> *mut u8 {
        self.as_ptr()
    }
    fn mapped_len(&self) -> usize {
        self.len()
    }
}

/// Removes segments in [`shm_dir()`] left by owners that no longer exist.
/// See [`cleanup_stale_in`].
pub fn cleanup_stale() -> Result<Vec<PathBuf>, Error> {
    cleanup_stale_in(&shm_dir())
}

/// Removes `rbtl.<pid>.<starttime>.<tag>` files in `dir` whose owner is gone:
/// no `/proc/<pid>`, a zombie, or a different start time (the pid was reused).
///
/// Files that do not follow the naming scheme, are not regular files, or
/// belong to a live process are left alone; so are files this user may not
/// remove (logged, not an error). A missing directory yields an empty list.
/// Returns the paths removed.
pub fn cleanup_stale_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Scan {
                dir: dir.to_owned(),
                source,
            })
        }
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Scan {
            dir: dir.to_owned(),
            source,
        })?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        let Some((pid, start)) = parse_segment_name(name) else {
            continue;
        };
        if owner_alive(pid, start) {
            continue;
        }
        match entry.file_type() {
            Ok(ft) if ft.is_file() => {}
            _ => continue,
        }
        let path = entry.path();
        match fs::remove_file(&path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), pid, "removed stale shared segment");
                removed.push(path);
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "cannot remove stale shared segment")
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing() {
        let line =
            "1234 (a b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                state: 'S',
                start_time: 987654
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        let own = fs::read_to_string("/proc/self/stat").unwrap();
        assert!(parse_stat(&own).is_some());
    }

    #[test]
    fn name_parsing() {
        assert_eq!(parse_segment_name("rbtl.12.34.x"), Some((12, 34)));
        assert_eq!(parse_segment_name("rbtl.12.34.x.y"), Some((12, 34)));
        assert_eq!(parse_segment_name("rbtl.12.34."), None);
        assert_eq!(parse_segment_name("rbtl.12.x.y"), None);
        assert_eq!(parse_segment_name("rbtl.+12.3.y"), None);
        assert_eq!(parse_segment_name("other.12.34.x"), None);
        assert_eq!(parse_segment_name("rbtlx.12.34.x"), None);
    }

    #[test]
    fn tags_and_names() {
        assert!(validate_tag("sm-0_seg.1").is_ok());
        assert!(validate_tag("").is_err());
        assert!(validate_tag("a/b").is_err());
        assert!(validate_tag(&"x".repeat(MAX_TAG_LEN + 1)).is_err());
        assert!(validate_name("rbtl.1.2.x").is_ok());
        assert!(validate_name("..").is_err());
        assert!(validate_name("../etc/passwd").is_err());
    }

    #[test]
    fn unnamed_segments_are_opened_through_proc_and_sealed() {
        let a = SharedRegion::create_unnamed("unit-test", 8192).unwrap();
        let fd = a.fd().expect("an unnamed segment has a descriptor");
        assert!(a.is_owner() && a.is_unlinked(), "nothing to remove");
        // SAFETY: inside the fresh mapping, which nothing else uses yet.
        unsafe { a.as_ptr().add(4096).write(42) };
        let b = SharedRegion::open_of_process(std::process::id(), fd).unwrap();
        assert_eq!(b.len(), 8192);
        assert!(b.fd().is_none() && !b.is_owner());
        // SAFETY: inside `b`'s mapping of the same memory.
        assert_eq!(unsafe { b.as_ptr().add(4096).read() }, 42);
        // Nobody can shrink it under a mapping.
        let again = OpenOptions::new().write(true).open(b.path());
        let shrunk = again.and_then(|f| f.set_len(4096));
        assert!(shrunk.is_err(), "the size is sealed");
        assert!(matches!(
            SharedRegion::create_unnamed("x", 0),
            Err(Error::ZeroLength)
        ));
        assert!(matches!(
            SharedRegion::create_unnamed("a/b", 4096),
            Err(Error::InvalidName { .. })
        ));
        // Descriptors that are not open.
        for bad in [1 << 20, -1] {
            assert!(matches!(
                SharedRegion::open_of_process(std::process::id(), bad),
                Err(Error::OpenOfProcess { .. })
            ));
        }
    }

    #[test]
    fn own_process_is_alive() {
        let start = own_start_time().unwrap();
        assert!(owner_alive(std::process::id(), start));
        assert!(!owner_alive(std::process::id(), start + 1));
    }
}
