//! Render-sockets (seed 001 §3): a parallel ray-casting volume renderer on stream sockets,
//! with a controller that keeps a central task queue of image tiles and workers that take
//! tasks, render them and send the pixels back (dynamic load balancing). The kernel is
//! [`crate::kernels::render`].
//!
//! **Start-up** (not timed). Rank 0, the controller, generates the data set
//! ([`generate_volume`]) and computes the view. Every other rank is a worker: it connects to
//! the controller's [`JobListener`] ([`VmmcStream::connect_job_with`]); as the controller
//! accepts each connection it sends the problem and the view as exact bits (the setup block)
//! and then the whole volume, both with [`VmmcStream::write_block`]: the data set is
//! replicated on every worker and loaded at connection establishment, as in the paper. A
//! worker prepares its copy (gradients) and answers "ready".
//!
//! **The timed phase** (the controller's clock, from handing out the first tile to taking in
//! the last). The controller deals `in_flight` tiles to each worker (one each a turn, the
//! highest rank first), then serves whichever connection is readable
//! ([`VmmcStream::is_readable`]): it takes the tile's pixels (one block: the tile's number,
//! then its RGB rows), places them in the picture and sends that worker the next tile from
//! the queue. A worker holds up to `in_flight` tiles (at most every tile), so it starts the
//! next while its result travels and the controller answers; a fast worker comes back more
//! often and gets more tiles. Tasks are written without blocking, as far as the worker's
//! ring takes them, and the rest when it has room: a worker blocked on writing its results
//! into the controller's full ring reads no tasks, so a blocking task write could wait for
//! ever on it, whatever the rings' sizes and `in_flight`. One thread per node:
//! the controller polls its connections and, when none is readable, waits a turn by the
//! core's policy ([`vmmc::wait`]: on the simulated SHRIMP this advances virtual time to the
//! next arrival; elsewhere it spins, yields where processes outnumber cores, then sleeps
//! until a worker's transfer rings, which leaves the CPU to the workers).
//!
//! **The end.** The controller sends every worker "done"; each answers with what it did (its
//! tiles, and the blocks, bytes and AU words it sent in the timed phase) and closes its
//! connection, and so does the controller. The report's statistics are the timed phase's:
//! the tasks and the results (one block each).
//!
//! **Alone** (one node) the controller renders every tile of its queue itself, through the
//! same kernel, with no sockets at all. With two nodes it has one worker, so Render-sockets
//! needs three nodes to beat one (the controller does not render: it is the paper's central
//! task queue).
//!
//! The AU version sends with the sockets library's automatic-update variant
//! ([`sockets::Variant::Au`]), the DU version with one-copy deliberate update
//! ([`sockets::Variant::Du1`]); the ring size comes from `VMMC_SOCK_RING` as usual.
//!
//! **The check** (not timed): the controller renders the whole picture sequentially and
//! compares every byte; they are equal by construction (see [`crate::kernels::render`]), so
//! one differing bit fails the run. Then rank 0 writes the picture as a PNG (`--image`,
//! default [`DEFAULT_IMAGE`]). `--inject-fault` makes the highest rank flip a bit of the
//! first tile it renders.

use crate::idle::Idle;
use crate::kernels::render::{
    coverage, diff, generate_volume, place_tile, write_png, RenderParams, Renderer, View, Volume,
};
use crate::{AppError, AppResult, Params, Report, Size, Stats, Version};
use sockets::{JobListener, Options, Variant, VmmcStream};
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use vmmc::Endpoint;

const APP: &str = "render-sockets";
/// The controller's port.
const PORT: u16 = 3100;
/// Where rank 0 writes the picture without `--image`.
pub const DEFAULT_IMAGE: &str = "apps-results/render.png";
/// The task that tells a worker to stop.
const DONE: u32 = u32::MAX;
/// A worker's answer once its data set is loaded.
const READY: &[u8; 4] = b"RDY1";
/// The setup block's first bytes (and its format's version).
const MAGIC: &[u8; 4] = b"RND1";

