//! The variadic exec family: `execl`, `execlp` and `execle` are defined in C
//! (`src/execl.c`, built by `build.rs`), since stable Rust cannot define a variadic function.
//! A Rust `cdylib` exports only its Rust symbols, so each is exported here as a naked
//! function that jumps to the C definition, leaving the caller's registers and stack (the
//! variadic arguments) as they were.

use std::arch::naked_asm;

extern "C" {
    fn vmmc_execl();
    fn vmmc_execlp();
    fn vmmc_execle();
}

macro_rules! trampoline {
    ($name:ident, $target:ident) => {
        /// Hook of the variadic exec function of this name (see the module documentation).
        #[no_mangle]
        #[unsafe(naked)]
        pub extern "C" fn $name() {
            #[cfg(target_arch = "x86_64")]
            naked_asm!("jmp {f}", f = sym $target);
            #[cfg(target_arch = "aarch64")]
            naked_asm!("b {f}", f = sym $target);
        }
    };
}

trampoline!(execl, vmmc_execl);
trampoline!(execlp, vmmc_execlp);
trampoline!(execle, vmmc_execle);
