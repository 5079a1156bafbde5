//! The `std::net`-shaped API and the connection setup (seed 003 §4.3, "Connection
//! Establishment").

use crate::error::Error;
use crate::ring::{Conn, DEFAULT_CAPACITY, HEADER};
use crate::Variant;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;
use vmmc::{MemKind, Region};

const MAGIC: &[u8; 8] = b"VMMCSOK1";
const HELLO_LEN: usize = 24;

/// How a connection is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The send protocol this side uses.
    pub variant: Variant,
    /// Data capacity of this side's incoming ring (rounded up to a power of two).
    pub capacity: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            variant: Variant::default(),
            capacity: DEFAULT_CAPACITY,
        }
    }
}

impl Options {
    /// The variant from `VMMC_SOCK_VARIANT` and the default capacity.
    pub fn from_env() -> Result<Options, Error> {
        Ok(Options {
            variant: Variant::from_env()?,
            ..Options::default()
        })
    }
}

/// Exchanges the two rings over the setup socket: each side announces its process id, the
/// descriptor of its incoming ring and the ring's capacity, maps the peer's ring through
/// `/proc/PID/fd/N`, and acknowledges, so that neither side writes before both are mapped.
fn handshake(setup: TcpStream, opts: Options) -> Result<Conn, Error> {
    let cap = opts.capacity.max(4096).next_power_of_two();
    if cap > 1 << 30 {
        return Err(Error::Handshake("ring capacity above 1 GiB".into()));
    }
    let incoming = Region::alloc(HEADER + cap, MemKind::Shared)?;
    let fd = incoming
        .fd()
        .ok_or_else(|| Error::Handshake("shared region without descriptor".into()))?;
    let mut hello = [0u8; HELLO_LEN];
    hello[..8].copy_from_slice(MAGIC);
    hello[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    hello[12..16].copy_from_slice(&(fd as u32).to_le_bytes());
    hello[16..20].copy_from_slice(&(cap as u32).to_le_bytes());
    (&setup).write_all(&hello)?;
    let mut peer = [0u8; HELLO_LEN];
    (&setup).read_exact(&mut peer)?;
    if &peer[..8] != MAGIC {
        return Err(Error::Handshake("peer does not speak VMMC sockets".into()));
    }
    let le = |r: std::ops::Range<usize>| u32::from_le_bytes(peer[r].try_into().unwrap_or([0; 4]));
    let (pid, pfd, pcap) = (le(8..12), le(12..16), le(16..20) as usize);
    if !pcap.is_power_of_two() || pcap > 1 << 30 {
        return Err(Error::Handshake(format!("bad peer ring capacity {pcap}")));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/fd/{pfd}"))
        .map_err(|e| Error::Handshake(format!("mapping the peer's ring: {e}")))?;
    let outgoing = Region::map_shared_fd(OwnedFd::from(file), HEADER + pcap)?;
    (&setup).write_all(b"K")?;
    let mut ack = [0u8; 1];
    (&setup).read_exact(&mut ack)?;
    if ack[0] != b'K' {
        return Err(Error::Handshake("no acknowledgement".into()));
    }
    let _ = setup.set_nodelay(true);
    Ok(Conn::new(incoming, outgoing, pcap, opts.variant, setup))
}

/// A VMMC stream socket listening for connections, in the shape of `std::net::TcpListener`.
pub struct VmmcListener {
    sock: Socket,
    opts: Options,
}

impl VmmcListener {
    /// Binds to `addr` with options from the environment.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<VmmcListener> {
        VmmcListener::bind_with(addr, Options::from_env()?)
    }

    /// Binds to `addr` with the given options.
    pub fn bind_with(addr: impl ToSocketAddrs, opts: Options) -> io::Result<VmmcListener> {
        let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address");
        for a in addr.to_socket_addrs()? {
            let sock = Socket::new(Domain::for_address(a), Type::STREAM, Some(Protocol::TCP))?;
            sock.set_reuse_address(true)?;
            match sock.bind(&SockAddr::from(a)).and_then(|_| sock.listen(128)) {
                Ok(()) => return Ok(VmmcListener { sock, opts }),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Accepts one connection and sets up its rings.
    pub fn accept(&self) -> io::Result<(VmmcStream, SocketAddr)> {
        let (s, addr) = self.sock.accept()?;
        let addr = addr
            .as_socket()
            .ok_or_else(|| io::Error::other("accepted a non-IP address"))?;
        // The accepted socket inherits nothing from the listener's non-blocking mode here.
        s.set_nonblocking(false)?;
        let conn = handshake(TcpStream::from(s), self.opts)?;
        Ok((
            VmmcStream {
                conn: Arc::new(conn),
            },
            addr,
        ))
    }

    /// An iterator over accepted connections.
    pub fn incoming(&self) -> impl Iterator<Item = io::Result<VmmcStream>> + '_ {
        std::iter::from_fn(move || Some(self.accept().map(|(s, _)| s)))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an IP address"))
    }

    /// Sets non-blocking accept.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.sock.set_nonblocking(on)
    }

    /// Shuts the listening socket down: a thread blocked in [`VmmcListener::accept`] returns
    /// with an error.
    pub fn shutdown(&self) -> io::Result<()> {
        self.sock.shutdown(Shutdown::Both)
    }
}

/// A VMMC stream socket, in the shape of `std::net::TcpStream`. Clones made with
/// [`VmmcStream::try_clone`] share the connection; it closes when the last one drops.
#[derive(Clone)]
pub struct VmmcStream {
    conn: Arc<Conn>,
}

impl std::fmt::Debug for VmmcStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmmcStream")
            .field("local", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .field("variant", &self.conn.variant())
            .finish()
    }
}

impl VmmcStream {
    /// Connects to a [`VmmcListener`] with options from the environment.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<VmmcStream> {
        VmmcStream::connect_with(addr, Options::from_env()?)
    }

    /// Connects with the given options.
    pub fn connect_with(addr: impl ToSocketAddrs, opts: Options) -> io::Result<VmmcStream> {
        let setup = TcpStream::connect(addr)?;
        Ok(VmmcStream {
            conn: Arc::new(handshake(setup, opts)?),
        })
    }

    /// Connects, giving up after `timeout`.
    pub fn connect_timeout(
        addr: &SocketAddr,
        timeout: Duration,
        opts: Options,
    ) -> io::Result<VmmcStream> {
        let setup = TcpStream::connect_timeout(addr, timeout)?;
        setup.set_read_timeout(Some(timeout))?;
        Ok(VmmcStream {
            conn: Arc::new(handshake(setup, opts)?),
        })
    }

    /// Another handle on the same connection.
    pub fn try_clone(&self) -> io::Result<VmmcStream> {
        Ok(self.clone())
    }

    /// This side's address (of the setup socket).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.conn.setup().local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.conn.setup().peer_addr()
    }

    /// Shuts down reading, writing or both; the peer reads end of file after `Write`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.conn.shutdown(how);
        Ok(())
    }

    /// Sets non-blocking mode: reads and writes that would wait return `WouldBlock`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.conn.set_nonblocking(on);
        Ok(())
    }

    /// Sets the read timeout (`None`: wait forever; zero is refused, as in `std`).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.conn.set_timeout(true, t)
    }

    /// Sets the write timeout.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.conn.set_timeout(false, t)
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.conn.timeout(true))
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.conn.timeout(false))
    }

    /// Bytes that can be read without waiting (`FIONREAD`).
    pub fn readable_bytes(&self) -> usize {
        self.conn.readable_bytes()
    }

    /// Whether a read would return at once (data, end of file or an error).
    pub fn is_readable(&self) -> bool {
        self.conn.is_readable()
    }

    /// Whether a write would return at once.
    pub fn is_writable(&self) -> bool {
        self.conn.is_writable()
    }

    /// The send protocol of this side.
    pub fn variant(&self) -> Variant {
        self.conn.variant()
    }

    /// The connection's state, for layers that poll it (the preload library).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Block transfer (DFS-sockets' extension, seed 001 §3): sends `block` as one unit that
    /// [`VmmcStream::read_block`] receives whole, length first.
    pub fn write_block(&self, block: &[u8]) -> io::Result<()> {
        let mut w = self;
        w.write_all(&(block.len() as u64).to_le_bytes())?;
        w.write_all(block)
    }

    /// Receives one block sent with [`VmmcStream::write_block`] into `out`, which must be
    /// large enough; returns its length. A block is never split across calls.
    pub fn read_block(&self, out: &mut [u8]) -> io::Result<usize> {
        let mut r = self;
        let mut len = [0u8; 8];
        r.read_exact(&mut len)?;
        let n = u64::from_le_bytes(len) as usize;
        if n > out.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("block of {n} bytes does not fit in {} bytes", out.len()),
            ));
        }
        r.read_exact(&mut out[..n])?;
        Ok(n)
    }
}

impl Read for &VmmcStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.conn.read(buf)
    }
}

impl Write for &VmmcStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.conn.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for VmmcStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.conn.read(buf)
    }
}

impl Write for VmmcStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.conn.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
