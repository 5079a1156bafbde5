//! Remote read emulated as a request and a reply, for transports without native remote read
//! (UCX's `put_am.c` idea: an operation the fabric lacks, built from one it has).
//!
//! Every endpoint of such a transport exports two hidden buffers: a *service* buffer where
//! requests arrive (one slot per rank, so requesters never overwrite each other) and a *reply*
//! buffer where the answers to its own reads arrive. A read is a deliberate update of the
//! request into the owner's service slot with a notification; the owner's notification thread,
//! which drains the transport and never runs a user handler (handlers have their own thread),
//! answers at once, also while notifications are blocked (SHRIMP's remote read did not involve
//! the receiver's program either), with a deliberate update of the data, then of a status and
//! the request's sequence number; in-order delivery means the data is there once the sequence
//! number is. So handlers may read remotely, even from each other.

use crate::endpoint::Exported;
use crate::error::{Error, Result};
use crate::region::{MemKind, Region};
use crate::transport::{ExportSpec, ImportPoll, RemoteBuffer, Transport, WriteOpts};
use crate::types::{BufId, Importers, Notification, ProcId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// The hidden buffer where read requests arrive.
pub const SERVICE_BUF: BufId = 0xFFFF_FFF0;
/// The hidden buffer where read replies arrive.
pub const REPLY_BUF: BufId = 0xFFFF_FFF1;
/// Buffer ids from here up are reserved for the library.
pub const RESERVED_IDS: BufId = 0xFFFF_FFF0;

/// One request slot: buf(4) pad(4) offset(8) len(8) seq(4), padded to 32.
const SLOT: usize = 32;
const REQ: usize = 28;
/// Largest piece one request reads.
const CHUNK: usize = 64 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Links to other ranks' hidden buffers, by rank.
type Links = HashMap<usize, Box<dyn RemoteBuffer>>;

/// The link to `rank`'s hidden buffer, imported on first use.
fn link<'a>(
    links: &'a mut Links,
    t: &dyn Transport,
    rank: usize,
    buf: BufId,
) -> Result<&'a dyn RemoteBuffer> {
    let r = match links.entry(rank) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(v) => {
            v.insert(import(t, t.job().procs[rank], buf)?)
        }
    };
    Ok(&**r)
}

/// Both sides of the emulated remote read of one endpoint.
pub(crate) struct ReadService {
    t: Arc<dyn Transport>,
    served: Arc<Mutex<BTreeMap<BufId, Exported>>>,
    service: Region,
    reply: Region,
    /// Requester rank -> its reply buffer (the owner side).
    replies_to: Mutex<Links>,
    /// Owner rank -> its service buffer, and the sequence number (the requester side; the
    /// lock also serialises this process's emulated reads).
    requests_to: Mutex<(u32, Links)>,
}

fn import(t: &dyn Transport, owner: ProcId, buf: BufId) -> Result<Box<dyn RemoteBuffer>> {
    let req = t.import_request(owner, buf)?;
    match t.import_poll(req, true)? {
        ImportPoll::Ready(r) => Ok(r),
        ImportPoll::Pending => Err(Error::Protocol("blocking import returned pending".into())),
    }
}

fn code_error(code: i32, buf: BufId, offset: usize, len: usize, size: usize) -> Error {
    match code {
        -5 => Error::NoSuchBuffer(buf),
        -6 => Error::PermissionDenied(buf),
        -7 => Error::OutOfBounds { offset, len, size },
        c => Error::Protocol(format!("remote read failed with code {c}")),
    }
}

impl ReadService {
    /// Exports the hidden buffers.
    pub(crate) fn start(
        t: Arc<dyn Transport>,
        served: Arc<Mutex<BTreeMap<BufId, Exported>>>,
    ) -> Result<ReadService> {
        let n = t.job().size;
        let service = Region::alloc(SLOT * n, MemKind::Shared)?;
        let reply = Region::alloc(CHUNK + 8, MemKind::Shared)?;
        for (buf, region, has_handler) in
            [(SERVICE_BUF, &service, true), (REPLY_BUF, &reply, false)]
        {
            t.export(ExportSpec {
                buf,
                region,
                importers: &Importers::Any,
                redirectable: false,
                has_handler,
            })?;
        }
        Ok(ReadService {
            t,
            served,
            service,
            reply,
            replies_to: Mutex::new(HashMap::new()),
            requests_to: Mutex::new((0, HashMap::new())),
        })
    }

