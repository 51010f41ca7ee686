//! Embeds the built web viewer (`web/`: the page, its script and style, and `web/pkg/`, which
//! `cargo xtask wasm` writes) into the host, so that an installed `recap` serves the whole UI from
//! any folder. Without `web/pkg/recap_viewer_bg.wasm` nothing is embedded and the host says how
//! to build the viewer.

use std::path::{Path, PathBuf};

fn main() {
    // Read when the script runs, not baked in when it is compiled: a compiled build script may be
    // reused for a checkout in another folder.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let web = Path::new(&manifest).join("../../web");
    println!("cargo:rerun-if-changed={}", web.display());
    println!("cargo:rerun-if-changed={}", web.join("pkg").display());
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    if web.join("pkg/recap_viewer_bg.wasm").is_file() && web.join("index.html").is_file() {
        for dir in [web.clone(), web.join("pkg")] {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for entry in entries.flatten() {
                let path = entry.path();
                if !path.is_file() {
                    continue;
                }
                println!("cargo:rerun-if-changed={}", path.display());
                let rel = path.strip_prefix(&web).expect("inside web/").to_string_lossy().replace('\\', "/");
                files.push((format!("/{rel}"), path.canonicalize().expect("a file that exists")));
            }
        }
    }
    files.sort();
    let mut out = String::from(
        "/// The viewer's files by URL path, built into this binary.\npub static EMBEDDED: &[(&str, &[u8])] = &[\n",
    );
    for (url, path) in &files {
        out.push_str(&format!("    ({url:?}, include_bytes!({:?})),\n", path.display().to_string()));
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("embedded_web.rs");
    std::fs::write(dest, out).expect("writing the embedded file list");
}
