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

/// The fixtures beyond the system's files: names defined elsewhere (standard ONC RPC names
/// and constants of a C header), repeated definitions, and the kernel's xdrgen pragmas. The
/// generated code compiles and its unit tests (written here, run by cargo) check what it does.
#[test]
fn fixtures_generate_code_that_compiles_and_behaves() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let project = common::Project::new("stubgen-fixtures", "");
    let mut lib = String::from("//! Generated from the fixtures.\n#![deny(warnings)]\n");
    for (stem, expected_warnings) in [
        ("external_consts", 10),
        ("duplicates", 0),
        ("xdrgen_pragmas", 0),
        ("name_clashes", 0),
    ] {
        let out = stubgen::Rpcgen::new()
            .generate_file(&dir.join(format!("{stem}.x")))
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
        assert_eq!(
            out.warnings.len(),
            expected_warnings,
            "{stem}: {:#?}",
            out.warnings
        );
        project.write(&format!("{stem}.rs"), &out.code);
        let uses = if stem == "external_consts" {
            "    #[allow(unused_imports)]\n    use super::site::*;\n"
        } else {
            ""
        };
        lib.push_str(&format!(
            "pub mod {stem} {{\n{uses}    include!(\"{stem}.rs\");\n}}\n"
        ));
    }
    lib.push_str(FIXTURE_CHECKS);
    project.write("lib.rs", &lib);
    project.cargo(&["test", "--lib"]);
}

/// What site.h would give the C code, and the checks run inside the scratch project.
const FIXTURE_CHECKS: &str = r#"
/// The constants the generated code expects in scope, of the types a user might pick.
pub mod site {
    pub const MAXPATHLEN: u32 = 4096;
    pub const MAXHOSTNAMELEN: usize = 64;
    pub const SITE_FHSIZE: usize = 32;
    pub const SITE_NLIST: u32 = 3;
    pub const SITE_FLAVOR: u32 = 390_003;
    pub const SITE_OK: i32 = 0;
    pub const SITE_ERR: i64 = 70;
    pub const SITE_LEVEL_BASE: i32 = 10;
    pub const SITE_LOOKUP_PROC: u32 = 7;
}

#[cfg(test)]
mod checks {
    use super::external_consts::*;
    use rpc::server::Service;
    use rpc::xdr::{from_bytes, to_bytes};

    #[test]
    fn standard_names_take_their_onc_rpc_values() {
        assert_eq!(DEFAULT_FLAVOR, 1);
        assert_eq!(PORTMAPPER, 100_000);
        assert_eq!(to_bytes(&sec_info::AUTH_SYS(5)).unwrap(), [0, 0, 0, 1, 0, 0, 0, 5]);
        assert_eq!(to_bytes(&sec_info::RPCSEC_GSS(Default::default())).unwrap()[..4], [0, 0, 0, 6]);
    }

    #[test]
    fn names_in_scope_give_sizes_cases_and_numbers() {
        assert_eq!(MAXPATH, 4096i64);
        let h = site_handle::default();
        assert_eq!(h.len(), 32);
        let l = site_list::default();
        assert_eq!(l.len(), 3);
        let v = sec_info::SITE_FLAVOR(b"host".to_vec().into());
        let bytes = to_bytes(&v).unwrap();
        assert_eq!(bytes[..4], 390_003u32.to_be_bytes());
        assert_eq!(from_bytes::<sec_info>(&bytes).unwrap(), v);
        let too_long = sec_info::SITE_FLAVOR(vec![b'x'; 65].into());
        assert!(to_bytes(&too_long).is_err(), "MAXHOSTNAMELEN bounds the string");
        let other = to_bytes(&sec_info::Default(12)).unwrap();
        assert_eq!(from_bytes::<sec_info>(&other).unwrap(), sec_info::Default(12));
        let err = to_bytes(&site_result::SITE_ERR).unwrap();
        assert_eq!(err, 70i32.to_be_bytes());
        assert_eq!(from_bytes::<site_result>(&err).unwrap(), site_result::SITE_ERR);
        assert!(from_bytes::<site_result>(&71i32.to_be_bytes()).is_err());
        assert_eq!(site_level::LEVEL_LOW as i32, 10);
        assert_eq!(site_level::LEVEL_MID as i32, 11);
        assert_eq!(from_bytes::<site_level>(&11i32.to_be_bytes()).unwrap(), site_level::LEVEL_MID);
        assert_eq!(from_bytes::<site_level>(&90i32.to_be_bytes()).unwrap(), site_level::LEVEL_HIGH);
        assert_eq!(SITEPROC_LOOKUP, 7);
    }

