//! The asynchronous engine: SHRIMP's deliberate-update engine in software. `send_async` and
//! `get_data_async` queue a job and return at once; one thread per endpoint performs the jobs
//! in order, through the same transport paths as the blocking calls, while the program goes
//! on. A request owns its data until it completes (the rsmpi rule), so the API stays safe.
//!
//! Order: jobs run in the order they were queued, and a blocking send waits until the queue is
//! empty, so deliberate updates stay in order per sender whichever call made them.

use crate::endpoint::{ProxyInner, Shared};
use crate::error::{Error, Result};
use crate::transport::WriteOpts;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Completion status of an asynchronous operation (`vmmc_AsyncStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncStatus {
    /// Still in progress: the send buffer is not reusable yet.
    Pending,
    /// Complete: the data has left (or, for a read, arrived).
    Done,
}

/// Where a job leaves its result.
struct Completion<T> {
    result: Mutex<Option<Result<T>>>,
    cv: Condvar,
}

impl<T> Completion<T> {
    fn new() -> Arc<Completion<T>> {
        Arc::new(Completion {
            result: Mutex::new(None),
            cv: Condvar::new(),
        })
    }
    fn set(&self, r: Result<T>) {
        *lock(&self.result) = Some(r);
        self.cv.notify_all();
    }
    fn wait(&self) -> Result<T> {
        let mut g = lock(&self.result);
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

enum Op {
    Write {
        offset: usize,
        data: Arc<[u8]>,
        opts: WriteOpts,
        done: Arc<Completion<()>>,
    },
    Read {
        offset: usize,
        len: usize,
        sh: Arc<Shared>,
        done: Arc<Completion<Vec<u8>>>,
    },
}

struct Job {
    proxy: Arc<ProxyInner>,
    op: Op,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    stop: bool,
}

/// The engine of one endpoint.
#[derive(Default)]
pub(crate) struct Engine {
    q: Mutex<Queue>,
    cv: Condvar,
    /// Jobs queued or running; blocking sends wait for zero.
    pending: AtomicUsize,
    idle: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Waits until every queued job has run (cheap when none is: one load).
    #[inline]
    pub(crate) fn settle(&self) {
        if self.pending.load(Ordering::Acquire) != 0 {
            self.wait_idle();
        }
    }

    #[cold]
    fn wait_idle(&self) {
        let mut q = lock(&self.q);
        while self.pending.load(Ordering::Acquire) != 0 && !q.stop {
            q = self.idle.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn submit(self: &Arc<Self>, job: Job) -> Result<()> {
        let mut q = lock(&self.q);
        if q.stop {
            return Err(Error::InvalidArgument("the endpoint is finishing"));
        }
        let mut t = lock(&self.thread);
        if t.is_none() {
            let me = self.clone();
            *t = Some(
                crate::pace::spawn_inheriting(
                    std::thread::Builder::new().name("vmmc-async".into()),
                    move || me.run(),
                )
                .map_err(|e| Error::io("spawn the asynchronous engine", e))?,
            );
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        q.jobs.push_back(job);
        self.cv.notify_all();
        Ok(())
    }

    fn run(&self) {
        loop {
            let job = {
                let mut q = lock(&self.q);
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
                    }
                    if q.stop {
                        return;
                    }
                    q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            match job.op {
                Op::Write {
                    offset,
                    data,
                    opts,
                    done,
                } => done.set(job.proxy.write(offset, &data, opts)),
                Op::Read {
                    offset,
                    len,
                    sh,
                    done,
                } => {
                    let mut out = vec![0u8; len];
                    done.set(sh.get_data(&job.proxy, offset, &mut out).map(|()| out));
                }
            }
            let _q = lock(&self.q);
            self.pending.fetch_sub(1, Ordering::AcqRel);
            self.idle.notify_all();
        }
    }

    /// Runs `f` holding the engine's lock (tests).
    pub(crate) fn hold_lock(&self, f: &mut dyn FnMut()) {
        let _q = lock(&self.q);
        f()
    }

    /// Runs what is queued, then stops the thread (never joining the current one).
    pub(crate) fn stop(&self) {
        lock(&self.q).stop = true;
        self.cv.notify_all();
        self.idle.notify_all();
        if let Some(h) = lock(&self.thread).take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }

    /// Queues a deliberate update.
    pub(crate) fn write(
        self: &Arc<Self>,
        proxy: Arc<ProxyInner>,
        offset: usize,
        data: Arc<[u8]>,
        opts: WriteOpts,
    ) -> Result<AsyncSend> {
        let done = Completion::new();
        self.submit(Job {
            proxy,
            op: Op::Write {
                offset,
                data: data.clone(),
                opts,
                done: done.clone(),
            },
        })?;
        Ok(AsyncSend {
            data,
            done,
            finished: None,
        })
    }

    /// Queues a remote read.
    pub(crate) fn read(
        self: &Arc<Self>,
        proxy: Arc<ProxyInner>,
        sh: Arc<Shared>,
        offset: usize,
        len: usize,
    ) -> Result<AsyncGet> {
        let done = Completion::new();
        self.submit(Job {
            proxy,
            op: Op::Read {
                offset,
                len,
                sh,
                done: done.clone(),
            },
        })?;
        Ok(AsyncGet {
            done,
            finished: None,
        })
    }
}

/// An asynchronous deliberate update. Owns its data until it completes, so the API stays
/// safe (the rsmpi rule: a request holds its buffer).
pub struct AsyncSend {
    data: Arc<[u8]>,
    done: Arc<Completion<()>>,
    finished: Option<Result<()>>,
}

impl AsyncSend {
    /// A send the transport completed (or refused) at the call.
    pub(crate) fn finished(data: Arc<[u8]>, r: Result<()>) -> AsyncSend {
        AsyncSend {
            data,
            done: Completion::new(),
            finished: Some(r),
        }
    }

    /// Completion status; the transfer's error once it failed.
    pub fn status(&mut self) -> Result<AsyncStatus> {
        if self.finished.is_none() {
            self.finished = lock(&self.done.result).take();
        }
        match &self.finished {
            None => Ok(AsyncStatus::Pending),
            Some(Ok(())) => Ok(AsyncStatus::Done),
            Some(Err(_)) => Err(self
                .finished
                .take()
                .and_then(|r| r.err())
                .expect("an error")),
        }
    }

    /// Waits for completion and gives the data back.
    pub fn wait(mut self) -> Result<Arc<[u8]>> {
        let r = match self.finished.take() {
            Some(r) => r,
            None => self.done.wait(),
        };
        r.map(|()| self.data)
    }
}

/// An asynchronous remote read.
pub struct AsyncGet {
    done: Arc<Completion<Vec<u8>>>,
    finished: Option<Result<Vec<u8>>>,
}

impl AsyncGet {
    /// Completion status (the data is kept for [`AsyncGet::wait`]).
    pub fn status(&mut self) -> AsyncStatus {
        if self.finished.is_none() {
            self.finished = lock(&self.done.result).take();
        }
        if self.finished.is_some() {
            AsyncStatus::Done
        } else {
            AsyncStatus::Pending
        }
    }

    /// Waits and returns the data read.
    pub fn wait(mut self) -> Result<Vec<u8>> {
        match self.finished.take() {
            Some(r) => r,
            None => self.done.wait(),
        }
    }
}
