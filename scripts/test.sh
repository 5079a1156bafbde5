#!/usr/bin/env bash
# The test command: installs what the tests need, then builds and tests the whole workspace
# (the MPI feature included), checks formatting and lints, and smoke-runs the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo build --workspace --all-targets --all-features
cargo test --workspace --all-features
# The benchmark must keep running: a short sweep (the real run is in the README).
cargo build --release --workspace --all-features
target/release/bench-pingpong --reps 1 --rounds 1 --max-size 4096 --out target/bench-smoke >/dev/null
echo "scripts/test.sh: all passed"
