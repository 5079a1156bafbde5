//! ONC RPC over TCP loopback: this crate's client and server beside libtirpc's, in the same run.
//!
//! Measures the round trip of the null procedure and of an echo of 1 KB and 64 KB of opaque
//! data for four pairs: Rust client → Rust server, C client → C server (libtirpc, both sides),
//! and the two mixed pairs. Needs a C compiler and libtirpc-dev (scripts/setup.sh).
//!
//! ```text
//! cargo run -p rpc --release --example tcp_bench [-- --quick] [--json PATH]
//! cargo run -p rpc --release --example tcp_bench -- --serve   # only the Rust server
//! ```

use rpc::client::{Call, TcpClient};
use rpc::server::{DispatchError, Server, Service};
use rpc::xdr::{self, Opaque};
use std::error::Error;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// A program number in the user range, used by both servers (neither registers it).
const PROG: u32 = 0x3fff_0b01;

/// Procedure 0: null; procedure 1: echo an `opaque<>`.
struct Echo;

impl Service for Echo {
    fn program(&self) -> u32 {
        PROG
    }
    fn version(&self) -> u32 {
        1
    }
    fn dispatch(
        &self,
        procedure: u32,
        args: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), DispatchError> {
        match procedure {
            0 => Ok(()),
            1 => {
                // Borrowing decode: the bytes are copied once, into the reply.
                let data = xdr::from_bytes::<serde_bytes_like::Bytes>(args)
                    .map_err(|_| DispatchError::GarbageArgs)?
                    .0;
                xdr::to_writer(reply, &serde_bytes_like::Bytes(data))
                    .map_err(|_| DispatchError::SystemErr)
            }
            _ => Err(DispatchError::ProcUnavail),
        }
    }
}

/// A borrowed `opaque<>`, so that the echo server does not copy the argument twice.
mod serde_bytes_like {
    use serde::de::{Deserializer, Error, Visitor};
    use serde::{Deserialize, Serialize, Serializer};
    use std::fmt;

    pub struct Bytes<'a>(pub &'a [u8]);

    impl Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }

    impl<'de> Deserialize<'de> for Bytes<'de> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Bytes<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("opaque data")
                }
                fn visit_borrowed_bytes<E: Error>(self, v: &'de [u8]) -> Result<Bytes<'de>, E> {
                    Ok(Bytes(v))
                }
            }
            deserializer.deserialize_bytes(V)
        }
    }
}

fn compile(dir: &Path, name: &str) -> Result<PathBuf, Box<dyn Error>> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("examples/c/{name}.c"));
    let exe = dir.join(name);
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O2", "-I/usr/include/tirpc"])
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg("-ltirpc")
        .status()?;
    if !status.success() {
        return Err(format!("compiling {} failed (needs libtirpc-dev)", source.display()).into());
    }
    Ok(exe)
}

/// Kills the C server when the benchmark ends, however it ends.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Median nanoseconds per call of this crate's client.
fn rust_client(port: u16, size: usize, count: u64) -> Result<f64, Box<dyn Error>> {
    let mut client = TcpClient::connect(([127, 0, 0, 1], port).into())?;
    let data: Opaque = Opaque(vec![0x5a; size]);
    let mut latencies = Vec::with_capacity(count as usize);
    for i in -(count as i64 / 10 + 1)..count as i64 {
        let start = Instant::now();
        if size == 0 {
            client.call::<_, ()>(PROG, 1, 0, &())?;
        } else {
            let back: Opaque = client.call(PROG, 1, 1, &data)?;
            if back.len() != size {
                return Err("short echo".into());
            }
        }
        if i >= 0 {
            latencies.push(start.elapsed().as_nanos() as f64);
        }
    }
    Ok(median(latencies))
}

/// Median nanoseconds per call of libtirpc's client.
fn c_client(exe: &Path, port: u16, size: usize, count: u64) -> Result<f64, Box<dyn Error>> {
    let out = Command::new(exe)
        .args([
            port.to_string(),
            PROG.to_string(),
            size.to_string(),
            count.to_string(),
        ])
        .output()?;
    if !out.status.success() {
        return Err(format!("C client failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

/// Batches per measurement; the median is reported.
const BATCHES: u64 = 7;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1));
    let dir = std::env::temp_dir().join(format!("rpc-tcp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let c_server_exe = compile(&dir, "bench_server")?;
    let c_client_exe = compile(&dir, "bench_client")?;

    let server = Server::builder()
        .service(Echo)
        .listen_tcp(([127, 0, 0, 1], 0).into())
        .start()?;
    let rust_port = server.tcp_addr().ok_or("no TCP address")?.port();
    if args.iter().any(|a| a == "--serve") {
        // Serve only, for measuring other clients by hand: port on stdout, stop at EOF on stdin.
        println!("{rust_port}");
        std::io::copy(&mut std::io::stdin(), &mut std::io::sink())?;
        return Ok(());
    }
    let mut c_server = ChildGuard(
        Command::new(&c_server_exe)
            .arg(PROG.to_string())
            .stdout(Stdio::piped())
            .spawn()?,
    );
    let mut line = String::new();
    BufReader::new(c_server.0.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let c_port: u16 = line.trim().parse()?;

    let scale = if quick { 10 } else { 1 };
    let cases = [
        ("null", 0usize, 20_000 / scale),
        ("echo 1 KB", 1024, 20_000 / scale),
        ("echo 64 KB", 65_536, 2_000 / scale),
    ];
    println!(
        "ONC RPC over TCP loopback: median round trip in microseconds (median call of each \
         batch, median of {BATCHES} batches; lower is better)\n"
    );
    println!(
        "{:<12} {:>10} {:>10} {:>12} {:>14} {:>14}",
        "case", "Rust/Rust", "C/C", "Rust÷C", "Rust cl→C sv", "C cl→Rust sv"
    );
    let mut rows = Vec::new();
    for (name, size, count) in cases {
        // Batches of the four pairs interleaved; each batch reports its median call, and the
        // table the median batch: the machine may be shared, and bursts of other work should
        // not decide the comparison.
        let mut samples = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        let batch = count / BATCHES;
        for _ in 0..BATCHES {
            samples[0].push(rust_client(rust_port, size, batch)?);
            samples[1].push(c_client(&c_client_exe, c_port, size, batch)?);
            samples[2].push(rust_client(c_port, size, batch)?);
            samples[3].push(c_client(&c_client_exe, rust_port, size, batch)?);
        }
        let [rr, cc, rc, cr] = samples.map(|s| median(s) / 1e3);
        println!(
            "{name:<12} {rr:>10.1} {cc:>10.1} {:>12.2} {rc:>14.1} {cr:>14.1}",
            rr / cc
        );
        rows.push(format!(
            "{{\"case\":\"{name}\",\"bytes\":{size},\"calls\":{count},\"rust_rust_median_us\":{rr:.2},\
             \"c_c_median_us\":{cc:.2},\"ratio_rust_over_c\":{:.3},\"rust_client_c_server_median_us\":{rc:.2},\
             \"c_client_rust_server_median_us\":{cr:.2}}}",
            rr / cc
        ));
    }
    if let Some(path) = json {
        std::fs::write(path, format!("[{}]\n", rows.join(",")))?;
        println!("\nwrote {path}");
    }
    drop(c_server);
    server.shutdown()?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
