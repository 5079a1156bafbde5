//! Every `.x` file shipped by the system (rpcsvc-proto, libtirpc-dev, libnsl-dev) goes through
//! the generator, and the generated Rust compiles against the `rpc` crate without warnings.

mod common;

use std::path::PathBuf;

/// The system's `.x` files: /usr/include/rpcsvc and /usr/include/tirpc, recursively.
fn system_x_files() -> Vec<PathBuf> {
    fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "x") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk("/usr/include/rpcsvc".as_ref(), &mut out);
    walk("/usr/include/tirpc".as_ref(), &mut out);
    out.sort();
    out
}

/// Module name for a file: its stem, made unique by the directory when needed.
fn module_name(p: &std::path::Path) -> String {
    let stem = p.file_stem().unwrap().to_string_lossy().to_string();
    let parent = p.parent().unwrap().file_name().unwrap().to_string_lossy();
    format!("{}_{}", parent.replace('-', "_"), stem)
}

#[test]
fn every_system_x_file_generates_code_that_compiles() {
    let files = system_x_files();
    assert_eq!(
        files.len(),
        19,
        "expected the 19 .x files of rpcsvc-proto, libtirpc-dev and libnsl-dev: {files:?}"
    );
    let project = common::Project::new("stubgen-system-x", "");
    let mut lib = String::from("//! Generated from the system's .x files.\n#![deny(warnings)]\n");
    for f in &files {
        let out = stubgen::Rpcgen::new()
            .generate_file(f)
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let m = module_name(f);
        // nis_callback.x uses nis.x's types without including it, as its C users do.
        let uses = if m.ends_with("_nis_callback") {
            "    use super::rpcsvc_nis::*;\n"
        } else {
            assert!(
                out.warnings.is_empty(),
                "{}: {:?}",
                f.display(),
                out.warnings
            );
            ""
        };
        project.write(&format!("{m}.rs"), &out.code);
        lib.push_str(&format!(
            "pub mod {m} {{\n{uses}    include!(\"{m}.rs\");\n}}\n"
        ));
    }
    project.write("lib.rs", &lib);
    project.cargo(&["check", "--lib"]);
}
