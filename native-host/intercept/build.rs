//! Generates the forwarding trampolines: one exported symbol for every entry point of the real
//! driver (`exports.txt`, read off NVIDIA's driver 580) that no `hook!` list in `src/` defines, each a
//! counted jump through a slot that `real::load` fills from the real driver at start-up. A program
//! linked against `libcuda.so.1` therefore finds every symbol it expects, and a call recap does not
//! record costs one atomic increment.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let out = std::env::var("OUT_DIR").unwrap();
    println!("cargo:rerun-if-changed=exports.txt");
    println!("cargo:rerun-if-changed=src");
    // The interposer is `libcuda.so.1` to whoever loads it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");

    let exports = std::fs::read_to_string(Path::new(&dir).join("exports.txt")).unwrap();
    // Hooks live in several files of src/ (hooks.rs, graph_hooks.rs, ...): every one is read.
    let mut hooks = String::new();
    for entry in std::fs::read_dir(Path::new(&dir).join("src")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            hooks.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let hooked = hooked_names(&hooks);
    let forwarded: Vec<&str> =
        exports.lines().map(str::trim).filter(|n| !n.is_empty() && !hooked.contains(*n)).collect();

    // Naked functions rather than `global_asm!`: a cdylib exports only the symbols rustc puts
    // in its version script, which are its `#[no_mangle]` functions.
    let mut code = String::new();
    for (i, name) in forwarded.iter().enumerate() {
        writeln!(
            code,
            "#[unsafe(naked)]\n#[no_mangle]\npub unsafe extern \"C\" fn {name}() {{\n    \
             core::arch::naked_asm!(\"lock inc qword ptr [rip + {{counts}} + {off}]\", \
             \"jmp qword ptr [rip + {{slots}} + {off}]\", counts = sym super::FORWARD_COUNTS, \
             slots = sym super::FORWARD_SLOTS)\n}}",
            off = 8 * i
        )
        .unwrap();
    }
    std::fs::write(Path::new(&out).join("trampolines.rs"), code).unwrap();

    let mut names = String::new();
    writeln!(
        names,
        "/// Every entry point forwarded untouched, in slot order.\npub const FORWARDED: [&str; {}] = [",
        forwarded.len()
    )
    .unwrap();
    for name in &forwarded {
        writeln!(names, "    {name:?},").unwrap();
    }
    names.push_str("];\n");
    writeln!(names, "/// Every entry point `hooks.rs` defines.\npub const HOOKED: [&str; {}] = [", hooked.len())
        .unwrap();
    for name in &hooked {
        writeln!(names, "    {name:?},").unwrap();
    }
    names.push_str("];\n");
    std::fs::write(Path::new(&out).join("names.rs"), names).unwrap();
    std::fs::write(Path::new(&out).join("nvjitlink_exports.rs"), nvjitlink_exports()).unwrap();
}

/// nvJitLink's entry points, each exported under its plain name and every versioned name a
/// header from 12.0 to 13.9 calls it by (`__nvJitLinkCreate_12_0`), each calling the one
/// recording function of `src/nvjitlink.rs` with what it stands for and its version suffix.
fn nvjitlink_exports() -> String {
    const VERSIONED: [(&str, &str); 15] = [
        ("Create", "Create"),
        ("Destroy", "Destroy"),
        ("AddData", "AddData"),
        ("AddFile", "AddFile"),
        ("Complete", "Other"),
        ("GetLinkedCubinSize", "Other"),
        ("GetLinkedCubin", "GetLinkedCubin"),
        ("GetLinkedPtxSize", "Other"),
        ("GetLinkedPtx", "GetLinkedPtx"),
        ("GetLinkedLTOIRSize", "Other"),
        ("GetLinkedLTOIR", "Other"),
        ("GetErrorLogSize", "Other"),
        ("GetErrorLog", "Other"),
        ("GetInfoLogSize", "Other"),
        ("GetInfoLog", "Other"),
    ];
    let mut names = Vec::new();
    for (base, call) in VERSIONED {
        names.push((format!("nvJitLink{base}"), call, String::new()));
        for major in [12, 13] {
            for minor in 0..10 {
                let version = format!("_{major}_{minor}");
                names.push((format!("__nvJitLink{base}{version}"), call, version));
            }
        }
    }
    names.push(("nvJitLinkVersion".into(), "Other", String::new()));
    let mut code = String::new();
    for (name, call, version) in names {
        writeln!(
            code,
            "#[no_mangle]\n#[allow(non_snake_case, clippy::missing_safety_doc)]\n\
             pub unsafe extern \"C\" fn {name}(a: usize, b: usize, c: usize, d: usize, e: usize, f: usize) -> usize {{\n    \
             static ENTRY: Entry = Entry::new(&REAL, c{name:?});\n    \
             // SAFETY: nvJitLink's contract for this entry point, which the caller keeps.\n    \
             unsafe {{ call(Call::{call}, {version:?}, &ENTRY, [a, b, c, d, e, f]) }}\n}}"
        )
        .unwrap();
    }
    code
}

/// The names `hook!` defines in `src/hooks.rs`: every `cu...` between `[` and `]` of a `hook!`
/// line's name list.
fn hooked_names(src: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in src.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("[cu") else { continue };
        let Some(end) = rest.find(']') else { continue };
        for name in format!("cu{}", &rest[..end]).split(',') {
            names.insert(name.trim().to_string());
        }
    }
    names
}