/// The problem of `params`.
pub fn problem(params: &Params) -> AppResult<RenderParams> {
    let base = match params.size {
        Size::Paper => RenderParams::PAPER,
        Size::Test => RenderParams::TEST,
    };
    let mut p = RenderParams {
        volume: params.volume.unwrap_or(base.volume),
        image: params.image_size.unwrap_or(base.image),
        tile: params.tile.unwrap_or(base.tile),
        azimuth: params.azimuth.unwrap_or(base.azimuth),
        elevation: params.elevation.unwrap_or(base.elevation),
        fov: params.fov.unwrap_or(base.fov),
        step: params.step.unwrap_or(base.step),
        in_flight: params.in_flight.unwrap_or(base.in_flight),
    };
    // A worker cannot hold more than every tile: a larger count means all of them.
    if p.tile.iter().all(|&t| t > 0) {
        p.in_flight = p.in_flight.min(p.tiles());
    }
    p.check().map_err(AppError::Usage)?;
    Ok(p)
}

/// The plain sequential render of the same problem (see [`crate::SeqFn`]).
pub fn sequential(params: &Params) -> AppResult<u64> {
    crate::kernels::render::sequential(&problem(params)?)
        .map(|(t, _)| t)
        .map_err(|what| AppError::CheckFailed { app: APP, what })
}

/// The socket variant of `version`.
pub fn variant(version: Version) -> Variant {
    match version {
        Version::Au => Variant::Au,
        Version::Du => Variant::Du1,
    }
}

fn comm(what: &str, e: io::Error) -> AppError {
    AppError::Comm(format!("{APP}: {what}: {e}"))
}

