//! rpcgen's `-a`: the sample client and server stubgen writes compile for a range of `.x`
//! files, and for vecho.x they talk: the server registers with rpcbind, the client finds it
//! there and calls every procedure.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Kills the sample server however the test ends.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn unregister(prog: u32, vers: u32) {
    let _ = Command::new("rpcinfo")
        .args(["-d", &prog.to_string(), &vers.to_string()])
        .output();
}

#[test]
fn samples_compile_and_the_vecho_pair_talks() {
    let root = common::workspace_root();
    let inputs: Vec<PathBuf> = vec![
        root.join("rpc/tests/vrpc_gen/vecho.x"),
        root.join("stubgen/tests/fixtures/xdrgen_pragmas.x"),
        "/usr/include/rpcsvc/nfs_prot.x".into(),
        "/usr/include/rpcsvc/nlm_prot.x".into(),
        "/usr/include/rpcsvc/yp.x".into(),
        "/usr/include/tirpc/rpc/rpcb_prot.x".into(),
    ];
    let stems: Vec<String> = inputs
        .iter()
        .map(|x| x.file_stem().unwrap().to_string_lossy().to_string())
        .collect();
    // Not under src/bin: cargo would take the generated modules for programs.
    let mut bins = String::new();
    for stem in &stems {
        for side in ["client", "server"] {
            bins.push_str(&format!(
                "[[bin]]\nname = \"{stem}_{side}\"\npath = \"src/samples/{stem}_{side}.rs\"\n\n"
            ));
        }
    }
    let project = common::Project::new("stubgen-samples", &bins);
    for (x, stem) in inputs.iter().zip(&stems) {
        let gen = stubgen::Rpcgen::new();
        let code = gen
            .generate_file(x)
            .unwrap_or_else(|e| panic!("{}: {e}", x.display()))
            .code;
        let s = gen
            .generate_samples_file(x, stem)
            .unwrap_or_else(|e| panic!("{}: {e}", x.display()));
        project.write(&format!("samples/{stem}.rs"), &code);
        project.write(&format!("samples/{stem}_client.rs"), &s.client);
        project.write(&format!("samples/{stem}_server.rs"), &s.server);
    }
    project.write("lib.rs", "");
    project.cargo(&["build", "--bins"]);

    if !common::ensure_rpcbind() {
        return;
    }
    let (prog, vers) = (0x2000_5b01u32, 1u32); // vecho.x's VECHO_PROG, VECHO_V1
    unregister(prog, vers);
    let mut server = Command::new(project.bin("vecho_server"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("the sample server starts");
    let stdout = server.stdout.take().unwrap();
    let server = Kill(server);
    // The server prints its line once it is registered: that is the signal to go on.
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    assert!(
        line.starts_with("serving VECHO_PROG on TCP port Some("),
        "{line}"
    );
    let out = Command::new(project.bin("vecho_client"))
        .arg("127.0.0.1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "ECHO: ",
        "ADD: 0",
        "SWAP: pair { a: 0, b: 0 }",
        "REVERSE: None",
        "SET_VALUE: ()",
        "GET_VALUE: 0",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    drop(server);
    unregister(prog, vers);
}
