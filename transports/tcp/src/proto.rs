//! Wire formats: the rendezvous protocol (length-prefixed messages between a rank and the
//! trusted party) and the header of every frame on a data connection.

use std::io::{self, Read, Write};
use vmmc::{BufId, Error, Importers, ProcId, Result};

/// Largest rendezvous message accepted (an importer list of a big job fits).
pub const MAX_MSG: usize = 16 << 20;

/// A message between a rank and the rendezvous.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Rank -> rendezvous: joins the job; `listen` is the address of its data listener.
    Hello {
        /// The rank.
        rank: u32,
        /// The job size the rank was told.
        size: u32,
        /// Where peers connect to it.
        listen: String,
    },
    /// Rendezvous -> rank: everyone has joined.
    Welcome {
        /// (node, squid) of each rank.
        procs: Vec<ProcId>,
        /// Host name of each node.
        hosts: Vec<String>,
        /// Data listener of each rank.
        addrs: Vec<String>,
    },
    /// Rank -> rendezvous: records an export (the trusted party checks imports against it).
    Export {
        /// Request id.
        req: u64,
        /// The buffer id.
        buf: BufId,
        /// Its length.
        len: u64,
        /// The key writes carry to name it.
        key: u64,
        /// Whether a handler is set.
        has_handler: bool,
        /// Who may import it.
        importers: Importers,
    },
    /// Rank -> rendezvous: removes an export.
    Unexport {
        /// Request id.
        req: u64,
        /// The buffer id.
        buf: BufId,
    },
    /// Rank -> rendezvous: imports `owner`'s buffer `buf` (the reply waits for the export).
    Import {
        /// Request id.
        req: u64,
        /// The exporter's rank.
        owner: u32,
        /// The buffer id.
        buf: BufId,
    },
    /// Rank -> rendezvous: leaves the job cleanly.
    Bye,
    /// Rendezvous -> rank: request done.
    Ok {
        /// Request id.
        req: u64,
    },
    /// Rendezvous -> rank: request refused.
    Err {
        /// Request id.
        req: u64,
        /// The error's code ([`Error::code`]).
        code: i32,
        /// Its text.
        text: String,
    },
    /// Rendezvous -> rank: import granted.
    ImportOk {
        /// Request id.
        req: u64,
        /// The export's key.
        key: u64,
        /// Its length.
        len: u64,
        /// Whether the exporter has a handler on it.
        has_handler: bool,
    },
    /// Rank -> rendezvous: start `program args` on `host` as a new process of the job
    /// (`vmmc_Spawn`); answered by `Spawned` once it joined, or by `Err`.
    Spawn {
        /// Request id.
        req: u64,
        /// The host.
        host: String,
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// Rendezvous -> spawner: the new process joined.
    Spawned {
        /// Request id.
        req: u64,
        /// Its rank (beyond the initial size).
        rank: u32,
        /// Its identity.
        proc: ProcId,
    },
    /// Rendezvous -> every other process: a spawned process joined; connect to it.
    Joined {
        /// Its rank.
        rank: u32,
        /// Its identity.
        proc: ProcId,
        /// Its data listener.
        addr: String,
    },
    /// Rendezvous -> spawner, when the processes of the job start their spawned processes
    /// themselves (an MPI job: `MPI_Comm_spawn`, see [`crate::server::Rendezvous::set_spawn_by_requester`]):
    /// start the process as rank `rank` with `parent` as its spawner; `Spawned` (or `Err`)
    /// follows once it joined.
    Start {
        /// Request id of the `Spawn`.
        req: u64,
        /// The rank reserved for it.
        rank: u32,
        /// The spawner's identity (`vmmc_Parent` of the new process).
        parent: ProcId,
    },
    /// Spawner -> rendezvous: the process of a `Start` could not be started (`text` says
    /// why); the spawn fails.
    StartFailed {
        /// The rank reserved for it.
        rank: u32,
        /// Why.
        text: String,
    },
    /// Rank -> rendezvous: answered by `Ok` after everything the rendezvous sent this rank
    /// before (a process that learned a spawned process's identity from a peer catches up
    /// with the `Joined` that introduced it).
    Sync {
        /// Request id.
        req: u64,
    },
    /// Rendezvous -> rank: a rank left the job (`crashed`: without saying goodbye).
    Gone {
        /// The rank.
        rank: u32,
        /// Whether it died rather than left.
        crashed: bool,
    },
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v)
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes())
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes())
    }
    fn proc(&mut self, p: ProcId) {
        self.u32(p.node);
        self.u32(p.squid)
    }
}

