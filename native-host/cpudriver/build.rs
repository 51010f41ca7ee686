//! The library stands in for the CUDA driver, so programs linked against it (`-lcuda`) ask the
//! dynamic loader for `libcuda.so.1`, as they would on a GPU machine.
//!
//! Every other entry point of NVIDIA's driver 580 (the interposer's `exports.txt`, the one list of
//! them) that `src/` does not define gets an export here that returns `CUDA_ERROR_NOT_SUPPORTED`
//! (`result::not_supported`), so a program finds every symbol it links against or looks up, and a
//! call this driver lacks is an error code it can handle, never a failed load or a crash.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::env::var("OUT_DIR").unwrap();
    let exports_file = Path::new(&dir).join("../intercept/exports.txt");
    println!("cargo:rerun-if-changed={}", exports_file.display());
    println!("cargo:rerun-if-changed=src");
    let exports = std::fs::read_to_string(&exports_file).unwrap();
    let mut src = String::new();
    for entry in std::fs::read_dir(Path::new(&dir).join("src")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            src.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let defined = defined_names(&src);
    let missing: Vec<&str> =
        exports.lines().map(str::trim).filter(|n| n.starts_with("cu") && !defined.contains(*n)).collect();

    let mut code = String::new();
    for name in &missing {
        writeln!(
            code,
            "#[no_mangle]\npub unsafe extern \"C\" fn {name}() -> crate::result::CUresult {{\n    \
             crate::result::not_supported({name:?})\n}}"
        )
        .unwrap();
    }
    writeln!(code, "/// Every entry point this driver lacks, by its exported name.").unwrap();
    writeln!(
        code,
        "pub(crate) static NOT_SUPPORTED: [(&str, unsafe extern \"C\" fn() -> crate::result::CUresult); {}] = [",
        missing.len()
    )
    .unwrap();
    for name in &missing {
        writeln!(code, "    ({name:?}, {name}),").unwrap();
    }
    code.push_str("];\n");
    std::fs::write(Path::new(&out).join("not_supported.rs"), code).unwrap();
}

/// The entry points `src/` defines: `fn cuX`, and the names of `exports!` rows (a line that
/// starts `cuX(`, and its `| cuX_ptsz` alias). A name missed here would be defined twice, which
/// the build refuses, so nothing is ever silently shadowed.
fn defined_names(src: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut names = BTreeSet::new();
    for line in src.lines() {
        let line = line.trim();
        for (i, _) in line.match_indices("fn cu") {
            names.insert(ident(&line[i + 3..]));
        }
        if line.starts_with("cu") && line.contains('(') {
            names.insert(ident(line));
        }
        for (i, _) in line.match_indices("| cu") {
            names.insert(ident(&line[i + 2..]));
        }
    }
    names
}
