//! Links the `jobvisor` binary (and the examples, whose benchmark runs itself as a node) with
//! its functions in the order `link/jobvisor.order` lists, written by `link/generate`: the code
//! a node runs from start to idle, packed together. The kernel maps code in 64 KB windows around
//! each page a process touches, so code that runs spread over the binary kept 84 % of it
//! resident.
//!
//! Only where the linker is LLD (Rust's default on x86_64 Linux since 1.90) and nobody chose
//! another (`-C linker`, a linker flavour, or `RUSTC_LINKER`); `JOBVISOR_NO_SYMBOL_ORDER=1`
//! turns it off. A name the binary no longer has is ignored, so a stale file costs memory,
//! never a build.

use std::path::Path;

fn main() {
    println!("cargo::rerun-if-changed=link/jobvisor.order");
    println!("cargo::rerun-if-env-changed=JOBVISOR_NO_SYMBOL_ORDER");
    println!("cargo::rerun-if-env-changed=RUSTC_LINKER");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let lld_by_default = var("CARGO_CFG_TARGET_ARCH") == "x86_64"
        && var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu";
    let other_linker =
        var("CARGO_ENCODED_RUSTFLAGS").contains("linker") || !var("RUSTC_LINKER").is_empty();
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join("link/jobvisor.order");
    if !lld_by_default || other_linker || !var("JOBVISOR_NO_SYMBOL_ORDER").is_empty() {
        return;
    }
    if !order.is_file() {
        return;
    }
    for kind in ["rustc-link-arg-bin=jobvisor", "rustc-link-arg-examples"] {
        println!(
            "cargo::{kind}=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo::{kind}=-Wl,--no-warn-symbol-ordering");
    }
}
