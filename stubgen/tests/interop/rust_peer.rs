// The Rust peer program of stubgen's interoperability tests.
// Usage: interop (a|b|c) client (tcp|udp) | interop (a|b|c) server
// Modules `a`, `b` and `c` are generated from interop.x with different program numbers.

#![allow(dead_code)]

mod a {
    include!("interop_a.rs");
    include!("logic.rs");
}

mod b {
    include!("interop_b.rs");
    include!("logic.rs");
}

mod c {
    include!("interop_c.rs");
    include!("logic.rs");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match (arg(1), arg(2)) {
        ("a", "client") => a::run_client(arg(3)),
        ("b", "client") => b::run_client(arg(3)),
        ("a", "server") => a::run_server(),
        ("b", "server") => b::run_server(),
        ("c", "client") => c::run_client(arg(3)),
        ("c", "server") => c::run_server(),
        _ => {
            eprintln!("usage: interop (a|b|c) client (tcp|udp) | interop (a|b|c) server");
            std::process::exit(2);
        }
    }
}