/// The setup block: the problem with its floating-point numbers as bits, and the view. `p`
/// has passed [`RenderParams::check`], which keeps every size within 32 bits.
fn encode_setup(p: &RenderParams, view: &View) -> Vec<u8> {
    let mut b = MAGIC.to_vec();
    let words = [
        p.volume[0],
        p.volume[1],
        p.volume[2],
        p.image[0],
        p.image[1],
        p.tile[0],
        p.tile[1],
        p.in_flight,
    ];
    for w in words {
        let w = u32::try_from(w).expect("RenderParams::check bounds every size to 32 bits");
        b.extend_from_slice(&w.to_le_bytes());
    }
    for f in [p.azimuth, p.elevation, p.fov, p.step] {
        b.extend_from_slice(&f.to_bits().to_le_bytes());
    }
    for w in view.to_bits() {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

/// Length of the setup block.
const SETUP_LEN: usize = 4 + 8 * 4 + 4 * 8 + 18 * 4;

fn decode_setup(b: &[u8]) -> Result<(RenderParams, View), String> {
    if b.len() != SETUP_LEN || &b[..4] != MAGIC {
        return Err(format!(
            "a setup block of {} bytes that is not Render-sockets' (want {SETUP_LEN})",
            b.len()
        ));
    }
    let u = |i: usize| u32::from_le_bytes(b[4 + 4 * i..8 + 4 * i].try_into().expect("4")) as usize;
    let f = |i: usize| {
        let at = 36 + 8 * i;
        f64::from_bits(u64::from_le_bytes(b[at..at + 8].try_into().expect("8")))
    };
    let p = RenderParams {
        volume: [u(0), u(1), u(2)],
        image: [u(3), u(4)],
        tile: [u(5), u(6)],
        in_flight: u(7),
        azimuth: f(0),
        elevation: f(1),
        fov: f(2),
        step: f(3),
    };
    p.check()?;
    let mut bits = [0u32; 18];
    for (i, w) in bits.iter_mut().enumerate() {
        let at = 68 + 4 * i;
        *w = u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    }
    Ok((p, View::from_bits(&bits)))
}

/// Sends one block and counts it: a message, its bytes with the length in front, and under
/// the AU variant the words the sockets library stores through its automatic-update image
/// of the peer's ring (the length's and the block's).
fn send(s: &VmmcStream, block: &[u8], stats: &mut Stats) -> io::Result<()> {
    s.write_block(block)?;
    count(s.variant(), block.len(), stats);
    Ok(())
}

/// Counts a block of `len` bytes sent with `variant` (see [`send`]).
fn count(variant: Variant, len: usize, stats: &mut Stats) {
    stats.messages += 1;
    stats.bytes += 8 + len as u64;
    if variant == Variant::Au {
        stats.au_words += 2 + len.div_ceil(4) as u64;
    }
}

/// Flips a bit of a tile's middle pixel (`--inject-fault`).
fn corrupt(pixels: &mut [u8]) {
    let i = pixels.len() / 2;
    pixels[i] ^= 1;
}

/// Runs Render-sockets on this node (see [`crate::RunFn`]).
pub fn run(ep: &Endpoint, params: &Params) -> AppResult<Option<Report>> {
    let rp = problem(params)?;
    let mut opts = Options::from_env().map_err(|e| AppError::Comm(e.to_string()))?;
    opts.variant = variant(params.version);
    if ep.rank() == 0 {
        controller(ep, params, &rp, opts).map(Some)
    } else {
        worker(ep, params, opts).map(|()| None)
    }
}

/// A task as it goes on the wire: a block ([`VmmcStream::write_block`]'s length, then the
/// tile's number).
const TASK_LEN: usize = 8 + 4;

/// A worker as the controller sees it.
struct Worker {
    s: VmmcStream,
    rank: usize,
    /// Tiles handed out and not yet back, in the order the worker renders them (the last one
    /// perhaps still partly in `task`).
    queue: VecDeque<usize>,
    /// The task being sent, and how much of it is in the worker's ring.
    task: [u8; TASK_LEN],
    task_sent: usize,
    /// Tiles it rendered.
    tiles: u64,
}

impl Worker {
    fn new(s: VmmcStream, rank: usize) -> Worker {
        Worker {
            s,
            rank,
            queue: VecDeque::new(),
            task: [0; TASK_LEN],
            task_sent: TASK_LEN,
            tiles: 0,
        }
    }

    /// Hands out tile `*next` if the worker holds fewer than `in_flight` tiles and none is
    /// still on its way; then writes what fits of the task in the worker's ring without
    /// blocking. Whether it wrote anything.
    ///
    /// Never blocking is what keeps the run from deadlocking: a worker whose results fill the
    /// controller's ring blocks and stops reading its tasks, so a task written with a
    /// blocking write into its full ring would wait for ever, and the controller with it,
    /// never reading the results that would free the worker.
    fn deal(
        &mut self,
        in_flight: usize,
        tiles: usize,
        next: &mut usize,
        stats: &mut Stats,
    ) -> AppResult<bool> {
        if self.task_sent == TASK_LEN && self.queue.len() < in_flight && *next < tiles {
            self.task[..8].copy_from_slice(&4u64.to_le_bytes());
            self.task[8..].copy_from_slice(&(*next as u32).to_le_bytes());
            self.task_sent = 0;
            self.queue.push_back(*next);
            *next += 1;
            count(self.s.variant(), 4, stats);
        }
        let mut wrote = false;
        while self.task_sent < TASK_LEN {
            match self.s.conn().send(&self.task[self.task_sent..], true) {
                Ok(k) => {
                    self.task_sent += k;
                    wrote = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(comm(&format!("task to worker {}", self.rank), e)),
            }
        }
        Ok(wrote)
    }
}

/// Render-sockets' waits, in `vmmc::wait`'s counts.
static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("apps.render");

fn controller(
    ep: &Endpoint,
    params: &Params,
    rp: &RenderParams,
    opts: Options,
) -> AppResult<Report> {
    let n = ep.size();
    let (width, height) = (rp.image[0], rp.image[1]);
    let tiles = rp.tiles();

    // Start-up (not timed): the data set, the view, and the workers, each loaded with both.
    let densities = generate_volume(rp.volume);
    let view = View::new(rp);
    let setup = encode_setup(rp, &view);
    let mut workers = Vec::with_capacity(n - 1);
    let mut alone = None;
    if n > 1 {
        let listener = JobListener::bind_with(ep, PORT, opts).map_err(|e| comm("listen", e))?;
        // Accepts without blocking, so that a worker that leaves before it connects ends the
        // run instead of hanging it.
        listener
            .set_nonblocking(true)
            .map_err(|e| comm("listen", e))?;
        let mut connected = vec![false; n];
        connected[0] = true;
        let mut idle = Idle::new(&WAIT_SITE);
        for _ in 1..n {
            let (s, rank) = loop {
                match listener.accept() {
                    Ok(c) => break c,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        for r in (1..n).filter(|&r| !connected[r]) {
                            ep.check_peer(ep.proc_of(r)?).map_err(|e| {
                                AppError::Comm(format!("{APP}: worker {r} did not connect: {e}"))
                            })?;
                        }
                        idle.wait();
                    }
                    Err(e) => return Err(comm("accept", e)),
                }
            };
            idle.reset();
            connected[rank] = true;
            s.write_block(&setup)
                .and_then(|()| s.write_block(&densities))
                .map_err(|e| comm(&format!("loading worker {rank}"), e))?;
            workers.push(Worker::new(s, rank));
        }
        workers.sort_by_key(|w| w.rank);
        let mut ready = [0u8; 8];
        for w in &workers {
            let k =
                w.s.read_block(&mut ready)
                    .map_err(|e| comm(&format!("worker {} ready", w.rank), e))?;
            if &ready[..k] != READY {
                return Err(AppError::Comm(format!(
                    "{APP}: worker {} answered the setup with {:?}",
                    w.rank,
                    &ready[..k]
                )));
            }
        }
    } else {
        alone = Some(Renderer::new(
            Volume::prepare(rp.volume, &densities),
            view,
            rp.step as f32,
            rp.image,
        ));
    }
    let mut image = vec![0u8; width * height * 3];
    let mut stats = Stats::default();
    let mut buf = vec![0u8; 4 + rp.tile[0] * rp.tile[1] * 3];
    // The task queue: tiles `next..tiles` wait.
    let mut next = 0usize;

    let t0 = vmmc::pace::now_ns();
    if let Some(r) = &alone {
        let mut pixels = Vec::new();
        while next < tiles {
            let rect = rp.tile_rect(next);
            r.tile(rect, &mut pixels);
            if params.inject_fault && next == 0 {
                corrupt(&mut pixels);
            }
            place_tile(&mut image, width, rect, &pixels);
            next += 1;
        }
    } else {
        let mut done = 0;
        let mut idle = Idle::new(&WAIT_SITE);
        while done < tiles {
            let mut progress = false;
            // One tile to each worker a turn, while it holds fewer than `in_flight` and its
            // ring has room, the highest rank first: it is the one that corrupts its first
            // tile under --inject-fault, so it must have one. A worker's ring always takes
            // the first task, so every worker starts with one tile or more.
            loop {
                let mut dealt = false;
                for w in workers.iter_mut().rev() {
                    dealt |= w.deal(rp.in_flight, tiles, &mut next, &mut stats)?;
                }
                progress |= dealt;
                if !dealt {
                    break;
                }
            }
            for w in workers.iter_mut() {
                if w.queue.is_empty() || !w.s.is_readable() {
                    continue;
                }
                let k =
                    w.s.read_block(&mut buf)
                        .map_err(|e| comm(&format!("result from worker {}", w.rank), e))?;
                let want = w.queue.pop_front().expect("a tile in flight");
                let rect = rp.tile_rect(want);
                let got = (k >= 4).then(|| u32::from_le_bytes(buf[..4].try_into().expect("4")));
                if got != Some(want as u32) || k != 4 + rect.bytes() {
                    return Err(AppError::Comm(format!(
                        "{APP}: worker {} sent {k} bytes for tile {got:?}, not tile {want} ({} bytes)",
                        w.rank,
                        4 + rect.bytes()
                    )));
                }
                place_tile(&mut image, width, rect, &buf[4..k]);
                w.tiles += 1;
                done += 1;
                progress = true;
            }
            if progress {
                idle.reset();
            } else if idle.wait() {
                check_workers(ep, &workers)?;
            }
        }
    }
    let t = vmmc::pace::now_ns() - t0;

    // The end: every worker stops and reports what it did.
    let mut per_worker = Vec::with_capacity(workers.len());
    for w in &workers {
        w.s.write_block(&DONE.to_le_bytes())
            .map_err(|e| comm(&format!("done to worker {}", w.rank), e))?;
    }
    for w in &workers {
        let mut b = [0u8; 32];
        let k =
            w.s.read_block(&mut b)
                .map_err(|e| comm(&format!("the end of worker {}", w.rank), e))?;
        let v = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8"));
        if k != 32 || v(0) != w.tiles {
            return Err(AppError::Comm(format!(
                "{APP}: worker {} ended with {k} bytes, {} tiles where the controller took {}",
                w.rank,
                v(0),
                w.tiles
            )));
        }
        stats = stats.plus(Stats {
            messages: v(1),
            bytes: v(2),
            au_words: v(3),
        });
        per_worker.push(w.tiles);
    }
    drop(workers);

    // The check (not timed): the sequential render, bit for bit.
    let reference = match alone {
        Some(r) => r.image(),
        None => Renderer::of(rp, &densities).image(),
    };
    if let Some(((x, y), count)) = diff(width, &image, &reference) {
        let px = |im: &[u8]| {
            let i = (y * width + x) * 3;
            [im[i], im[i + 1], im[i + 2]]
        };
        return Err(AppError::CheckFailed {
            app: APP,
            what: format!(
                "{count} pixel(s) differ from the sequential render, the first at ({x}, {y}): {:?}, not {:?}",
                px(&image),
                px(&reference)
            ),
        });
    }
    let path = params
        .image
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_IMAGE));
    write_png(&path, width, height, &image)
        .map_err(|e| AppError::Comm(format!("{APP}: writing {}: {e}", path.display())))?;

    let mut problem = serde_json::to_value(rp).expect("serializable");
    problem["tiles"] = tiles.into();
    problem["workers"] = (n - 1).into();
    problem["tiles_per_worker"] = per_worker.into();
    problem["volume_bytes_per_worker"] = if n > 1 { rp.voxels() } else { 0 }.into();
    problem["variant"] = if n > 1 { opts.variant.name() } else { "none" }.into();
    problem["image_file"] = path_str(&path).into();
    let covered = coverage(rp, &image);
    Ok(Report::new(
        APP,
        "sockets",
        ep,
        params,
        problem,
        t,
        stats,
        format!(
            "the {width} x {height} picture ({tiles} tiles, {covered} pixels of fish) equals the sequential render bit for bit"
        ),
    ))
}

