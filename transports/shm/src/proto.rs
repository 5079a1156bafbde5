//! The messages between a process and the trusted party (the rendezvous), one per seqpacket
//! datagram, little-endian. Decoding never panics: a short or unknown message is a
//! [`Error::Protocol`].

use vmmc::{BufId, Error, Importers, ProcId, Result};

/// A message on the rendezvous socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Process -> party, first message; carries the notification ring's descriptor.
    Hello { rank: u32, pid: u32 },
    /// Party -> process, once every rank said hello (a spawned process: once it did);
    /// carries the status page's descriptor. `cap` is the ranks the job's tables hold.
    Welcome {
        squids: Vec<u32>,
        host: String,
        cap: u32,
    },
    /// Export a buffer; carries the control block's and (shared memory) the region's
    /// descriptors.
    Export {
        req: u64,
        buf: BufId,
        shared: bool,
        len: u64,
        addr: u64,
        importers: Importers,
    },
    /// Remove an export (after the exporter revoked it and drained senders).
    Unexport { req: u64, buf: BufId },
    /// Import a buffer of `owner`.
    Import { req: u64, owner: ProcId, buf: BufId },
    /// Clean exit.
    Bye,
    /// The importer dropped import request `req`: if it still waits, the party answers it
    /// with an error; either way exactly one reply to `req` arrives.
    CancelImport { req: u64 },
    /// Success of `req`.
    Ok { req: u64 },
    /// Failure of `req`.
    Err { req: u64, code: i32, text: String },
    /// Import granted; carries the control block, the owner's ring, and (shared memory) the
    /// region.
    ImportOk {
        req: u64,
        len: u64,
        shared: bool,
        addr: u64,
        pid: u32,
        owner_rank: u32,
    },
    /// Process -> party: start `program args` on `host` as a new process of the job
    /// (`vmmc_Spawn`); answered by `Spawned` once it joined, or by `Err`.
    Spawn {
        req: u64,
        host: String,
        program: String,
        args: Vec<String>,
    },
    /// Party -> spawner: the new process joined with this rank and squid (node 0).
    Spawned { req: u64, rank: u32, squid: u32 },
}

struct W(Vec<u8>);
impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
}

struct R<'a>(&'a [u8]);
impl R<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.0.len() < n {
            return Err(Error::Protocol("short rendezvous message".into()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn count(&mut self, each: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.0.len() {
            return Err(Error::Protocol("count larger than the message".into()));
        }
        Ok(n)
    }
    fn str(&mut self) -> Result<String> {
        let n = self.count(1)?;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| Error::Protocol("string is not UTF-8".into()))
    }
}

impl Msg {
    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(64));
        match self {
            Msg::Hello { rank, pid } => {
                w.u8(1).u32(*rank).u32(*pid);
            }
            Msg::Welcome { squids, host, cap } => {
                w.u8(2).u32(squids.len() as u32);
                for s in squids {
                    w.u32(*s);
                }
                w.str(host).u32(*cap);
            }
            Msg::Export {
                req,
                buf,
                shared,
                len,
                addr,
                importers,
            } => {
                w.u8(3)
                    .u64(*req)
                    .u32(*buf)
                    .u8(*shared as u8)
                    .u64(*len)
                    .u64(*addr);
                match importers {
                    Importers::Any => {
                        w.u8(0);
                    }
                    Importers::Only(list) => {
                        w.u8(1).u32(list.len() as u32);
                        for p in list {
                            w.u32(p.node).u32(p.squid);
                        }
                    }
                }
            }
            Msg::Unexport { req, buf } => {
                w.u8(4).u64(*req).u32(*buf);
            }
            Msg::Import { req, owner, buf } => {
                w.u8(5).u64(*req).u32(owner.node).u32(owner.squid).u32(*buf);
            }
            Msg::Bye => {
                w.u8(6);
            }
            Msg::CancelImport { req } => {
                w.u8(10).u64(*req);
            }
            Msg::Ok { req } => {
                w.u8(7).u64(*req);
            }
            Msg::Err { req, code, text } => {
                w.u8(8).u64(*req).u32(*code as u32).str(text);
            }
            Msg::ImportOk {
                req,
                len,
                shared,
                addr,
                pid,
                owner_rank,
            } => {
                w.u8(9)
                    .u64(*req)
                    .u64(*len)
                    .u8(*shared as u8)
                    .u64(*addr)
                    .u32(*pid)
                    .u32(*owner_rank);
            }
            Msg::Spawn {
                req,
                host,
                program,
                args,
            } => {
                w.u8(11)
                    .u64(*req)
                    .str(host)
                    .str(program)
                    .u32(args.len() as u32);
                for a in args {
                    w.str(a);
                }
            }
            Msg::Spawned { req, rank, squid } => {
                w.u8(12).u64(*req).u32(*rank).u32(*squid);
            }
        }
        w.0
    }

    /// Decodes a message.
    pub fn decode(b: &[u8]) -> Result<Msg> {
        let mut r = R(b);
        let m = match r.u8()? {
            1 => Msg::Hello {
                rank: r.u32()?,
                pid: r.u32()?,
            },
            2 => {
                let n = r.count(4)?;
                let squids = (0..n).map(|_| r.u32()).collect::<Result<_>>()?;
                Msg::Welcome {
                    squids,
                    host: r.str()?,
                    cap: r.u32()?,
                }
            }
            3 => {
                let (req, buf, shared, len, addr) =
                    (r.u64()?, r.u32()?, r.u8()? != 0, r.u64()?, r.u64()?);
                let importers = match r.u8()? {
                    0 => Importers::Any,
                    1 => {
                        let n = r.count(8)?;
                        Importers::Only(
                            (0..n)
                                .map(|_| {
                                    Ok(ProcId {
                                        node: r.u32()?,
                                        squid: r.u32()?,
                                    })
                                })
                                .collect::<Result<_>>()?,
                        )
                    }
                    _ => return Err(Error::Protocol("bad importer list".into())),
                };
                Msg::Export {
                    req,
                    buf,
                    shared,
                    len,
                    addr,
                    importers,
                }
            }
            4 => Msg::Unexport {
                req: r.u64()?,
                buf: r.u32()?,
            },
            5 => Msg::Import {
                req: r.u64()?,
                owner: ProcId {
                    node: r.u32()?,
                    squid: r.u32()?,
                },
                buf: r.u32()?,
            },
            6 => Msg::Bye,
            10 => Msg::CancelImport { req: r.u64()? },
            7 => Msg::Ok { req: r.u64()? },
            8 => Msg::Err {
                req: r.u64()?,
                code: r.u32()? as i32,
                text: r.str()?,
            },
            9 => Msg::ImportOk {
                req: r.u64()?,
                len: r.u64()?,
                shared: r.u8()? != 0,
                addr: r.u64()?,
                pid: r.u32()?,
                owner_rank: r.u32()?,
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
                squid: r.u32()?,
            },
            t => {
                return Err(Error::Protocol(format!(
                    "unknown rendezvous message type {t}"
                )))
            }
        };
        if !r.0.is_empty() {
            return Err(Error::Protocol(
                "trailing bytes in rendezvous message".into(),
            ));
        }
        Ok(m)
    }

    /// The failure reply for an error.
    pub fn err(req: u64, e: &Error) -> Msg {
        Msg::Err {
            req,
            code: e.code(),
            text: e.to_string(),
        }
    }
}