struct R<'a>(&'a [u8]);

fn short() -> Error {
    Error::Protocol("truncated rendezvous message".into())
}

impl R<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(short());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn str(&mut self) -> Result<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| Error::Protocol("string is not UTF-8".into()))
    }
    fn proc(&mut self) -> Result<ProcId> {
        Ok(ProcId {
            node: self.u32()?,
            squid: self.u32()?,
        })
    }
    fn count(&mut self, each: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.0.len() {
            return Err(short());
        }
        Ok(n)
    }
}

impl Msg {
    /// The message as bytes, length prefix included.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(vec![0; 4]);
        match self {
            Msg::Hello { rank, size, listen } => {
                w.u8(1);
                w.u32(*rank);
                w.u32(*size);
                w.str(listen);
            }
            Msg::Welcome {
                procs,
                hosts,
                addrs,
            } => {
                w.u8(2);
                w.u32(procs.len() as u32);
                procs.iter().for_each(|p| w.proc(*p));
                w.u32(hosts.len() as u32);
                hosts.iter().for_each(|h| w.str(h));
                w.u32(addrs.len() as u32);
                addrs.iter().for_each(|a| w.str(a));
            }
            Msg::Export {
                req,
                buf,
                len,
                key,
                has_handler,
                importers,
            } => {
                w.u8(3);
                w.u64(*req);
                w.u32(*buf);
                w.u64(*len);
                w.u64(*key);
                w.u8(*has_handler as u8);
                match importers {
                    Importers::Any => w.u8(0),
                    Importers::Only(list) => {
                        w.u8(1);
                        w.u32(list.len() as u32);
                        list.iter().for_each(|p| w.proc(*p));
                    }
                }
            }
            Msg::Unexport { req, buf } => {
                w.u8(4);
                w.u64(*req);
                w.u32(*buf);
            }
            Msg::Import { req, owner, buf } => {
                w.u8(5);
                w.u64(*req);
                w.u32(*owner);
                w.u32(*buf);
            }
            Msg::Bye => w.u8(6),
            Msg::Ok { req } => {
                w.u8(7);
                w.u64(*req);
            }
            Msg::Err { req, code, text } => {
                w.u8(8);
                w.u64(*req);
                w.u32(*code as u32);
                w.str(text);
            }
            Msg::ImportOk {
                req,
                key,
                len,
                has_handler,
            } => {
                w.u8(9);
                w.u64(*req);
                w.u64(*key);
                w.u64(*len);
                w.u8(*has_handler as u8);
            }
            Msg::Gone { rank, crashed } => {
                w.u8(10);
                w.u32(*rank);
                w.u8(*crashed as u8);
            }
            Msg::Spawn {
                req,
                host,
                program,
                args,
            } => {
                w.u8(11);
                w.u64(*req);
                w.str(host);
                w.str(program);
                w.u32(args.len() as u32);
                args.iter().for_each(|a| w.str(a));
            }
            Msg::Spawned { req, rank, proc } => {
                w.u8(12);
                w.u64(*req);
                w.u32(*rank);
                w.proc(*proc);
            }
            Msg::Sync { req } => {
                w.u8(14);
                w.u64(*req);
            }
            Msg::Joined { rank, proc, addr } => {
                w.u8(13);
                w.u32(*rank);
                w.proc(*proc);
                w.str(addr);
            }
            Msg::Start { req, rank, parent } => {
                w.u8(15);
                w.u64(*req);
                w.u32(*rank);
                w.proc(*parent);
            }
            Msg::StartFailed { rank, text } => {
                w.u8(16);
                w.u32(*rank);
                w.str(text);
            }
        }
        let n = (w.0.len() - 4) as u32;
        w.0[..4].copy_from_slice(&n.to_le_bytes());
        w.0
    }

    /// Parses a message body (without its length prefix).
    pub fn decode(b: &[u8]) -> Result<Msg> {
        let mut r = R(b);
        let m = match r.u8()? {
            1 => Msg::Hello {
                rank: r.u32()?,
                size: r.u32()?,
                listen: r.str()?,
            },
            2 => {
                let n = r.count(8)?;
                let procs = (0..n).map(|_| r.proc()).collect::<Result<_>>()?;
                let n = r.count(4)?;
                let hosts = (0..n).map(|_| r.str()).collect::<Result<_>>()?;
                let n = r.count(4)?;
                let addrs = (0..n).map(|_| r.str()).collect::<Result<_>>()?;
                Msg::Welcome {
                    procs,
                    hosts,
                    addrs,
                }
            }
            3 => Msg::Export {
                req: r.u64()?,
                buf: r.u32()?,
                len: r.u64()?,
                key: r.u64()?,
                has_handler: r.u8()? != 0,
                importers: match r.u8()? {
                    0 => Importers::Any,
                    _ => {
                        let n = r.count(8)?;
                        Importers::Only((0..n).map(|_| r.proc()).collect::<Result<_>>()?)
                    }
                },
            },
            4 => Msg::Unexport {
                req: r.u64()?,
                buf: r.u32()?,
            },
            5 => Msg::Import {
                req: r.u64()?,
                owner: r.u32()?,
                buf: r.u32()?,
            },
            6 => Msg::Bye,
            7 => Msg::Ok { req: r.u64()? },
            8 => Msg::Err {
                req: r.u64()?,
                code: r.u32()? as i32,
                text: r.str()?,
            },
            9 => Msg::ImportOk {
                req: r.u64()?,
                key: r.u64()?,
                len: r.u64()?,
                has_handler: r.u8()? != 0,
            },
            10 => Msg::Gone {
                rank: r.u32()?,
                crashed: r.u8()? != 0,
            },
            11 => {
                let req = r.u64()?;
                let host = r.str()?;
                let program = r.str()?;
                let n = r.count(4)?;
                let args = (0..n).map(|_| r.str()).collect::<Result<_>>()?;
                Msg::Spawn {
                    req,
                    host,
                    program,
                    args,
                }
            }
            12 => Msg::Spawned {
                req: r.u64()?,
                rank: r.u32()?,
                proc: r.proc()?,
            },
            14 => Msg::Sync { req: r.u64()? },
            13 => Msg::Joined {
                rank: r.u32()?,
                proc: r.proc()?,
                addr: r.str()?,
            },
            15 => Msg::Start {
                req: r.u64()?,
                rank: r.u32()?,
                parent: r.proc()?,
            },
            16 => Msg::StartFailed {
                rank: r.u32()?,
                text: r.str()?,
            },
            t => return Err(Error::Protocol(format!("unknown rendezvous message {t}"))),
        };
        if !r.0.is_empty() {
            return Err(Error::Protocol(
                "trailing bytes in a rendezvous message".into(),
            ));
        }
        Ok(m)
    }

    /// Writes the message to a blocking stream.
    pub fn send(&self, mut s: impl Write) -> io::Result<()> {
        s.write_all(&self.encode())
    }

    /// Reads one message from a blocking stream; `None` at a clean end of stream.
    pub fn recv(mut s: impl Read) -> Result<Option<Msg>> {
        let mut len = [0u8; 4];
        match s.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(Error::io("rendezvous read", e)),
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > MAX_MSG {
            return Err(Error::Protocol(format!("rendezvous message of {n} bytes")));
        }
        let mut b = vec![0u8; n];
        s.read_exact(&mut b)
            .map_err(|e| Error::io("rendezvous read", e))?;
        Msg::decode(&b).map(Some)
    }
}