/// Ends the run when a worker is gone: polling a connection ([`VmmcStream::is_readable`])
/// does not notice a peer that left (only a failed write or a blocking wait does), so the
/// controller, which only polls, would wait for that worker's tiles for ever. The paper's
/// renderer re-issues a lost worker's tiles; ours reports it.
fn check_workers(ep: &Endpoint, workers: &[Worker]) -> AppResult<()> {
    for w in workers {
        if !ep.peer_alive(ep.proc_of(w.rank)?) {
            return Err(AppError::Comm(format!(
                "{APP}: worker {} left the job with {} tile(s) out",
                w.rank,
                w.queue.len()
            )));
        }
    }
    Ok(())
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

fn worker(ep: &Endpoint, params: &Params, opts: Options) -> AppResult<()> {
    let me = ep.rank();
    let s = VmmcStream::connect_job_with(ep, 0, PORT, opts).map_err(|e| comm("connect", e))?;
    // Start-up: the problem, the view and the data set come over the connection.
    let mut b = vec![0u8; SETUP_LEN];
    let k = s.read_block(&mut b).map_err(|e| comm("setup", e))?;
    let (rp, view) = decode_setup(&b[..k]).map_err(|e| AppError::Comm(format!("{APP}: {e}")))?;
    let mut densities = vec![0u8; rp.voxels()];
    let k = s
        .read_block(&mut densities)
        .map_err(|e| comm("the data set", e))?;
    if k != densities.len() {
        return Err(AppError::Comm(format!(
            "{APP}: a data set of {k} bytes, not {}",
            densities.len()
        )));
    }
    let r = Renderer::new(
        Volume::prepare(rp.volume, &densities),
        view,
        rp.step as f32,
        rp.image,
    );
    drop(densities);
    s.write_block(READY).map_err(|e| comm("ready", e))?;

    // Tasks until "done".
    let mut stats = Stats::default();
    let mut tiles = 0u64;
    let mut task = [0u8; 8];
    let mut pixels = Vec::new();
    let mut msg = Vec::new();
    loop {
        let k = s.read_block(&mut task).map_err(|e| comm("task", e))?;
        let t = (k == 4).then(|| u32::from_le_bytes(task[..4].try_into().expect("4")));
        let i = match t {
            Some(DONE) => break,
            Some(i) if (i as usize) < rp.tiles() => i as usize,
            _ => {
                return Err(AppError::Comm(format!(
                    "{APP}: a task of {k} bytes: {:?}",
                    &task[..k]
                )))
            }
        };
        if params.inject_death && me == ep.size() - 1 {
            vmmc::conformance::die();
        }
        r.tile(rp.tile_rect(i), &mut pixels);
        if params.inject_fault && me == ep.size() - 1 && tiles == 0 {
            corrupt(&mut pixels);
        }
        msg.clear();
        msg.extend_from_slice(&(i as u32).to_le_bytes());
        msg.extend_from_slice(&pixels);
        send(&s, &msg, &mut stats).map_err(|e| comm("result", e))?;
        tiles += 1;
    }
    let mut end = Vec::with_capacity(32);
    for v in [tiles, stats.messages, stats.bytes, stats.au_words] {
        end.extend_from_slice(&v.to_le_bytes());
    }
    s.write_block(&end).map_err(|e| comm("the end", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setup_goes_through_its_bits_unchanged() {
        let p = RenderParams {
            azimuth: -12.345,
            ..RenderParams::PAPER
        };
        let v = View::new(&p);
        let b = encode_setup(&p, &v);
        assert_eq!(b.len(), SETUP_LEN);
        assert_eq!(decode_setup(&b).unwrap(), (p, v));
        assert!(decode_setup(&b[1..]).is_err());
    }

    #[test]
    fn tiles_in_flight_are_clamped_to_the_tiles_and_checked() {
        let mut params = Params::new(Version::Du, Size::Test);
        let tiles = RenderParams::TEST.tiles();
        // 2^32 once went on the wire as 0; 10^18 made the dealing loop spin.
        for n in [
            tiles,
            tiles + 1,
            1 << 32,
            1_000_000_000_000_000_000,
            usize::MAX,
        ] {
            params.in_flight = Some(n);
            let p = problem(&params).unwrap();
            assert_eq!(p.in_flight, tiles, "--in-flight {n}");
            let b = encode_setup(&p, &View::new(&p));
            assert_eq!(
                decode_setup(&b).unwrap().0.in_flight,
                tiles,
                "--in-flight {n}"
            );
        }
        params.in_flight = Some(0);
        let e = problem(&params).unwrap_err().to_string();
        assert!(e.contains("--in-flight 0"), "{e}");
        // A setup block with more tiles in flight than tiles is not the controller's.
        let p = RenderParams {
            in_flight: tiles,
            ..RenderParams::TEST
        };
        let mut b = encode_setup(&p, &View::new(&p));
        b[32..36].copy_from_slice(&(tiles as u32 + 1).to_le_bytes());
        assert!(decode_setup(&b).unwrap_err().contains("--in-flight"));
    }
}
