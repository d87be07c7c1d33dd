//! Link settings of the service binary.
//!
//! Relative relocations are packed (`DT_RELR`, glibc 2.36 or later, which Debian 12 has):
//! the dynamic loader reads every relative relocation at start, and the packed table is
//! about 6 KB where the plain one is about 480 KB, all of it resident while the service
//! runs. The binary stays position-independent, with ASLR.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.ends_with("-linux-gnu") {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
