//! The whole call list: `nm -D libnx.so` against nx.h and against the Paragon's list
//! (tests/paragon_calls.txt), the Fortran bindings included; and old programs built
//! unchanged: K&R C with -std=gnu89 and with the compiler's default, Fortran 77 with
//! gfortran, run as jobs of 2-4 processes.

use common::{build, compile, crate_dir};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use vmmc_run::testing::run_job;

mod common;

/// The functions libnx.so exports.
fn exported() -> BTreeSet<String> {
    let so = build();
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("nm (binutils) runs");
    assert!(o.status.success(), "nm failed");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "T").then(|| f[2].to_string())
        })
        .collect()
}

/// The functions nx.h declares: each statement's name before its first parenthesis.
fn declared() -> BTreeSet<String> {
    let h = std::fs::read_to_string(crate_dir().join("include/nx.h")).expect("nx.h");
    let mut text = String::new();
    let mut rest = h.as_str();
    while let Some(i) = rest.find("/*") {
        text.push_str(&rest[..i]);
        rest = &rest[i + rest[i..].find("*/").expect("comment ends") + 2..];
    }
    text.push_str(rest);
    let text: String = text
        .lines()
        .filter(|l| {
            let t = l.trim();
            !t.starts_with('#') && t != "extern \"C\" {" && t != "}"
        })
        .collect::<Vec<_>>()
        .join("\n");
    text.split(';')
        .map(str::trim)
        .filter(|s| !s.starts_with("typedef") && s.contains('('))
        .map(|s| {
            let head = &s[..s.find('(').expect("a parenthesis")];
            head.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .rfind(|w| !w.is_empty())
                .expect("a name")
                .to_string()
        })
        .collect()
}

struct Listed {
    name: String,
    underscore: bool,
    fortran: bool,
    unsupported: bool,
}

fn manual() -> Vec<Listed> {
    let t = std::fs::read_to_string(crate_dir().join("tests/paragon_calls.txt")).expect("list");
    t.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let col = |i: usize, v: &str| f.get(i).is_some_and(|c| *c == v);
            Listed {
                name: f[0].to_string(),
                underscore: col(1, "_"),
                fortran: col(2, "F"),
                unsupported: col(3, "E"),
            }
        })
        .collect()
}

#[test]
fn libnx_exports_the_whole_call_list() {
    let nm = exported();
    let h = declared();
    let list = manual();
    assert!(
        list.len() > 90 && h.len() > 150,
        "list {} nx.h {}",
        list.len(),
        h.len()
    );
    let mut missing = Vec::new();
    for c in &list {
        let mut want = vec![c.name.clone()];
        if c.underscore {
            want.push(format!("_{}", c.name));
        }
        if c.fortran {
            want.push(format!("{}_", c.name));
        }
        for w in want {
            if !nm.contains(&w) {
                missing.push(format!("{w} (exported)"));
            }
            if !w.ends_with('_') && !h.contains(&w) {
                missing.push(format!("{w} (declared in nx.h)"));
            }
        }
    }
    assert!(missing.is_empty(), "missing from libnx: {missing:?}");
    // nx.h declares nothing the library lacks, and the library exports nothing that nx.h
    // does not declare (but the Fortran bindings).
    let undefined: Vec<_> = h.difference(&nm).collect();
    assert!(
        undefined.is_empty(),
        "declared in nx.h, not in libnx.so: {undefined:?}"
    );
    let fortran = |s: &str| s.ends_with('_') && !s.starts_with('_');
    let undeclared: Vec<_> = nm
        .iter()
        .filter(|s| !h.contains(*s) && !fortran(s))
        .collect();
    assert!(
        undeclared.is_empty(),
        "exported, not in nx.h: {undeclared:?}"
    );
    // The calls that return EQNOTSUP say so in nx.h.
    let header = std::fs::read_to_string(crate_dir().join("include/nx.h")).expect("nx.h");
    let head = &header[..header.find("#ifndef NX_H").expect("guard")];
    for c in list.iter().filter(|c| c.unsupported) {
        assert!(
            head.contains(&c.name),
            "nx.h does not say why {} fails",
            c.name
        );
    }
}

fn run_ok(exe: &Path, name: &str, n: usize) -> String {
    let o = run_job(n, &Command::new(exe), Duration::from_secs(120));
    let report = format!("--- stdout\n{}\n--- stderr\n{}", o.stdout, o.stderr);
    assert!(o.status.success(), "{name} with {n} ranks failed\n{report}");
    for r in 0..n {
        assert!(
            o.stdout.contains(&format!("{name} node {r}: ok")),
            "{name}: node {r} did not report success\n{report}"
        );
    }
    o.stderr
}

#[test]
fn knr_program_builds_with_gnu89_and_the_default() {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let old = compile("knr.c", &cc, &["-std=gnu89", "-Wall", "-Werror"], "knr89");
    run_ok(&old, "knr", 2);
    run_ok(&old, "knr", 4);
    let new = compile("knr.c", &cc, &["-Wall", "-Werror"], "knr");
    run_ok(&new, "knr", 3);
}

#[test]
fn fortran_program_builds_with_gfortran() {
    let exe = compile("ftest.f", "gfortran", &["-Wall", "-O1"], "ftest");
    let err = run_ok(&exe, "ftest", 2);
    assert!(
        err.contains("fortran mkpart: partition management has no meaning on Linux"),
        "nx_perror from Fortran\n{err}"
    );
    run_ok(&exe, "ftest", 4);
}
