//! RPC clients over TCP (and other byte streams, with record marking) and over UDP.
//!
//! Both implement [`Call`], the one trait generated client stubs use. A stream client matches
//! replies to calls by transaction id (skipping late replies to calls that timed out) and
//! reconnects on the next call after a transport failure; it never resends a call by itself. A
//! UDP client resends the same call (same xid) every retry interval until a reply with that
//! xid arrives or the total timeout expires.

use crate::msg::{
    AcceptStat, CallBody, MsgBody, OpaqueAuth, RejectedReply, ReplyBody, RpcMsg, RPC_VERSION,
};
use crate::record::{read_record, write_record, DEFAULT_MAX_RECORD};
use crate::{rpcbind, xdr, Error};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::{self, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Default total time to wait for a reply (rpcgen's clients use 25 seconds).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(25);
/// Default interval between UDP retransmissions.
pub const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// Largest UDP datagram a reply may be.
const MAX_DATAGRAM: usize = 65_536;

/// Makes a remote procedure call. Implemented by [`TcpClient`], [`UdpClient`] and
/// [`UnixClient`]; generated client stubs are written against this trait.
pub trait Call {
    /// Calls `procedure` of program `prog` version `vers` with `args` (a tuple for several
    /// arguments, `()` for none) and decodes the results as `R`.
    fn call<A: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        prog: u32,
        vers: u32,
        procedure: u32,
        args: &A,
    ) -> Result<R, Error>;
}

impl<C: Call> Call for &mut C {
    fn call<A: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        prog: u32,
        vers: u32,
        procedure: u32,
        args: &A,
    ) -> Result<R, Error> {
        (**self).call(prog, vers, procedure, args)
    }
}

/// A first transaction id that differs between processes and clients.
pub(crate) fn initial_xid() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ d.as_secs() as u32)
        .unwrap_or(0);
    nanos ^ (std::process::id() << 16) ^ COUNTER.fetch_add(0x9e37_79b9, Ordering::Relaxed)
}

/// Appends a call message (header and arguments) to `out`.
pub(crate) fn encode_call<A: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    xid: u32,
    cred: &OpaqueAuth,
    (prog, vers, procedure): (u32, u32, u32),
    args: &A,
) -> Result<(), Error> {
    RpcMsg {
        xid,
        body: MsgBody::Call(CallBody {
            rpcvers: RPC_VERSION,
            prog,
            vers,
            procedure,
            cred: cred.clone(),
            verf: OpaqueAuth::none(),
        }),
    }
    .encode(out)?;
    xdr::to_writer(out, args)?;
    Ok(())
}

/// The transaction id of a message, if it has one.
fn xid_of(message: &[u8]) -> Option<u32> {
    message
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Turns a reply into the results or the error its status stands for.
pub(crate) fn decode_reply<R: DeserializeOwned>(message: &[u8]) -> Result<R, Error> {
    let (msg, results) =
        RpcMsg::decode(message).map_err(|e| Error::BadMessage(format!("reply header: {e}")))?;
    match msg.body {
        MsgBody::Call(_) => Err(Error::BadMessage("expected a reply, got a call".into())),
        MsgBody::Reply(ReplyBody::Accepted { stat, .. }) => match stat {
            // Bytes after the results are ignored, as libtirpc's clnt_call ignores them.
            AcceptStat::Success => Ok(xdr::take_from_bytes(results)?.0),
            AcceptStat::ProgUnavail => Err(Error::ProgUnavail),
            AcceptStat::ProgMismatch { low, high } => Err(Error::ProgMismatch { low, high }),
            AcceptStat::ProcUnavail => Err(Error::ProcUnavail),
            AcceptStat::GarbageArgs => Err(Error::GarbageArgs),
            AcceptStat::SystemErr => Err(Error::SystemErr),
        },
        MsgBody::Reply(ReplyBody::Denied(RejectedReply::RpcMismatch { low, high })) => {
            Err(Error::RpcMismatch { low, high })
        }
        MsgBody::Reply(ReplyBody::Denied(RejectedReply::AuthError(stat))) => {
            Err(Error::AuthError(stat))
        }
    }
}

/// A byte stream a [`StreamClient`] can run over.
pub trait Stream: Read + Write + Send {
    /// Sets the read and write timeouts (`None`: block forever).
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }
}

