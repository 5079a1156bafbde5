//! What the SVM applications share: the protocol of a version, the space's set-up, homes
//! of row blocks, small all-gathers through shared memory, and the report with the
//! protocol's statistics.
//!
//! Versions (seed 001 §4.2): `--version au` runs AURC, `--version du` runs HLRC;
//! `--protocol hlrc-au` (with `--version au`, the default) runs HLRC-AU, the third
//! implementation of Figure 4. A protocol that contradicts the version is refused.

use crate::{AppError, AppResult, Params, Report, Stats, Version};
use svm::{Config, Placement, Protocol, RunStats, Shared, Svm};

/// The protocol of `params`: `--protocol` if given, else AURC for AU and HLRC for DU.
pub fn protocol(params: &Params) -> AppResult<Protocol> {
    let p = params.protocol.unwrap_or(match params.version {
        Version::Au => Protocol::Aurc,
        Version::Du => Protocol::Hlrc,
    });
    let au = params.version == Version::Au;
    if p.uses_au() != au {
        return Err(AppError::Usage(format!(
            "--protocol {p} {} automatic update: give --version {}",
            if p.uses_au() { "uses" } else { "does not use" },
            if p.uses_au() { "au" } else { "du" }
        )));
    }
    Ok(p)
}

/// The page size the space will have (`SVM_PAGE`, default the host page).
pub fn page_size() -> AppResult<usize> {
    Ok(Config::new(Protocol::Hlrc).with_env()?.page_size)
}

/// Sets up the shared space of `bytes` (at least; the environment's `SVM_*` sizes apply,
/// `SVM_PROTOCOL` does not: the protocol is the version's).
pub fn open(ep: &vmmc::Endpoint, params: &Params, bytes: usize) -> AppResult<Svm> {
    let page = page_size()?;
    // Room for the arrays, each starting on a page, and the small all-gathers.
    let space = (bytes + 64 * page * (ep.size() + 4)).next_multiple_of(page);
    let cfg = Config::new(protocol(params)?).space(space).with_env()?;
    let cfg = if cfg.space < space {
        cfg.space(space)
    } else {
        cfg
    };
    Ok(Svm::new(ep.clone(), cfg)?)
}

/// Homes of an array of `len` elements of `elem` bytes on pages of `page` bytes: each page
/// at the node that owns its first element (`owner(i)`), so a node's block of whole rows or
/// keys is homed at that node (a page shared by two blocks goes to the first).
pub fn homes(len: usize, elem: usize, page: usize, owner: impl Fn(usize) -> usize) -> Placement {
    let pages = (len * elem).div_ceil(page).max(1);
    Placement::Explicit((0..pages).map(|k| owner(k * page / elem)).collect())
}

/// Every node's `mine` (at most `width` words), through a fresh shared array with each
/// node's row on its own page at that node (collective: ends with a barrier).
pub fn allgather_words(s: &mut Svm, width: usize, mine: &[u64]) -> AppResult<Vec<Vec<u64>>> {
    let n = s.size();
    let stride = width.max(1).next_multiple_of((s.page_size() / 8).max(1));
    let rows: Shared<u64> = s.alloc(n * stride, Placement::Blocked)?;
    s.view(rows)
        .write(s.rank() * stride, &mine[..mine.len().min(width)])?;
    s.barrier()?;
    let v = s.view(rows);
    (0..n)
        .map(|p| {
            let mut r = vec![0u64; width];
            v.read(p * stride, &mut r)?;
            Ok(r)
        })
        .collect()
}

/// The slowest node's time and whether any node failed (`bad`): every node learns both.
pub fn time_and_verdict(s: &mut Svm, t: u64, bad: bool) -> AppResult<(u64, bool)> {
    let all = allgather_words(s, 2, &[t, bad as u64])?;
    Ok((
        all.iter().map(|r| r[0]).max().unwrap_or(0),
        all.iter().any(|r| r[1] != 0),
    ))
}

/// What every node's protocol did between two [`Svm::gather_stats`] (node 0's `before` and
/// `after`; `None` elsewhere): the timed phase's statistics, without the set-up's.
pub fn since(before: Option<RunStats>, after: Option<RunStats>) -> Option<RunStats> {
    let (before, after) = (before?, after?);
    Some(RunStats::from_nodes(
        after
            .nodes
            .iter()
            .zip(&before.nodes)
            .map(|(a, b)| {
                let w: Vec<u64> = a
                    .to_words()
                    .iter()
                    .zip(b.to_words())
                    .map(|(x, y)| x.saturating_sub(y))
                    .collect();
                svm::Stats::from_words(&w)
            })
            .collect(),
    ))
}

/// The report of an SVM application from node 0, with the protocol's statistics.
#[allow(clippy::too_many_arguments)]
pub fn report(
    app: &str,
    ep: &vmmc::Endpoint,
    params: &Params,
    protocol: Protocol,
    page: usize,
    mut problem: serde_json::Value,
    time_ns: u64,
    stats: &RunStats,
    check: String,
) -> Report {
    problem["protocol"] = protocol.name().into();
    problem["page_size"] = page.into();
    let t = &stats.total;
    let mut rep = Report::new(
        app,
        "svm",
        ep,
        params,
        problem,
        time_ns,
        Stats {
            messages: t.messages,
            bytes: t.message_bytes + t.au_bytes,
            au_words: t.au_bytes / 4,
        },
        check,
    );
    let mut v = serde_json::to_value(stats).expect("plain counters serialize");
    v["protocol"] = protocol.name().into();
    rep.svm = Some(v);
    rep
}