/// Rebuilds an error sent as a code and a text.
pub fn error_from(code: i32, text: String, buf: BufId) -> Error {
    match code {
        -3 => Error::BufIdInUse(buf),
        -5 => Error::NoSuchBuffer(buf),
        -6 => Error::PermissionDenied(buf),
        -10 => Error::PeerLost(text),
        -20 => Error::SpawnFailed(match text.strip_prefix("spawn failed: ") {
            Some(t) => t.to_string(),
            None => text,
        }),
        -16 => Error::Unsupported(
            "vmmc_Spawn: no launcher hosts this job's rendezvous (start the job with vmmc-run)",
        ),
        -1 => Error::InvalidArgument("refused by the rendezvous"),
        _ => Error::Protocol(text),
    }
}

/// Frame kinds on a data connection.
pub mod kind {
    /// A deliberate update: `len` bytes of data for `key` at `offset`.
    pub const WRITE: u8 = 1;
    /// The exporter revoked `key` (unexport): later writes with it are refused.
    pub const REVOKE: u8 = 2;
    /// A fence: the receiver answers [`FENCE_ACK`] with the same `offset` (a sequence number)
    /// once every earlier frame is placed.
    pub const FENCE: u8 = 3;
    /// The answer to [`FENCE`].
    pub const FENCE_ACK: u8 = 4;
    /// The sender leaves the job cleanly (the end of stream that follows is no crash).
    pub const BYE: u8 = 5;
    /// First frame of a connection: `offset` is the connecting rank, `key` [`super::MAGIC`].
    pub const HELLO: u8 = 6;
    /// A write placed by another path (an embedding transport's one-sided put, already
    /// complete at the receiver) is announced: `key` names the export, `offset` packs the
    /// value of the write's last word (high 32 bits) and that word's offset (low 32 bits);
    /// no data follows. With [`super::FLAG_NOTIFY`] the receiver raises the
    /// notification; in any case it rings its bell. Checked on arrival like a write.
    pub const PLACED: u8 = 7;
    /// The exporter hands out `key` again (an embedding transport whose keys come from a
    /// bounded space, see [`crate::TcpTransport::unrevoke`]): the receiver forgets that it
    /// was revoked, so that an import of the new export gets a live link. Links made before
    /// keep their revocation.
    pub const UNREVOKE: u8 = 8;
}

