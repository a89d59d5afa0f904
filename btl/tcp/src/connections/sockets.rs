//! Sockets of the `tcp` transport, made with `socket2`: listeners bound to one chosen
//! address (IPv4 or IPv6; an IPv6 one takes IPv6 only, `IPV6_V6ONLY`) on an
//! ephemeral port, nonblocking connects from a chosen local address of the peer's
//! family, the options of `btl_tcp_nodelay`, `btl_tcp_sndbuf`, `btl_tcp_rcvbuf` and
//! `btl_tcp_congestion_control`, and the one call that writes: `sendmsg` with
//! `MSG_NOSIGNAL`, so that a peer's reset is an
//! error here and never a SIGPIPE in a program that did not ignore it.

use rbtl_btl::PeerFailure;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr};

/// Options of every connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Disable Nagle's algorithm.
    pub nodelay: bool,
    /// Send buffer bytes (0: the system's default).
    pub sndbuf: usize,
    /// Receive buffer bytes (0: the system's default).
    pub rcvbuf: usize,
    /// The congestion control algorithm (`None`: the system's default).
    pub congestion: Option<Congestion>,
}

/// The name of a congestion control algorithm of the kernel (`TCP_CONGESTION`): at
/// most 15 bytes, as the kernel's `TCP_CA_NAME_MAX` allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Congestion {
    name: [u8; 15],
    len: u8,
}

impl Congestion {
    /// `name` if it can name an algorithm (1 to 15 printable ASCII bytes, no space).
    pub fn new(name: &str) -> Option<Congestion> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() > 15 || !b.iter().all(u8::is_ascii_graphic) {
            return None;
        }
        let mut c = Congestion {
            name: [0; 15],
            len: b.len() as u8,
        };
        c.name[..b.len()].copy_from_slice(b);
        Some(c)
    }

    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.name[..self.len as usize]
    }
}

/// Whether this process may give its sockets `algorithm`: `Err` with the kernel's
/// answer (`ENOENT`: no such algorithm is loaded; `EPERM`: not among those allowed to
/// unprivileged processes).
pub fn try_congestion(algorithm: &Congestion) -> io::Result<()> {
    stream(std::net::Ipv4Addr::LOCALHOST.into())?.set_tcp_congestion(algorithm.as_bytes())
}

fn stream(ip: IpAddr) -> io::Result<Socket> {
    let domain = Domain::for_address(SocketAddr::new(ip, 0));
    let s = Socket::new(
        domain,
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    Ok(s)
}

/// A nonblocking listener on `ip`, on a port the system picks; the socket and its
/// address.
pub fn listen(ip: IpAddr, opts: &Options) -> io::Result<(Socket, SocketAddr)> {
    let s = stream(ip)?;
    if ip.is_ipv6() {
        // Never an IPv4 connection on an IPv6 listener: each family has its own.
        s.set_only_v6(true)?;
    }
    // Buffer sizes given to a listener pass to the connections it accepts, which is
    // the only way to have them before the connection's window is agreed; so does a
    // congestion control algorithm set on it.
    before_connecting(&s, opts)?;
    s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))?;
    s.listen(128)?;
    let addr = s
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("a listener without an IP address"))?;
    Ok((s, addr))
}

/// Accept one connection, nonblocking and close-on-exec; `WouldBlock` when none waits.
pub fn accept(listener: &Socket, opts: &Options) -> io::Result<Socket> {
    let (s, _) = listener.accept4(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)?;
    s.set_tcp_nodelay(opts.nodelay)?;
    Ok(s)
}

/// Start connecting from `local` to `remote` (of one family), without waiting: the
/// socket becomes writable when the connection is made (or has failed: see
/// [`connect_result`]).
pub fn connect(local: IpAddr, remote: SocketAddr, opts: &Options) -> io::Result<Socket> {
    if local.is_ipv4() != remote.is_ipv4() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{local} and {remote} are of different families"),
        ));
    }
    let s = stream(local)?;
    before_connecting(&s, opts)?;
    s.set_tcp_nodelay(opts.nodelay)?;
    s.bind(&SockAddr::from(SocketAddr::new(local, 0)))?;
    match s.connect(&SockAddr::from(remote)) {
        Ok(()) => Ok(s),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(s),
        Err(e) => Err(e),
    }
}

/// Once a connecting socket is writable: `Ok` if the connection is made.
pub fn connect_result(s: &Socket) -> io::Result<()> {
    match s.take_error()? {
        Some(e) => Err(e),
        None => s.peer_addr().map(|_| ()),
    }
}

