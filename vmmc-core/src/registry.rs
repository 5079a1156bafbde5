//! The trusted party's tables (seed 003 §3.3: "trusted servers ... establish import/export
//! mappings"): exports with their permissions, imports waiting for an export, and squids.
//!
//! A process spawned into a running job (`vmmc_Spawn`) is one more `ProcId` here: its exports,
//! imports and departure are kept like any rank's; the transport gives it a squid no process
//! of the job had.
//!
//! Pure bookkeeping, with no I/O: a transport hosts it where its trusted party runs (the shm
//! launcher's rendezvous, the sim transport's kernel) and moves the replies itself. `H` is the
//! transport's handle for an export (for shm: the descriptors an importer maps).

use crate::error::{Error, Result};
use crate::types::{BufId, Importers, ProcId, Squid};
use std::collections::{HashMap, HashSet};

/// What a launcher is asked to start for `vmmc_Spawn` (see `Endpoint::spawn`): the trusted
/// party reserved a rank for it and waits for its hello.
#[derive(Clone, Debug)]
pub struct SpawnOrder {
    /// The new process's rank (`VMMC_RANK`; its `VMMC_SIZE` is `rank + 1`).
    pub rank: usize,
    /// The host it runs on.
    pub host: String,
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// The process that asked (`VMMC_PARENT`).
    pub parent: ProcId,
}

/// Starts the process of a [`SpawnOrder`]; `Err` says why it could not (unknown host, no
/// such program). A process that starts and then ends before joining is reported to the
/// trusted party by the launcher, which fails the spawn.
pub type Spawner = Box<dyn Fn(&SpawnOrder) -> std::result::Result<(), String> + Send + Sync>;

/// An import that waits for its buffer to be exported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingImport {
    /// Who imports.
    pub importer: ProcId,
    /// The importer's request id.
    pub request: u64,
    /// The exporter.
    pub owner: ProcId,
    /// The buffer.
    pub buf: BufId,
}

struct Record<H> {
    importers: Importers,
    handle: H,
    linked: HashSet<ProcId>,
}

/// What became of an import.
pub enum ImportOutcome<'a, H> {
    /// Granted: here is the export's handle.
    Ready(&'a H),
    /// The buffer is not exported yet; the import waits.
    Pending,
    /// Refused.
    Failed(Error),
}

/// The export table of a job.
pub struct Registry<H> {
    exports: HashMap<(ProcId, BufId), Record<H>>,
    pending: Vec<PendingImport>,
    gone: HashSet<ProcId>,
    next_squid: Squid,
}

impl<H> Default for Registry<H> {
    fn default() -> Self {
        Registry {
            exports: HashMap::new(),
            pending: Vec::new(),
            gone: HashSet::new(),
            next_squid: 1,
        }
    }
}

impl<H> Registry<H> {
    /// A fresh squid: unique on this node and never recycled during the job.
    pub fn new_squid(&mut self) -> Squid {
        let s = self.next_squid;
        self.next_squid += 1;
        s
    }

    /// Records an export; returns the imports it completes (each granted or refused).
    pub fn export(
        &mut self,
        owner: ProcId,
        buf: BufId,
        importers: Importers,
        handle: H,
    ) -> Result<Vec<(PendingImport, Result<()>)>> {
        if self.exports.contains_key(&(owner, buf)) {
            return Err(Error::BufIdInUse(buf));
        }
        self.exports.insert(
            (owner, buf),
            Record {
                importers,
                handle,
                linked: HashSet::new(),
            },
        );
        let (done, rest): (Vec<_>, Vec<_>) = self
            .pending
            .drain(..)
            .partition(|p| p.owner == owner && p.buf == buf);
        self.pending = rest;
        let rec = self.exports.get_mut(&(owner, buf)).expect("inserted");
        Ok(done
            .into_iter()
            .map(|p| {
                let r = if rec.importers.allows(p.importer) {
                    rec.linked.insert(p.importer);
                    Ok(())
                } else {
                    Err(Error::PermissionDenied(buf))
                };
                (p, r)
            })
            .collect())
    }

    /// The handle of an export (e.g. to hand it to an importer granted by [`Registry::export`]).
    pub fn handle(&self, owner: ProcId, buf: BufId) -> Option<&H> {
        self.exports.get(&(owner, buf)).map(|r| &r.handle)
    }

