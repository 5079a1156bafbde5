//! The `stubgen` command: `stubgen rpcgen FILE.x [-o OUT.rs]`, `stubgen srpc FILE [-o OUT.rs]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Stub generators for the rpc crate.
#[derive(Parser)]
#[command(name = "stubgen", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate Rust types, client stubs and server traits from an rpcgen `.x` file.
    Rpcgen {
        /// The `.x` file.
        input: PathBuf,
        /// Where to write the Rust source (standard output if absent).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Preprocessor definitions (`NAME` or `NAME=VALUE`), as for cpp.
        #[arg(short = 'D', value_name = "NAME[=VALUE]")]
        define: Vec<String>,
        /// Directories searched by `#include`.
        #[arg(short = 'I', value_name = "DIR")]
        include: Vec<PathBuf>,
        /// The C preprocessor to run (rpcgen's -Y).
        #[arg(long, value_name = "CPP")]
        cpp: Option<String>,
        /// Also write a sample client and server (rpcgen's -a): `OUT_client.rs` and
        /// `OUT_server.rs` beside `OUT.rs` (needs -o).
        #[arg(short = 'a', long = "samples", requires = "output")]
        samples: bool,
        /// Refuse types and constants not defined in the input (instead of expecting them in
        /// scope); standard ONC RPC names stay accepted.
        #[arg(long)]
        strict: bool,
    },
    /// Generate a SHRIMP RPC client stub, server trait and dispatcher from an interface file.
    Srpc {
        /// The interface file.
        input: PathBuf,
        /// Where to write the Rust source (standard output if absent).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Srpc { input, output } => match stubgen::idl::generate_file(&input) {
            Ok(code) => write_out(output, &code),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Rpcgen {
            input,
            output,
            define,
            include,
            cpp,
            strict,
            samples,
        } => {
            let mut gen = stubgen::Rpcgen::new().strict(strict);
            if let Some(cpp) = cpp {
                gen = gen.cpp(cpp);
            }
            for d in define {
                gen = gen.define(d);
            }
            for i in include {
                gen = gen.include_dir(i);
            }
            let code = match gen.generate_file(&input) {
                Ok(out) => {
                    for w in &out.warnings {
                        eprintln!("{}", w.to_string().replacen(": error: ", ": warning: ", 1));
                    }
                    out.code
                }
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            };
            let status = write_out(output.clone(), &code);
            match (samples, output) {
                (true, Some(out)) if status == ExitCode::SUCCESS => {
                    let stem = out
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let s = match gen.generate_samples_file(&input, &stem) {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("{e}");
                            return ExitCode::FAILURE;
                        }
                    };
                    for (suffix, text) in [("client", s.client), ("server", s.server)] {
                        let path = out.with_file_name(format!("{stem}_{suffix}.rs"));
                        let st = write_out(Some(path), &text);
                        if st != ExitCode::SUCCESS {
                            return st;
                        }
                    }
                    ExitCode::SUCCESS
                }
                _ => status,
            }
        }
    }
}

fn write_out(output: Option<PathBuf>, code: &str) -> ExitCode {
    match output {
        Some(out) => {
            if let Err(e) = std::fs::write(&out, code) {
                eprintln!("{}: {e}", out.display());
                return ExitCode::FAILURE;
            }
        }
        None => print!("{code}"),
    }
    ExitCode::SUCCESS
}