/// The options that must be set before a connection is made.
fn before_connecting(s: &Socket, opts: &Options) -> io::Result<()> {
    if let Some(c) = &opts.congestion {
        s.set_tcp_congestion(c.as_bytes())?;
    }
    if opts.sndbuf > 0 {
        s.set_send_buffer_size(opts.sndbuf)?;
    }
    if opts.rcvbuf > 0 {
        s.set_recv_buffer_size(opts.rcvbuf)?;
    }
    Ok(())
}

/// Write `parts` in one system call; the bytes written.
#[inline]
pub fn send(s: &Socket, parts: &[IoSlice<'_>]) -> io::Result<usize> {
    match parts {
        [one] => s.send_with_flags(one, libc::MSG_NOSIGNAL),
        _ => s.send_vectored_with_flags(parts, libc::MSG_NOSIGNAL),
    }
}

/// Read into `buf`; the bytes read (0: the peer closed).
#[inline]
pub fn recv(s: &Socket, buf: &mut [u8]) -> io::Result<usize> {
    io::Read::read(&mut &*s, buf)
}

/// Read at most `len` bytes to `at`; the bytes read (0: the peer closed).
///
/// # Safety
///
/// `[at, at + len)` must be valid for writes and not be read or written otherwise
/// during the call.
#[inline]
pub unsafe fn recv_into(s: &Socket, at: *mut u8, len: usize) -> io::Result<usize> {
    // SAFETY: the caller's contract makes `[at, at + len)` ours to write for the call;
    // as `MaybeUninit` bytes, nothing is read from it.
    let buf = unsafe { std::slice::from_raw_parts_mut(at.cast::<MaybeUninit<u8>>(), len) };
    s.recv(buf)
}

/// Why a link whose peer closed its end failed (a read found the end).
pub const CLOSED: &str = "the connection closed: the peer's process ended, or closed it";

/// How a read of a link ended it: at its end (`Ok(0)`: the peer's process ended, or
/// closed it), or with the socket's error `e` (a broken connection).
pub fn read_failure(e: Option<&io::Error>) -> PeerFailure {
    match e {
        None => PeerFailure::Ended(CLOSED.into()),
        Some(e) => PeerFailure::Broken(broken("reading", e)),
    }
}

/// Why a link failed `doing` ("reading", "writing") with `e`. A reset or an abort
/// says what it is: the peer's process may still run (something between, or an
/// administrator, broke the connection), and what was in flight on it is lost, which
/// is why its peer is failed all the same.
pub fn broken(doing: &str, e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) => format!(
            "{doing}: the connection was reset by the peer's host ({e}): its process \
             ended with data unread, or something between reset the connection while it \
             runs; what was in flight on it is lost"
        ),
        Some(libc::ECONNABORTED) => format!(
            "{doing}: the connection was aborted on this host ({e}: by its kernel, or an \
             administrator's `ss -K`); the peer's process may still run; what was in flight \
             on it is lost"
        ),
        _ => format!("{doing}: {e}"),
    }
}

/// What the kernel counts of one connection (`TCP_INFO`, as `ss -ti` shows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkBytes {
    /// This end's address.
    pub local: SocketAddr,
    /// The peer's.
    pub peer: SocketAddr,
    /// Bytes sent and acknowledged by the peer (`tcpi_bytes_acked`).
    pub sent: u64,
    /// Bytes received (`tcpi_bytes_received`).
    pub received: u64,
}