/// Header flag: raise a notification after the data is placed.
pub const FLAG_NOTIFY: u8 = 1;

/// Identifies a data connection of this protocol.
pub const MAGIC: u64 = 0x564d_4d43_5443_5031; // "VMMCTCP1"

/// Size of a frame header.
pub const HEADER: usize = 32;

/// The header of a frame on a data connection, little-endian: kind, flags, 6 bytes of
/// padding, length of the data that follows, key, offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    /// One of [`kind`].
    pub kind: u8,
    /// [`FLAG_NOTIFY`] or 0.
    pub flags: u8,
    /// Bytes of data after the header.
    pub len: u64,
    /// The export's key.
    pub key: u64,
    /// Offset in the receive buffer (or the kind's argument).
    pub offset: u64,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER] {
        let mut b = [0u8; HEADER];
        b[0] = self.kind;
        b[1] = self.flags;
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b
    }

    /// Parses a header.
    pub fn decode(b: &[u8; HEADER]) -> Header {
        let w = |a: usize| u64::from_le_bytes(b[a..a + 8].try_into().expect("8 bytes"));
        Header {
            kind: b[0],
            flags: b[1],
            len: w(8),
            key: w(16),
            offset: w(24),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        let p = ProcId { node: 1, squid: 2 };
        for m in [
            Msg::Hello {
                rank: 1,
                size: 2,
                listen: "10.0.0.1:5".into(),
            },
            Msg::Welcome {
                procs: vec![p, p],
                hosts: vec!["h".into()],
                addrs: vec!["a".into(), "b".into()],
            },
            Msg::Export {
                req: 1,
                buf: 2,
                len: 3,
                key: 4,
                has_handler: true,
                importers: Importers::Only(vec![p]),
            },
            Msg::Unexport { req: 5, buf: 6 },
            Msg::Spawn {
                req: 3,
                host: "h".into(),
                program: "/bin/true".into(),
                args: vec!["a".into(), "".into()],
            },
            Msg::Spawned {
                req: 4,
                rank: 5,
                proc: p,
            },
            Msg::Joined {
                rank: 5,
                proc: p,
                addr: "10.0.0.1:7".into(),
            },
            Msg::Sync { req: 6 },
            Msg::Start {
                req: 9,
                rank: 3,
                parent: p,
            },
            Msg::StartFailed {
                rank: 3,
                text: "no".into(),
            },
            Msg::Import {
                req: 7,
                owner: 8,
                buf: 9,
            },
            Msg::Bye,
            Msg::Ok { req: 10 },
            Msg::Err {
                req: 11,
                code: -6,
                text: "no".into(),
            },
            Msg::ImportOk {
                req: 12,
                key: 13,
                len: 14,
                has_handler: false,
            },
            Msg::Gone {
                rank: 3,
                crashed: true,
            },
        ] {
            let b = m.encode();
            assert_eq!(Msg::decode(&b[4..]).unwrap(), m);
            assert!(Msg::decode(&b[4..b.len() - 1]).is_err() || b.len() == 5);
        }
        let h = Header {
            kind: kind::WRITE,
            flags: FLAG_NOTIFY,
            len: 8,
            key: 9,
            offset: 10,
        };
        assert_eq!(Header::decode(&h.encode()), h);
    }

    #[test]
    fn hostile_counts_are_refused() {
        // A Welcome claiming 2^32-1 processes in a few bytes must not allocate them.
        let mut b = vec![2u8];
        b.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Msg::decode(&b).is_err());
    }
}
