//! Compiles the variadic exec family (`src/execl.c`), which stable Rust cannot define.
fn main() {
    println!("cargo:rerun-if-changed=src/execl.c");
    cc::Build::new()
        .file("src/execl.c")
        .warnings(true)
        .compile("vmmc_execl");
}