impl Stream for UnixStream {
    fn set_timeouts(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(timeout)?;
        self.set_write_timeout(timeout)
    }
}

type Connector<S> = Box<dyn FnMut() -> io::Result<S> + Send>;

/// How much later than its deadline a call may give up: the socket timeout is shortened only
/// when it exceeds what is left by more than this, so a call answered at once costs no
/// system call to adjust it.
const DEADLINE_SLACK: Duration = Duration::from_millis(5);

/// A stream whose reads and writes share one deadline per call: each one is given at most
/// the time left, so a peer that trickles bytes or sends replies to other calls cannot keep a
/// call alive past its total timeout.
struct Timed<S: Stream> {
    stream: S,
    deadline: Option<Instant>,
    /// The timeout last set on the socket.
    applied: Option<Duration>,
}

impl<S: Stream> Timed<S> {
    fn new(stream: S, timeout: Option<Duration>) -> io::Result<Self> {
        stream.set_timeouts(timeout)?;
        Ok(Timed {
            stream,
            deadline: None,
            applied: timeout,
        })
    }

    /// Starts a call that must end within `timeout` (`None`: no deadline).
    fn arm(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if self.applied != timeout {
            self.stream.set_timeouts(timeout)?;
            self.applied = timeout;
        }
        // A timeout too long for the clock is no deadline.
        self.deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        Ok(())
    }

    /// Shortens the socket's timeout to what is left of the call's time.
    fn before_io(&mut self) -> io::Result<()> {
        let Some(deadline) = self.deadline else {
            return Ok(());
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the call's total timeout expired",
            ));
        }
        if self.applied.is_none_or(|a| a > left + DEADLINE_SLACK) {
            self.stream.set_timeouts(Some(left))?;
            self.applied = Some(left);
        }
        Ok(())
    }
}

impl<S: Stream> Read for Timed<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.before_io()?;
        self.stream.read(buf)
    }
}

impl<S: Stream> Write for Timed<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.before_io()?;
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// An RPC client over a record-marked byte stream.
pub struct StreamClient<S: Stream> {
    connect: Connector<S>,
    conn: Option<BufReader<Timed<S>>>,
    xid: u32,
    cred: OpaqueAuth,
    timeout: Option<Duration>,
    max_record: usize,
    max_fragment: usize,
    buf: Vec<u8>,
}

/// An RPC client over TCP.
pub type TcpClient = StreamClient<TcpStream>;
/// An RPC client over a Unix stream socket (how local programs talk to rpcbind).
pub type UnixClient = StreamClient<UnixStream>;

impl<S: Stream> StreamClient<S> {
    /// A client that opens its connection with `connect`, now and after a transport failure.
    pub fn with_connector(
        mut connect: impl FnMut() -> io::Result<S> + Send + 'static,
    ) -> Result<Self, Error> {
        let stream = Timed::new(connect()?, Some(DEFAULT_TIMEOUT))?;
        Ok(StreamClient {
            connect: Box::new(connect),
            conn: Some(BufReader::new(stream)),
            xid: initial_xid(),
            cred: OpaqueAuth::none(),
            timeout: Some(DEFAULT_TIMEOUT),
            max_record: DEFAULT_MAX_RECORD,
            max_fragment: DEFAULT_MAX_RECORD,
            buf: Vec::new(),
        })
    }