    /// Handles an import request.
    pub fn import(&mut self, p: PendingImport) -> ImportOutcome<'_, H> {
        if self.gone.contains(&p.owner) {
            return ImportOutcome::Failed(Error::PeerLost(p.owner.to_string()));
        }
        match self.exports.get_mut(&(p.owner, p.buf)) {
            Some(rec) if rec.importers.allows(p.importer) => {
                rec.linked.insert(p.importer);
                ImportOutcome::Ready(&rec.handle)
            }
            Some(_) => ImportOutcome::Failed(Error::PermissionDenied(p.buf)),
            None => {
                self.pending.push(p);
                ImportOutcome::Pending
            }
        }
    }

    /// Withdraws import `request` of `importer` if it still waits; whether it did.
    pub fn cancel(&mut self, importer: ProcId, request: u64) -> bool {
        let before = self.pending.len();
        self.pending
            .retain(|x| !(x.importer == importer && x.request == request));
        self.pending.len() != before
    }

    /// Removes an export; returns its handle and the processes linked to it.
    pub fn unexport(&mut self, owner: ProcId, buf: BufId) -> Result<(H, Vec<ProcId>)> {
        let rec = self
            .exports
            .remove(&(owner, buf))
            .ok_or(Error::NoSuchBuffer(buf))?;
        Ok((rec.handle, rec.linked.into_iter().collect()))
    }

    /// A process left the job (exited or died): drops its exports (returned, so the caller can
    /// revoke them) and fails the imports waiting on it (returned too).
    pub fn proc_gone(&mut self, p: ProcId) -> (Vec<(BufId, H)>, Vec<PendingImport>) {
        self.gone.insert(p);
        let keys: Vec<_> = self
            .exports
            .keys()
            .filter(|(o, _)| *o == p)
            .copied()
            .collect();
        let exports = keys
            .into_iter()
            .filter_map(|k| self.exports.remove(&k).map(|r| (k.1, r.handle)))
            .collect();
        let (failed, rest): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|x| x.owner == p);
        self.pending = rest.into_iter().filter(|x| x.importer != p).collect();
        (exports, failed)
    }

    /// Whether a process has left.
    pub fn is_gone(&self, p: ProcId) -> bool {
        self.gone.contains(&p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pid(s: Squid) -> ProcId {
        ProcId { node: 0, squid: s }
    }

    #[test]
    fn import_waits_for_export_and_permissions_hold() {
        let mut r: Registry<&str> = Registry::default();
        let (a, b, c) = (pid(1), pid(2), pid(3));
        let p = |importer, request| PendingImport {
            importer,
            request,
            owner: a,
            buf: 7,
        };
        assert!(matches!(r.import(p(b, 1)), ImportOutcome::Pending));
        assert!(matches!(r.import(p(c, 2)), ImportOutcome::Pending));
        let done = r.export(a, 7, Importers::Only(vec![b]), "h").unwrap();
        assert_eq!(done.len(), 2);
        assert!(done[0].1.is_ok());
        assert!(matches!(done[1].1, Err(Error::PermissionDenied(7))));
        assert!(matches!(r.import(p(b, 3)), ImportOutcome::Ready(&"h")));
        assert!(matches!(
            r.import(p(c, 4)),
            ImportOutcome::Failed(Error::PermissionDenied(7))
        ));
        assert!(matches!(
            r.export(a, 7, Importers::Any, "x"),
            Err(Error::BufIdInUse(7))
        ));
        let (h, linked) = r.unexport(a, 7).unwrap();
        assert_eq!((h, linked), ("h", vec![b]));
        assert!(matches!(r.unexport(a, 7), Err(Error::NoSuchBuffer(7))));
    }

    #[test]
    fn a_dead_exporter_fails_waiting_imports() {
        let mut r: Registry<u32> = Registry::default();
        let (a, b) = (pid(1), pid(2));
        r.export(a, 1, Importers::Any, 10).unwrap();
        let wait = PendingImport {
            importer: b,
            request: 9,
            owner: a,
            buf: 2,
        };
        assert!(matches!(r.import(wait), ImportOutcome::Pending));
        let (ex, failed) = r.proc_gone(a);
        assert_eq!(ex, vec![(1, 10)]);
        assert_eq!(failed, vec![wait]);
        assert!(matches!(
            r.import(wait),
            ImportOutcome::Failed(Error::PeerLost(_))
        ));
        assert!(r.new_squid() < r.new_squid());
    }
}
