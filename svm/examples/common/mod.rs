//! What the examples share: their command line and the size of their space.

use svm::Config;

/// One positional argument: its name, the least value it may take, its default.
pub struct Arg {
    pub name: &'static str,
    pub min: usize,
    pub default: usize,
}

/// Parses the positional arguments, each a whole number of at least its `min` (a missing
/// one takes its default). `-h` or `--help` prints `usage` and exits with 0; anything
/// else that is not such a number, or one too many, prints the problem and `usage` to
/// stderr and exits with 2 (the usage error of Unix tools), before the job starts.
pub fn parse_args(usage: &str, args: &[Arg]) -> Vec<usize> {
    let given: Vec<String> = std::env::args().skip(1).collect();
    if given.iter().any(|a| a == "-h" || a == "--help") {
        println!("{usage}");
        std::process::exit(0);
    }
    let fail = |why: String| -> ! {
        eprintln!("{why}\n{usage}");
        std::process::exit(2);
    };
    if given.len() > args.len() {
        fail(format!("too many arguments: {}", given.join(" ")));
    }
    args.iter()
        .enumerate()
        .map(|(i, a)| match given.get(i) {
            None => a.default,
            Some(v) => match v.parse::<usize>() {
                Ok(x) if x >= a.min => x,
                _ => fail(format!(
                    "{}: {v:?} is not a whole number of at least {}",
                    a.name, a.min
                )),
            },
        })
        .collect()
}

/// The configuration from the environment (`SVM_PROTOCOL`, `SVM_SPACE`, ...), where the
/// space is `need` bytes (the problem's arrays, with room to spare, at least 16 MiB) unless
/// `SVM_SPACE` says otherwise.
pub fn config(need: usize) -> svm::Result<Config> {
    let space = need
        .saturating_add(need / 4)
        .saturating_add(1 << 20)
        .max(16 << 20)
        .next_multiple_of(1 << 20);
    Config::from_env()?.space(space).with_env()
}