    /// Sets the total time a call may take, sending the call and waiting for its reply
    /// included (`None`: forever; default [`DEFAULT_TIMEOUT`]). Replies to other calls and a
    /// server that sends its reply a byte at a time do not extend it.
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        self.timeout = timeout;
        if let Some(conn) = &mut self.conn {
            conn.get_mut().arm(timeout)?;
        }
        Ok(())
    }

    /// Sets the credential sent with each call (default AUTH_NONE).
    pub fn set_credential(&mut self, cred: OpaqueAuth) {
        self.cred = cred;
    }

    /// Sets the largest reply record accepted.
    pub fn set_max_record(&mut self, max_record: usize) {
        self.max_record = max_record;
    }

    /// Sets the largest fragment sent (calls larger than this go as several fragments).
    pub fn set_max_fragment(&mut self, max_fragment: usize) {
        self.max_fragment = max_fragment;
    }

    fn exchange(&mut self, xid: u32) -> Result<(), Error> {
        if self.conn.is_none() {
            let stream = Timed::new((self.connect)()?, self.timeout)?;
            self.conn = Some(BufReader::new(stream));
        }
        let conn = self.conn.as_mut().ok_or(Error::ConnectionClosed)?;
        conn.get_mut().arm(self.timeout)?;
        write_record(conn.get_mut(), &self.buf, self.max_fragment).map_err(Error::from_io)?;
        loop {
            if !read_record(&mut *conn, &mut self.buf, self.max_record)? {
                return Err(Error::ConnectionClosed);
            }
            // A reply to an earlier call that timed out is skipped.
            if xid_of(&self.buf) == Some(xid) {
                return Ok(());
            }
        }
    }
}

impl TcpClient {
    /// Connects to an RPC server at `addr`.
    pub fn connect(addr: SocketAddr) -> Result<Self, Error> {
        Self::with_connector(move || {
            let stream = TcpStream::connect(addr)?;
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    }

    /// Asks rpcbind on `host` for the TCP port of `prog` version `vers` and connects to it.
    pub fn connect_rpcbind(host: IpAddr, prog: u32, vers: u32) -> Result<Self, Error> {
        let port = rpcbind::getport(host, prog, vers, rpcbind::IPPROTO_TCP)?;
        Self::connect(SocketAddr::new(host, port))
    }

    /// The server's address, if connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.conn
            .as_ref()
            .and_then(|c| c.get_ref().stream.peer_addr().ok())
    }
}

impl UnixClient {
    /// Connects to an RPC server listening on the Unix socket at `path`.
    pub fn connect_unix(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        Self::with_connector(move || UnixStream::connect(&path))
    }
}

impl<S: Stream> Call for StreamClient<S> {
    fn call<A: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        prog: u32,
        vers: u32,
        procedure: u32,
        args: &A,
    ) -> Result<R, Error> {
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        self.buf.clear();
        encode_call(
            &mut self.buf,
            xid,
            &self.cred,
            (prog, vers, procedure),
            args,
        )?;
        if let Err(e) = self.exchange(xid) {
            // The stream may be in the middle of a record: start afresh next time.
            self.conn = None;
            return Err(e);
        }
        decode_reply(&self.buf)
    }
}

/// An RPC client over UDP, with retransmission.
pub struct UdpClient {
    socket: UdpSocket,
    xid: u32,
    cred: OpaqueAuth,
    timeout: Duration,
    retry: Duration,
    request: Vec<u8>,
    reply: Vec<u8>,
}

impl UdpClient {
    /// A client that sends its calls to `addr`.
    pub fn connect(addr: SocketAddr) -> Result<Self, Error> {
        let local: SocketAddr = match addr {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local)?;
        socket.connect(addr)?;
        Ok(UdpClient {
            socket,
            xid: initial_xid(),
            cred: OpaqueAuth::none(),
            timeout: DEFAULT_TIMEOUT,
            retry: DEFAULT_RETRY,
            request: Vec::new(),
            reply: vec![0; MAX_DATAGRAM],
        })
    }

    /// Asks rpcbind on `host` for the UDP port of `prog` version `vers`.
    pub fn connect_rpcbind(host: IpAddr, prog: u32, vers: u32) -> Result<Self, Error> {
        let port = rpcbind::getport(host, prog, vers, rpcbind::IPPROTO_UDP)?;
        Self::connect(SocketAddr::new(host, port))
    }

    /// Sets the total time a call waits for its reply, retransmissions included.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sets the interval after which an unanswered call is sent again.
    pub fn set_retry(&mut self, retry: Duration) {
        self.retry = retry.max(Duration::from_millis(1));
    }

    /// Sets the credential sent with each call (default AUTH_NONE).
    pub fn set_credential(&mut self, cred: OpaqueAuth) {
        self.cred = cred;
    }