/// Rebuilds an error sent by the party.
pub fn error_from(code: i32, text: String, buf: BufId) -> Error {
    match code {
        -3 => Error::BufIdInUse(buf),
        -4 => Error::Overlap(buf),
        -5 => Error::NoSuchBuffer(buf),
        -6 => Error::PermissionDenied(buf),
        -10 => Error::PeerLost(text),
        -20 => Error::SpawnFailed(match text.strip_prefix("spawn failed: ") {
            Some(t) => t.to_string(),
            None => text,
        }),
        _ => Error::Protocol(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let msgs = vec![
            Msg::Hello { rank: 3, pid: 77 },
            Msg::Welcome {
                squids: vec![1, 2, 3],
                host: "h".into(),
                cap: 5,
            },
            Msg::Export {
                req: 1,
                buf: 2,
                shared: true,
                len: 4096,
                addr: 0xdead,
                importers: Importers::Only(vec![ProcId { node: 0, squid: 2 }]),
            },
            Msg::Unexport { req: 5, buf: 6 },
            Msg::Import {
                req: 7,
                owner: ProcId { node: 0, squid: 1 },
                buf: 9,
            },
            Msg::Bye,
            Msg::CancelImport { req: 10 },
            Msg::Spawn {
                req: 13,
                host: "h".into(),
                program: "p".into(),
                args: vec!["a".into(), String::new()],
            },
            Msg::Spawned {
                req: 14,
                rank: 3,
                squid: 4,
            },
            Msg::Ok { req: 11 },
            Msg::err(12, &Error::PermissionDenied(3)),
            Msg::ImportOk {
                req: 13,
                len: 8,
                shared: false,
                addr: 4,
                pid: 5,
                owner_rank: 1,
            },
        ];
        for m in msgs {
            let b = m.encode();
            assert_eq!(Msg::decode(&b).unwrap(), m);
            for cut in 0..b.len() {
                assert!(Msg::decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
            }
        }
        // Every byte string decodes to a message or an error, never a panic.
        let mut x: u32 = 1;
        for _ in 0..20000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let len = (x % 40) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| (x.rotate_left(i as u32) & 0xff) as u8 % 12)
                .collect();
            let _ = Msg::decode(&bytes);
        }
        assert!(Msg::decode(&[2, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
