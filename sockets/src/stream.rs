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
use vmmc::Region;

/// How a connection is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The send protocol this side uses.
    pub variant: Variant,
    /// Data capacity of a ring, rounded up to a power of two. On the job path each side's
    /// sizes its own incoming ring; between unrelated processes the connecting side's sizes
    /// both rings of the connection (see [`Offer`]).
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
    /// The variant from `VMMC_SOCK_VARIANT` and the capacity from `VMMC_SOCK_RING` (bytes,
    /// or with a `k`/`m` suffix), else the default.
    pub fn from_env() -> Result<Options, Error> {
        let capacity = match std::env::var("VMMC_SOCK_RING") {
            Ok(v) => parse_size(&v)
                .ok_or_else(|| Error::Handshake(format!("VMMC_SOCK_RING={v:?} is not a size")))?,
            Err(_) => DEFAULT_CAPACITY,
        };
        Ok(Options {
            variant: Variant::from_env()?,
            capacity,
        })
    }
}

fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim().to_ascii_lowercase();
    let (num, mult) = match v.strip_suffix(['k', 'm']) {
        Some(n) if v.ends_with('k') => (n, 1 << 10),
        Some(n) => (n, 1 << 20),
        None => (v.as_str(), 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

/// The first bytes of a hello: a peer that sends anything else does not use this library.
pub const MAGIC: &[u8; 8] = b"VMMCSOK2";
/// Length of the hello the connecting side sends on the setup socket.
pub const HELLO_LEN: usize = 24;

/// The directory of the rings' files and the preload library's registry: world-writable
/// and sticky like `/tmp`, so processes of different users (a server's workers often drop
/// privileges) can map each other's rings.
pub const SHM_DIR: &str = "/dev/shm/vmmc-sockets";

/// Creates [`SHM_DIR`] if needed.
pub fn shm_dir() -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::path::PathBuf::from(SHM_DIR);
    if std::fs::create_dir(&dir).is_ok() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
    }
    dir
}

/// The connecting side's half of the connection setup: both rings of the connection and
/// the hello that announces them (magic, process id, the two rings' numbers, capacity).
///
/// The connecting side makes both rings, so that neither side ever waits for the other's
/// later call: `connect` sends the hello and returns at once, with a working connection
/// whose writes land in the accepting side's ring before the listener has even accepted
/// (as the kernel queues them), and `accept` maps the rings it is told about. A thread may
/// therefore connect to a listener that it accepts from afterwards.
///
/// A ring is a file in [`SHM_DIR`] named after the process and a number, which the peer
/// opens by name and maps: unlike `/proc/PID/fd/N`, this works between processes of
/// different users. The accepting side removes the files as soon as it has mapped them and
/// says so in the connecting side's ring; a connection closed before its accept leaves them
/// for the accept, so that what it wrote still arrives. Only the mappings keep the memory.
/// The connecting side's capacity sizes both rings.
pub struct Offer {
    incoming: Region,
    outgoing: Region,
    cap: usize,
    hello: [u8; HELLO_LEN],
    variant: Variant,
    files: [RingFile; 2],
}

/// Removes a ring's file when dropped.
pub struct RingFile(std::path::PathBuf);

impl RingFile {
    /// Keeps the file: the guard forgets it and returns its path.
    fn keep(mut self) -> std::path::PathBuf {
        std::mem::take(&mut self.0)
    }
}

impl Drop for RingFile {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn ring_path(pid: u32, id: u32) -> std::path::PathBuf {
    shm_dir().join(format!("ring-{pid}-{id}"))
}

/// Makes one ring's file and maps it.
fn make_ring(pid: u32, id: u32, cap: usize) -> Result<(Region, RingFile), Error> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = ring_path(pid, id);
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&path)
    };
    // A file left by a dead process that had our process id is stale.
    let file = open().or_else(|_| {
        let _ = std::fs::remove_file(&path);
        open()
    })?;
    let guard = RingFile(path);
    file.set_permissions(std::fs::Permissions::from_mode(0o666))?;
    let len = HEADER + cap;
    file.set_len(len.next_multiple_of(4096) as u64)?;
    Ok((Region::map_shared_fd(OwnedFd::from(file), len)?, guard))
}

/// Maps the peer's ring `id` of process `pid`, checking its size.
fn map_ring(pid: u32, id: u32, cap: usize) -> Result<Region, Error> {
    let path = ring_path(pid, id);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| {
            Error::Handshake(format!("mapping the peer's ring {}: {e}", path.display()))
        })?;
    let size = file.metadata()?.len() as usize;
    if size < HEADER + cap {
        return Err(Error::Handshake(format!(
            "the peer's ring {} is {size} bytes, not {}",
            path.display(),
            HEADER + cap
        )));
    }
    Ok(Region::map_shared_fd(OwnedFd::from(file), HEADER + cap)?)
}

