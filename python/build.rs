//! Puts recap's interposer (`librecap_intercept.so`, what `recap.capture` loads) into the package
//! whenever maturin builds it, so that one `pip install ./python` gives a package that captures.
//!
//! The interposer is a library of its own (its SONAME is `libcuda.so.1`), not part of this
//! extension, and maturin builds one crate; so this script builds it with a second cargo and copies
//! it into `recap/`, where maturin collects the package's files after the compile. The second cargo
//! uses a target folder of its own (`<target>/interposer`): it must not wait on the lock that the
//! cargo running this script holds. `RECAP_INTERCEPT_LIB`, when it names a file, is copied instead
//! (`cargo xtask test` has built the interposer already). Plain cargo builds of the workspace
//! (clippy, tests) leave the package alone.

use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "librecap_intercept.so";

fn main() {
    println!("cargo::rerun-if-env-changed=PYO3_ENVIRONMENT_SIGNATURE");
    println!("cargo::rerun-if-env-changed=RECAP_INTERCEPT_LIB");
    // Set by maturin for every build it runs; absent under plain cargo.
    if std::env::var_os("PYO3_ENVIRONMENT_SIGNATURE").is_none() {
        return;
    }
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let into = manifest.join("recap").join(LIB);
    let built = match std::env::var_os("RECAP_INTERCEPT_LIB").map(PathBuf::from).filter(|p| p.is_file()) {
        Some(given) => given,
        None => build_interposer(&manifest),
    };
    if built != into {
        if let Err(e) = std::fs::copy(&built, &into) {
            fail(&format!("copying the interposer {} into {}: {e}", built.display(), into.display()));
        }
    }
}

/// Builds the interposer with the profile this crate is built with, and returns its path.
fn build_interposer(manifest: &Path) -> PathBuf {
    let workspace = manifest.parent().expect("python/ sits in the workspace");
    for watched in ["native-host/intercept", "shared/src", "shared/Cargo.toml", "Cargo.lock"] {
        println!("cargo::rerun-if-changed={}", workspace.join(watched).display());
    }
    // OUT_DIR is <target>/<profile folder>/build/<package>-<hash>/out.
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let (Some(profile_dir), Some(target)) = (out.ancestors().nth(3), out.ancestors().nth(4)) else {
        fail(&format!("OUT_DIR {} is not inside a cargo target folder", out.display()));
    };
    let folder = profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or("release").to_string();
    let profile = if folder == "debug" { "dev".to_string() } else { folder.clone() };
    let target = target.join("interposer");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    println!("cargo::warning=building the interposer (recap-intercept, profile {profile}) into {}", target.display());
    let status = Command::new(cargo)
        .args(["build", "--locked", "-p", "recap-intercept", "--profile", &profile, "--manifest-path"])
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        // Flags meant for this extension's compile must not reach the interposer's.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .status();
    match status {
        Ok(s) if s.success() => target.join(&folder).join(LIB),
        Ok(s) => fail(&format!("building the interposer (cargo build -p recap-intercept) failed: {s}")),
        Err(e) => fail(&format!("running cargo to build the interposer: {e}")),
    }
}

fn fail(message: &str) -> ! {
    eprintln!("recap-python build: {message}");
    std::process::exit(1);
}