    /// Requester: reads `out.len()` bytes at `offset` of `owner`'s buffer `buf` (`size` bytes).
    pub(crate) fn read(
        &self,
        owner: ProcId,
        buf: BufId,
        size: usize,
        offset: usize,
        out: &mut [u8],
    ) -> Result<()> {
        let job = self.t.job();
        let rank = job
            .rank_of(owner)
            .ok_or_else(|| Error::PeerLost(owner.to_string()))?;
        let me = job.rank;
        let mut g = lock(&self.requests_to);
        let (seq, targets) = &mut *g;
        let svc = link(targets, &*self.t, rank, SERVICE_BUF)?;
        let mut pos = 0;
        while pos < out.len() {
            let n = (out.len() - pos).min(CHUNK);
            *seq = seq.wrapping_add(1).max(1);
            let s = *seq;
            let mut req = [0u8; REQ];
            req[0..4].copy_from_slice(&buf.to_ne_bytes());
            req[8..16].copy_from_slice(&((offset + pos) as u64).to_ne_bytes());
            req[16..24].copy_from_slice(&(n as u64).to_ne_bytes());
            req[24..28].copy_from_slice(&s.to_ne_bytes());
            crate::transport::write_notify_wait(svc, me * SLOT, &req)?;
            let t = &self.t;
            self.reply.wait_u32(
                CHUNK + 4,
                |v| v == s,
                || {
                    if t.peer_alive(owner) {
                        Ok(())
                    } else {
                        Err(Error::PeerLost(owner.to_string()))
                    }
                },
            )?;
            let status = self.reply.load_u32(CHUNK)? as i32;
            if status != 0 {
                return Err(code_error(status, buf, offset, out.len(), size));
            }
            self.reply.read(0, &mut out[pos..pos + n])?;
            pos += n;
        }
        Ok(())
    }

    /// Owner: answers the request that raised `n` (a notification on [`SERVICE_BUF`]).
    pub(crate) fn serve(&self, n: Notification) {
        if let Err(e) = self.try_serve(n) {
            eprintln!("vmmc: remote read service: {e}");
        }
    }

    fn try_serve(&self, n: Notification) -> Result<()> {
        let job = self.t.job();
        let rank = n.offset / SLOT;
        if rank >= job.size || n.offset % SLOT != REQ - 4 {
            return Err(Error::Protocol(format!(
                "read request at offset {}",
                n.offset
            )));
        }
        let mut req = [0u8; REQ];
        self.service.read(rank * SLOT, &mut req)?;
        let word = |a: usize| u32::from_ne_bytes(req[a..a + 4].try_into().expect("4 bytes"));
        let long = |a: usize| u64::from_ne_bytes(req[a..a + 8].try_into().expect("8 bytes"));
        let (buf, offset, len, seq) = (word(0), long(8) as usize, long(16) as usize, n.value);
        let requester = job.procs[rank];
        let (status, data) = {
            let served = lock(&self.served);
            match served.get(&buf) {
                None => (Error::NoSuchBuffer(buf).code(), None),
                Some(s) if !s.importers.allows(requester) => {
                    (Error::PermissionDenied(buf).code(), None)
                }
                Some(s)
                    if len > CHUNK
                        || offset.checked_add(len).is_none_or(|e| e > s.region.len()) =>
                {
                    (
                        Error::OutOfBounds {
                            offset,
                            len,
                            size: s.region.len(),
                        }
                        .code(),
                        None,
                    )
                }
                Some(s) => {
                    let mut d = vec![0u8; len];
                    s.region.read(offset, &mut d)?;
                    (0, Some(d))
                }
            }
        };
        let mut replies = lock(&self.replies_to);
        let r = link(&mut replies, &*self.t, rank, REPLY_BUF)?;
        if let Some(d) = data.filter(|d| !d.is_empty()) {
            r.write(0, &d, WriteOpts::default())?;
        }
        let mut tail = [0u8; 8];
        tail[..4].copy_from_slice(&status.to_ne_bytes());
        tail[4..].copy_from_slice(&seq.to_ne_bytes());
        r.write(CHUNK, &tail, WriteOpts::default())
    }
}
