//! The `stubgen rpcgen` command and the build-script entry point.

use std::path::{Path, PathBuf};
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("stubgen-cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stubgen(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stubgen"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn writes_the_output_file() {
    let dir = scratch("output");
    let out = dir.join("mount.rs");
    let o = stubgen(&[
        "rpcgen",
        "/usr/include/rpcsvc/mount.x",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let code = std::fs::read_to_string(&out).unwrap();
    assert!(code.contains("pub struct MountversClient<__C: ::rpc::client::Call>"));
    assert!(code.contains("pub fn mountproc_mnt("));
}

#[test]
fn prints_to_stdout_and_honours_defines_and_includes() {
    let dir = scratch("defines");
    std::fs::write(dir.join("inc.x"), "const SIZE = 12;\n").unwrap();
    std::fs::write(
        dir.join("p.x"),
        "#include \"inc.x\"\ntypedef opaque blob<SIZE>;\nprogram P { version V { blob GET(void) = 1; } = 1; } = PROGNUM;\n",
    )
    .unwrap();
    let x = dir.join("p.x");
    let o = stubgen(&["rpcgen", x.to_str().unwrap(), "-D", "PROGNUM=0x20000077"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let code = String::from_utf8(o.stdout).unwrap();
    assert!(code.contains("pub const P: u32 = 536871031;"), "{code}");
    assert!(
        code.contains("pub type blob = ::rpc::xdr::Opaque<12>;"),
        "{code}"
    );
}

#[test]
fn errors_name_the_original_file_line_and_column() {
    let dir = scratch("errors");
    std::fs::write(
        dir.join("inc.x"),
        "/* included */\nstruct s {\n\tint a;\n\tfloat;\n};\n",
    )
    .unwrap();
    std::fs::write(dir.join("bad.x"), "#include \"inc.x\"\nconst A = 1;\n").unwrap();
    let x = dir.join("bad.x");
    let o = stubgen(&["rpcgen", x.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    // The position is in the included file, as cpp's line markers say.
    let want = format!(
        "{}:4:7: error: expected a name, found `;`",
        dir.join("inc.x").display()
    );
    assert!(err.starts_with(&want), "got: {err}\nwant: {want}");
    assert!(err.contains("\n    \tfloat;\n    \t     ^"), "{err:?}");

    let o = stubgen(&["rpcgen", dir.join("missing.x").to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing.x"));
}

#[test]
fn warns_about_types_defined_elsewhere_and_strict_refuses_them() {
    let x = "/usr/include/rpcsvc/nis_callback.x";
    let o = stubgen(&["rpcgen", x]);
    assert!(o.status.success());
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.contains("nis_callback.x:51:9: warning: type `nis_object` is not defined here"),
        "{err}"
    );
    let o = stubgen(&["rpcgen", "--strict", x]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr)
        .contains("nis_callback.x:51:9: error: unknown type `nis_object`"));
}

#[test]
fn build_script_entry_point_writes_stem_rs() {
    let dir = scratch("build");
    let (out, warnings) =
        stubgen::rpcgen_to_dir(Path::new("/usr/include/rpcsvc/rquota.x"), &dir).unwrap();
    assert_eq!(out, dir.join("rquota.rs"));
    assert!(warnings.is_empty());
    assert!(std::fs::read_to_string(out)
        .unwrap()
        .contains("pub struct RquotaversClient"));
}

#[test]
fn samples_for_an_output_stem_that_is_not_an_identifier() {
    let dir = scratch("stems");
    let x = dir.join("p.x");
    std::fs::write(
        &x,
        "program P { version V1 { int F(int) = 1; } = 1; } = 0x20000099;\n",
    )
    .unwrap();
    for (stem, module) in [
        ("my-proto", "my_proto"),
        ("9p", "_9p"),
        ("a.b", "a_b"),
        ("type", "r#type"),
    ] {
        let out = dir.join(format!("{stem}.rs"));
        let o = stubgen(&[
            "rpcgen",
            x.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-a",
        ]);
        assert!(
            o.status.success(),
            "{stem}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        for side in ["client", "server"] {
            let sample = std::fs::read_to_string(dir.join(format!("{stem}_{side}.rs"))).unwrap();
            assert!(
                sample.contains(&format!("#[path = \"{stem}.rs\"]\nmod {module};")),
                "{stem} {side}:\n{sample}"
            );
        }
    }
}
