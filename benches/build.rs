//! Generates bench-srpc's SHRIMP RPC stubs from `idl/sweep.idl` (stubgen's build-script
//! entry point, as a user of the stub generator would use it).

fn main() {
    if let Err(e) = stubgen::idl::to_out_dir("idl/sweep.idl") {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