impl Offer {
    /// Makes both rings.
    pub fn new(opts: Options) -> Result<Offer, Error> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let cap = opts.capacity.max(4096).next_power_of_two();
        if cap > 1 << 30 {
            return Err(Error::Handshake("ring capacity above 1 GiB".into()));
        }
        let pid = std::process::id();
        let id = NEXT.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let (incoming, f_in) = make_ring(pid, id, cap)?;
        let (outgoing, f_out) = make_ring(pid, id.wrapping_add(1), cap)?;
        let mut hello = [0u8; HELLO_LEN];
        hello[..8].copy_from_slice(MAGIC);
        hello[8..12].copy_from_slice(&pid.to_le_bytes());
        hello[12..16].copy_from_slice(&id.to_le_bytes());
        hello[16..20].copy_from_slice(&(cap as u32).to_le_bytes());
        hello[20..24].copy_from_slice(&id.wrapping_add(1).to_le_bytes());
        Ok(Offer {
            incoming,
            outgoing,
            cap,
            hello,
            variant: opts.variant,
            files: [f_in, f_out],
        })
    }

    /// The bytes to send to the peer.
    pub fn hello(&self) -> &[u8; HELLO_LEN] {
        &self.hello
    }

    /// The connection, once the hello is on its way: usable at once. `extra` are more
    /// files made for the accepting side (the preload's connect marker), removed like the
    /// rings' files.
    pub fn connect(self, setup: TcpStream, extra: Vec<std::path::PathBuf>) -> Conn {
        let [a, b] = self.files;
        let mut paths = vec![a.keep(), b.keep()];
        paths.extend(extra);
        Conn::new(self.incoming, self.outgoing, self.cap, self.variant, setup).leave_files(paths)
    }
}

/// The accepting side: maps the two rings that the connecting side's `hello` announces,
/// tells it so, and removes their files (and `extra`, the preload's connect marker).
pub fn accept_offer(
    hello: &[u8; HELLO_LEN],
    setup: TcpStream,
    opts: Options,
    extra: Option<&std::path::Path>,
) -> Result<Conn, Error> {
    if &hello[..8] != MAGIC {
        return Err(Error::Handshake("peer does not speak VMMC sockets".into()));
    }
    let le = |r: std::ops::Range<usize>| u32::from_le_bytes(hello[r].try_into().unwrap_or([0; 4]));
    let (pid, id_c, cap, id_a) = (le(8..12), le(12..16), le(16..20) as usize, le(20..24));
    if !cap.is_power_of_two() || !(4096..=1 << 30).contains(&cap) {
        return Err(Error::Handshake(format!("bad peer ring capacity {cap}")));
    }
    // The connecting side's incoming ring is this side's outgoing one, and the other way.
    let outgoing = map_ring(pid, id_c, cap)?;
    let incoming = map_ring(pid, id_a, cap)?;
    crate::ring::store(&outgoing, crate::ring::MAPPED, 1);
    for p in [ring_path(pid, id_c), ring_path(pid, id_a)] {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = extra {
        let _ = std::fs::remove_file(p);
    }
    Ok(Conn::new(incoming, outgoing, cap, opts.variant, setup))
}

/// The connecting side's setup: sends the hello and returns the connection.
fn connect_setup(setup: TcpStream, opts: Options) -> Result<Conn, Error> {
    let offer = Offer::new(opts)?;
    (&setup).write_all(offer.hello())?;
    let _ = setup.set_nodelay(true);
    Ok(offer.connect(setup, Vec::new()))
}

/// The accepting side's setup: reads the hello and maps the rings it names.
fn accept_setup(setup: TcpStream, opts: Options) -> Result<Conn, Error> {
    let mut hello = [0u8; HELLO_LEN];
    (&setup).read_exact(&mut hello)?;
    let _ = setup.set_nodelay(true);
    accept_offer(&hello, setup, opts, None)
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
        let conn = accept_setup(TcpStream::from(s), self.opts)?;
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
            conn: Arc::new(connect_setup(setup, opts)?),
        })
    }

    /// Connects, giving up after `timeout`.
    pub fn connect_timeout(
        addr: &SocketAddr,
        timeout: Duration,
        opts: Options,
    ) -> io::Result<VmmcStream> {
        let setup = TcpStream::connect_timeout(addr, timeout)?;
        Ok(VmmcStream {
            conn: Arc::new(connect_setup(setup, opts)?),
        })
    }

    /// Connects to the [`JobListener`](crate::JobListener) on `port` of the process of rank
    /// `rank` in this endpoint's job, with options from the environment. The rings are
    /// exported and imported through `ep`, so this works on every transport; see
    /// [`crate::JobListener`] for the rendezvous.
    pub fn connect_job(ep: &vmmc::Endpoint, rank: usize, port: u16) -> io::Result<VmmcStream> {
        VmmcStream::connect_job_with(ep, rank, port, Options::from_env()?)
    }

    /// [`VmmcStream::connect_job`] with the given options.
    pub fn connect_job_with(
        ep: &vmmc::Endpoint,
        rank: usize,
        port: u16,
        opts: Options,
    ) -> io::Result<VmmcStream> {
        crate::job::connect(ep, rank, port, opts)
    }

    pub(crate) fn from_conn(conn: Conn) -> VmmcStream {
        VmmcStream {
            conn: Arc::new(conn),
        }
    }

    /// Another handle on the same connection.
    pub fn try_clone(&self) -> io::Result<VmmcStream> {
        Ok(self.clone())
    }

    fn setup(&self) -> io::Result<&TcpStream> {
        self.conn.setup().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "a connection inside a job has no IP address (see peer_rank)",
            )
        })
    }

    /// This side's address (of the setup socket); `Unsupported` inside a job.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.setup()?.local_addr()
    }

    /// The peer's address; `Unsupported` inside a job.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.setup()?.peer_addr()
    }

    /// The rank of the peer, for a connection inside a job.
    pub fn peer_rank(&self) -> Option<usize> {
        self.conn.job().map(|j| j.peer_rank())
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
