//! The libtirpc peer of the RPC benchmarks: the C server and client of
//! `rpc/examples/c/` (`bench_server.c`, `bench_client.c`), compiled here against the
//! installed libtirpc and run over TCP loopback.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Kills a child when the benchmark ends, however it ends.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Compiles `rpc/examples/c/<name>.c` against libtirpc into `dir`.
pub fn compile(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../rpc/examples/c/{name}.c"));
    let exe = dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O2", "-I/usr/include/tirpc"])
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg("-ltirpc")
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "compiling {} failed (needs a C compiler and libtirpc-dev):\n{}",
            source.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(exe)
}

/// The libtirpc pair: the server (kept running) and the client's path.
pub struct Tirpc {
    /// The compiled client (`bench_client PORT PROG SIZE COUNT`: prints the median ns).
    pub client: PathBuf,
    /// The server's TCP port on loopback.
    pub port: u16,
    _server: ChildGuard,
}

/// Compiles both programs into `dir` and starts the server of program `prog`.
pub fn start(dir: &Path, prog: u32) -> Result<Tirpc, String> {
    let server = compile(dir, "bench_server")?;
    let client = compile(dir, "bench_client")?;
    let mut child = ChildGuard(
        Command::new(&server)
            .arg(prog.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start the C server: {e}"))?,
    );
    let mut line = String::new();
    let stdout = child.0.stdout.take().ok_or("no stdout")?;
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let port = line
        .trim()
        .parse()
        .map_err(|e| format!("the C server's port {line:?}: {e}"))?;
    Ok(Tirpc {
        client,
        port,
        _server: child,
    })
}
