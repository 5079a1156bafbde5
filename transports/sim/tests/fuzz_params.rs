//! The parameter file is input: arbitrary text, and the embedded file with arbitrary values
//! set on its keys, either parse into parameters that a small job runs with to the end, or
//! are refused with an error. Never a panic, in the parser or later in the model.
//! Inputs that once broke it stay below as regression cases.

use proptest::prelude::*;
use vmmc::{Endpoint, ExportOptions, MemKind};
use vmmc_sim::params::DEFAULT_PARAMS;
use vmmc_sim::{Outcome, Params, Sim};

/// Every `section.key` of the embedded file.
fn keys() -> Vec<String> {
    let t: toml::Table = toml::from_str(DEFAULT_PARAMS).unwrap();
    let mut out = vec![];
    for (sec, v) in t {
        if let Some(tab) = v.as_table() {
            for k in tab.keys() {
                out.push(format!("{sec}.{k}"));
            }
        }
    }
    out
}

/// A ping-pong of two nodes with a deliberate update, an automatic update and a notification:
/// every modelled path runs once.
fn small_job(p: Params) -> Result<(), String> {
    let sim = Sim::new(2, p).map_err(|e| e.to_string())?;
    let out = sim.run(|ep: Endpoint| -> Result<(), vmmc::Error> {
        let r = ep.alloc(8192, MemKind::Shared)?;
        ep.export(1, &r, ExportOptions::new().handler(|_| {}))?;
        let peer = ep.proc_of(1 - ep.rank())?;
        let px = ep.import(peer, 1)?;
        if ep.rank() == 0 {
            px.send_notify(0, &[1, 0, 0, 0, 2, 0, 0, 0])?;
            r.wait_u32(4, |v| v == 3, || ep.check_peer(peer))?;
        } else {
            r.wait_u32(4, |v| v == 2, || ep.check_peer(peer))?;
            px.send(0, &[3; 4096])?;
            px.send(4096, &[0; 4])?;
            px.send(0, &[0, 0, 0, 0, 3, 0, 0, 0])?;
        }
        Ok(())
    });
    for (rank, o) in out.into_iter().enumerate() {
        match o {
            Outcome::Returned(Ok(())) => {}
            Outcome::Returned(Err(e)) => return Err(format!("rank {rank}: {e}")),
            other => panic!("rank {rank}: the model failed: {other:?}"),
        }
    }
    Ok(())
}

/// Parses, and runs a small job with what parsed.
fn check(text: &str, overrides: &[&str]) {
    let r = std::panic::catch_unwind(|| Params::parse(text, overrides));
    let parsed = r.unwrap_or_else(|_| panic!("Params::parse panicked on {overrides:?}"));
    if let Ok(p) = parsed {
        let r = std::panic::catch_unwind(|| small_job(p));
        assert!(r.is_ok(), "the model panicked with {overrides:?}");
    }
}

/// Values that stress the checks: zero, negative, huge, not a number, the wrong type.
const VALUES: &[&str] = &[
    "0",
    "-1",
    "1",
    "3",
    "-0.0",
    "0.0",
    "1e300",
    "-1e300",
    "nan",
    "inf",
    "-inf",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "4294967296",
    "true",
    "\"x\"",
    "[1, 2]",
    "{a = 1}",
    "2.5",
    "65",
    "7",
];

/// Inputs that broke the parser or the model once (kept as regression cases).
/// Found by `every_key_with_every_bad_value`: each overflowed the model's virtual-time
/// arithmetic (a panic on a node thread) before the parameters were bounded.
const CORPUS: &[&[&str]] = &[
    &["costs.du_initiate_ns=9223372036854775807"],
    &["costs.export_ns=9223372036854775807"],
    &["cpu.compute_floor_ns=9223372036854775807"],
    &["ni.du_dma_start_ns=9223372036854775807"],
    &["network.hop_ns=9223372036854775807"],
    &["cpu.compute_scale=1e300"],
];

#[test]
fn corpus_of_past_failures() {
    for ov in CORPUS {
        check(DEFAULT_PARAMS, ov);
    }
}

#[test]
fn every_key_with_every_bad_value() {
    for k in keys() {
        for v in VALUES {
            let o = format!("{k}={v}");
            check(DEFAULT_PARAMS, &[o.as_str()]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_overrides_never_panic(
        picks in proptest::collection::vec((0usize..64, 0usize..VALUES.len(), any::<i64>(), any::<bool>()), 1..4)
    ) {
        let ks = keys();
        let ov: Vec<String> = picks
            .iter()
            .map(|(k, v, n, num)| {
                let k = &ks[k % ks.len()];
                if *num { format!("{k}={n}") } else { format!("{k}={}", VALUES[*v]) }
            })
            .collect();
        let ov: Vec<&str> = ov.iter().map(|s| s.as_str()).collect();
        check(DEFAULT_PARAMS, &ov);
    }

    #[test]
    fn random_text_never_panics(text in "\\PC{0,300}") {
        let _ = Params::parse(&text, &[]);
    }

    #[test]
    fn mutated_file_never_panics(at in 0usize..2000, cut in 0usize..40, insert in "[\\[\\]=.a-z0-9\"\n -]{0,12}") {
        let mut t = DEFAULT_PARAMS.to_string();
        let at = t.char_indices().map(|(i, _)| i).nth(at % t.chars().count()).unwrap_or(0);
        let end = t[at..].char_indices().map(|(i, _)| at + i).nth(cut).unwrap_or(t.len());
        t.replace_range(at..end, &insert);
        let _ = Params::parse(&t, &[]);
    }
}
