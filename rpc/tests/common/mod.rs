//! Helpers shared by the integration tests: a hand-written example service and rpcbind.

#![allow(dead_code)]

use rpc::server::{DispatchError, Service};
use rpc::xdr::{self, Opaque, XdrString};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A hand-written service, as a generated dispatcher would look:
/// 0 null, 1 add((int, int)) -> int, 2 echo(opaque<>) -> opaque<>, 3 greet(string<16>) ->
/// string<32>, 4 always SYSTEM_ERR.
pub struct Calc {
    pub prog: u32,
    pub vers: u32,
}

pub const ADD: u32 = 1;
pub const ECHO: u32 = 2;
pub const GREET: u32 = 3;
pub const FAIL: u32 = 4;

fn results<T: serde::Serialize>(reply: &mut Vec<u8>, value: &T) -> Result<(), DispatchError> {
    xdr::to_writer(reply, value).map_err(|_| DispatchError::SystemErr)
}

fn args<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, DispatchError> {
    xdr::from_bytes(bytes).map_err(|_| DispatchError::GarbageArgs)
}

impl Service for Calc {
    fn program(&self) -> u32 {
        self.prog
    }
    fn version(&self) -> u32 {
        self.vers
    }
    fn dispatch(&self, procedure: u32, a: &[u8], reply: &mut Vec<u8>) -> Result<(), DispatchError> {
        match procedure {
            0 => args::<()>(a),
            ADD => {
                let (x, y): (i32, i32) = args(a)?;
                results(reply, &x.wrapping_add(y).wrapping_add(self.vers as i32 - 1))
            }
            ECHO => results(reply, &args::<Opaque>(a)?),
            GREET => {
                let name: XdrString<16> = args(a)?;
                results(reply, &XdrString::<32>::from(format!("hello {name}")))
            }
            FAIL => Err(DispatchError::SystemErr),
            _ => Err(DispatchError::ProcUnavail),
        }
    }
}

fn rpcbind_answers() -> bool {
    Command::new("rpcinfo")
        .args(["-T", "tcp", "127.0.0.1", "100000", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Makes sure rpcbind runs (starting `rpcbind -f` in the background if needed); false, with a
/// message, if it cannot be started.
pub fn ensure_rpcbind() -> bool {
    static UP: OnceLock<bool> = OnceLock::new();
    *UP.get_or_init(|| {
        if rpcbind_answers() {
            return true;
        }
        let spawned = Command::new("rpcbind")
            .arg("-f")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = spawned {
            eprintln!("SKIPPED: rpcbind is not running and `rpcbind -f` failed to start: {e}");
            return false;
        }
        // Wait for it to answer (it may also have lost a race with another test's rpcbind).
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if rpcbind_answers() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("SKIPPED: started `rpcbind -f` but it does not answer on 127.0.0.1:111");
        false
    })
}

/// Runs a command, returning (success, stdout + stderr).
pub fn run(cmd: &str, args: &[&str]) -> (bool, String) {
    match Command::new(cmd).args(args).output() {
        Ok(out) => (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ),
        Err(e) => (false, format!("cannot run {cmd}: {e}")),
    }
}

/// Whether `rpcinfo -p` lists `prog` version `vers` over `proto`.
pub fn listed(prog: u32, vers: u32, proto: &str) -> bool {
    let (ok, out) = run("rpcinfo", &["-p", "127.0.0.1"]);
    assert!(ok, "rpcinfo -p failed: {out}");
    out.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        f.len() >= 3 && f[0] == prog.to_string() && f[1] == vers.to_string() && f[2] == proto
    })
}
