//! The library stands in for the CUDA driver, so programs linked against it (`-lcuda`) ask the
//! dynamic loader for `libcuda.so.1`, as they would on a GPU machine.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
