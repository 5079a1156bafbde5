//! Command-line options shared by the benchmark drivers that alternate contenders over
//! rounds (`bench-rpc`, `bench-srpc`).

use std::path::PathBuf;

/// `--rounds K --calls N --quick --out DIR`.
#[derive(Clone, Debug, clap::Args)]
pub struct RoundsArgs {
    /// Rounds: every contender runs once per round, in a rotating order.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Calls per size and round (fewer for the largest sizes).
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// A smoke run: one round of 300 calls.
    #[arg(long)]
    quick: bool,
    /// Where the JSON report goes.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
}

impl RoundsArgs {
    /// Rounds to run (at least one).
    pub fn rounds(&self) -> usize {
        if self.quick {
            1
        } else {
            self.rounds.max(1)
        }
    }

    /// Whether this is a smoke run.
    pub fn quick(&self) -> bool {
        self.quick
    }

    /// Calls per size and round.
    pub fn calls(&self) -> usize {
        if self.quick {
            300
        } else {
            self.calls.max(1)
        }
    }
}