/// The kernel's counts of connection `s`.
pub fn link_bytes(s: &Socket) -> io::Result<LinkBytes> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain integers; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, and says how many.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let addr = |a: io::Result<SockAddr>| {
        a?.as_socket()
            .ok_or_else(|| io::Error::other("not an internet socket"))
    };
    Ok(LinkBytes {
        local: addr(s.local_addr())?,
        peer: addr(s.peer_addr())?,
        sent: info.tcpi_bytes_acked,
        received: info.tcpi_bytes_received,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn opts() -> Options {
        Options {
            nodelay: true,
            sndbuf: 0,
            rcvbuf: 64 << 10,
            congestion: None,
        }
    }

    fn wait<T>(mut f: impl FnMut() -> io::Result<T>) -> T {
        loop {
            match f() {
                Ok(v) => return v,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }

    const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
    const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

    #[test]
    fn a_loopback_connection_carries_bytes_both_ways() {
        for ip in [V4, V6] {
            carries_bytes_both_ways(ip);
        }
    }

    fn carries_bytes_both_ways(ip: IpAddr) {
        let (l, addr) = listen(ip, &opts()).unwrap();
        assert_eq!(addr.ip(), ip);
        assert_ne!(addr.port(), 0);
        let c = connect(ip, addr, &opts()).unwrap();
        let a = wait(|| accept(&l, &opts()));
        wait(|| connect_result(&c));
        assert_eq!(a.peer_addr().unwrap().as_socket().unwrap().ip(), ip);
        let n = wait(|| send(&c, &[IoSlice::new(b"he"), IoSlice::new(b"llo")]));
        assert_eq!(n, 5);
        let mut got = Vec::new();
        while got.len() < 5 {
            let mut b = [0u8; 8];
            let n = wait(|| recv(&a, &mut b));
            got.extend_from_slice(&b[..n]);
        }
        assert_eq!(got, b"hello");
        drop(a);
        let mut b = [0u8; 1];
        assert_eq!(wait(|| recv(&c, &mut b)), 0, "the close is seen as 0 bytes");
    }

    #[test]
    fn a_chosen_congestion_control_holds_on_both_ends_of_a_connection() {
        // Reno: built into every kernel and allowed to unprivileged processes.
        let reno = Congestion::new("reno").unwrap();
        try_congestion(&reno).unwrap();
        let opts = Options {
            congestion: Some(reno),
            ..opts()
        };
        let (l, addr) = listen(V4, &opts).unwrap();
        let c = connect(V4, addr, &opts).unwrap();
        let a = wait(|| accept(&l, &opts));
        wait(|| connect_result(&c));
        // The kernel answers with the whole NUL-padded name field.
        let name = |s: &Socket| {
            let mut n = s.tcp_congestion().unwrap();
            n.retain(|&b| b != 0);
            n
        };
        assert_eq!(name(&c), b"reno");
        assert_eq!(name(&a), b"reno", "accepted from the listener");
    }

    #[test]
    fn no_delay_and_buffer_sizes_hold_on_both_ends_of_a_connection() {
        for nodelay in [true, false] {
            let opts = Options {
                nodelay,
                sndbuf: 96 << 10,
                rcvbuf: 192 << 10,
                ..opts()
            };
            let (l, addr) = listen(V4, &opts).unwrap();
            let c = connect(V4, addr, &opts).unwrap();
            let a = wait(|| accept(&l, &opts));
            wait(|| connect_result(&c));
            for s in [&c, &a] {
                assert_eq!(s.tcp_nodelay().unwrap(), nodelay);
                // Linux keeps twice what is asked, for its own bookkeeping.
                assert_eq!(s.send_buffer_size().unwrap(), 2 * opts.sndbuf);
                assert_eq!(s.recv_buffer_size().unwrap(), 2 * opts.rcvbuf);
            }
        }
    }

    #[test]
    fn an_unknown_congestion_control_is_refused_by_the_kernel() {
        let none = Congestion::new("no-such-algo").unwrap();
        let e = try_congestion(&none).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        assert!(Congestion::new("").is_none());
        assert!(Congestion::new("sixteen-bytes-xx").is_none());
        assert!(Congestion::new("a b").is_none());
    }

    #[test]
    fn an_ipv6_listener_takes_ipv6_only_and_families_never_mix() {
        let (l, addr) = listen(V6, &opts()).unwrap();
        assert!(l.only_v6().unwrap(), "IPV6_V6ONLY");
        let (l4, _) = listen(V4, &opts()).unwrap();
        assert!(l4.local_addr().unwrap().is_ipv4());
        let e = connect(V4, addr, &opts()).expect_err("an IPv4 socket to an IPv6 address");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
    }

    /// Whether connecting from `local` to `to` fails.
    fn refused(local: IpAddr, to: SocketAddr) -> bool {
        match connect(local, to, &opts()) {
            Err(_) => true,
            Ok(c) => loop {
                match connect_result(&c) {
                    Ok(()) => break false,
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => std::thread::yield_now(),
                    Err(_) => break true,
                }
            },
        }
    }

    #[test]
    fn a_refused_connection_reports_its_error() {
        for ip in [V4, V6] {
            let (l, addr) = listen(ip, &opts()).unwrap();
            drop(l);
            assert!(refused(ip, addr), "{addr}");
        }
    }
}