    struct Site;
    impl SiteVersServer for Site {
        fn siteproc_null(&self) {}
        fn siteproc_lookup(&self, arg: pathname) -> sec_info {
            sec_info::AUTH_SYS(arg.len() as i32)
        }
    }

    #[test]
    fn a_procedure_numbered_by_a_name_in_scope_dispatches() {
        let svc = SiteVersService(Site);
        let mut reply = Vec::new();
        let args = to_bytes(&pathname::from(b"/a/b".to_vec())).unwrap();
        svc.dispatch(7, &args, &mut reply).unwrap();
        assert_eq!(from_bytes::<sec_info>(&reply).unwrap(), sec_info::AUTH_SYS(4));
        assert!(svc.dispatch(8, &args, &mut Vec::new()).is_err());
    }

    #[test]
    fn repeated_definitions_are_generated_once() {
        use super::duplicates::*;
        assert_eq!(DUP_MAX, 64);
        assert_eq!(LIMIT, 8);
        let l = dup_list {
            entries: vec![dup_entry { name: b"a".to_vec().into(), id: 1 }].into(),
            color: dup_color::DUP_BLUE,
        };
        assert_eq!(from_bytes::<dup_list>(&to_bytes(&l).unwrap()).unwrap(), l);
    }

    struct Calc;
    impl super::name_clashes::CalcV1Server for Calc {
        fn echo_u(&self, u: super::name_clashes::U) -> super::name_clashes::U {
            u
        }
        fn make(&self, s: super::name_clashes::S, d: super::name_clashes::D) -> super::name_clashes::C {
            super::name_clashes::C { c: s.s as i32 + d.d.c }
        }
        fn echo_v(&self, v: super::name_clashes::V) -> super::name_clashes::V {
            v
        }
    }

    #[test]
    fn names_the_generated_code_uses_internally_do_not_clash() {
        use super::name_clashes::*;
        assert_eq!((data, disc, other, t, x, value, seq, p, result, reply), (1, 2, 3, 4, 5, 6, 7, 8, 9, 10));
        for u in [U::X(7), U::Y, U::Default(A::Z, S { s: A::Y })] {
            assert_eq!(from_bytes::<U>(&to_bytes(&u).unwrap()).unwrap(), u);
        }
        for v in [V::Case1(D { d: C { c: 3 } }), V::Default(9)] {
            assert_eq!(from_bytes::<V>(&to_bytes(&v).unwrap()).unwrap(), v);
        }
        let svc = CalcV1Service(Calc);
        let mut reply_bytes = Vec::new();
        let args = to_bytes(&(S { s: A::Z }, D { d: C { c: 40 } })).unwrap();
        svc.dispatch(2, &args, &mut reply_bytes).unwrap();
        assert_eq!(from_bytes::<C>(&reply_bytes).unwrap(), C { c: 42 });
        // Compiles with a version named like a constant (`calc_v1`).
        let _: fn(Calc) -> Result<rpc::server::Server, rpc::Error> = serve_calc;
        assert_eq!(calc_v1, 1);
    }

    struct Demo;
    impl super::xdrgen_pragmas::DemoVersionServer for Demo {
        fn demoproc_null(&self) {}
        fn demoproc_test(&self, arg: i32) -> super::xdrgen_pragmas::demo_res {
            super::xdrgen_pragmas::demo_res {
                cookie: arg.to_be_bytes().to_vec().into(),
                stat: super::xdrgen_pragmas::demo_stats::DEMO_DENIED,
            }
        }
    }

    #[test]
    fn an_excluded_procedure_is_left_to_the_user() {
        use super::xdrgen_pragmas::*;
        let svc = DemoVersionService(Demo);
        let mut reply = Vec::new();
        svc.dispatch(1, &to_bytes(&3i32).unwrap(), &mut reply).unwrap();
        // big_endian changes nothing on the wire: the enum is a 4-byte XDR int.
        assert_eq!(reply, [0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 1]);
        assert!(matches!(
            svc.dispatch(DEMOPROC_HANDWRITTEN, &to_bytes(&3i32).unwrap(), &mut Vec::new()),
            Err(rpc::server::DispatchError::ProcUnavail)
        ));
    }
}
"#;