    /// The local address of the client's socket.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        Ok(self.socket.local_addr()?)
    }
}

impl Call for UdpClient {
    fn call<A: Serialize + ?Sized, R: DeserializeOwned>(
        &mut self,
        prog: u32,
        vers: u32,
        procedure: u32,
        args: &A,
    ) -> Result<R, Error> {
        self.xid = self.xid.wrapping_add(1);
        let xid = self.xid;
        self.request.clear();
        encode_call(
            &mut self.request,
            xid,
            &self.cred,
            (prog, vers, procedure),
            args,
        )?;
        // A timeout (or retry interval) too long for the clock is none.
        let deadline = Instant::now().checked_add(self.timeout);
        let mut resend_at = Some(Instant::now());
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout);
            }
            if resend_at.is_some_and(|r| now >= r) {
                self.socket.send(&self.request)?;
                resend_at = now.checked_add(self.retry);
            }
            let next = match (resend_at, deadline) {
                (Some(r), Some(d)) => Some(r.min(d)),
                (r, d) => r.or(d),
            };
            // No bound at all: wait in steps of a day (a receive timeout must be finite).
            let wait = next.map_or(Duration::from_secs(86_400), |n| {
                n.saturating_duration_since(now)
            });
            self.socket
                .set_read_timeout(Some(wait.max(Duration::from_millis(1))))?;
            match self.socket.recv(&mut self.reply) {
                Ok(n) if xid_of(&self.reply[..n]) == Some(xid) => {
                    return decode_reply(&self.reply[..n]);
                }
                // A late reply to an earlier call, or noise.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(Error::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::AuthStat;

    fn reply(body: ReplyBody, results: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        RpcMsg {
            xid: 1,
            body: MsgBody::Reply(body),
        }
        .encode(&mut out)
        .unwrap();
        out.extend_from_slice(results);
        out
    }

    fn accepted(stat: AcceptStat) -> ReplyBody {
        ReplyBody::Accepted {
            verf: OpaqueAuth::none(),
            stat,
        }
    }

    #[test]
    fn every_reply_status_maps_to_its_error() {
        let ok = reply(accepted(AcceptStat::Success), &[0, 0, 0, 9]);
        assert_eq!(decode_reply::<u32>(&ok).unwrap(), 9);
        assert!(matches!(decode_reply::<u64>(&ok), Err(Error::Xdr(_))));
        type Check = fn(&Error) -> bool;
        let cases: Vec<(ReplyBody, Check)> = vec![
            (accepted(AcceptStat::ProgUnavail), |e| {
                matches!(e, Error::ProgUnavail)
            }),
            (
                accepted(AcceptStat::ProgMismatch { low: 2, high: 4 }),
                |e| matches!(e, Error::ProgMismatch { low: 2, high: 4 }),
            ),
            (accepted(AcceptStat::ProcUnavail), |e| {
                matches!(e, Error::ProcUnavail)
            }),
            (accepted(AcceptStat::GarbageArgs), |e| {
                matches!(e, Error::GarbageArgs)
            }),
            (accepted(AcceptStat::SystemErr), |e| {
                matches!(e, Error::SystemErr)
            }),
            (
                ReplyBody::Denied(RejectedReply::RpcMismatch { low: 2, high: 2 }),
                |e| matches!(e, Error::RpcMismatch { low: 2, high: 2 }),
            ),
            (
                ReplyBody::Denied(RejectedReply::AuthError(AuthStat::TooWeak)),
                |e| matches!(e, Error::AuthError(AuthStat::TooWeak)),
            ),
        ];
        for (body, expected) in cases {
            let err = decode_reply::<()>(&reply(body.clone(), &[])).unwrap_err();
            assert!(expected(&err), "{body:?} gave {err}");
        }
        let mut call = Vec::new();
        encode_call(&mut call, 1, &OpaqueAuth::none(), (1, 2, 3), &()).unwrap();
        assert!(matches!(
            decode_reply::<()>(&call),
            Err(Error::BadMessage(_))
        ));
        assert!(matches!(
            decode_reply::<()>(&[0, 0]),
            Err(Error::BadMessage(_))
        ));
    }
}
