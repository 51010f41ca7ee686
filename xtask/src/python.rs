//! The Python package (`python/`): its wheel (`cargo xtask wheel`) and its test suite, which
//! `cargo xtask test` runs after the Rust tests.
//!
//! Everything Python lives in a virtual environment under `target/python/`, made with the
//! machine's `python3` and filled from PyPI with maturin, pytest and numpy: nothing touches the
//! system's Python. The package is installed exactly as a user installs it, `pip install ./python`,
//! and its wheel is installed into a fresh environment of its own and smoke-tested there, so a
//! missing file in the wheel fails the suite. Both builds use the dev profile in the tests (the
//! dependencies are already optimised there, and the workspace's Rust tests have built most of
//! them); `cargo xtask wheel` builds with the `wheel` profile, optimised for users.
//!
//! The interposer (`librecap_intercept.so`, what `recap.capture` loads) is a separate library that
//! the package's build script builds and copies into `python/recap/` whenever maturin builds the
//! package (python/build.rs). The tests build it here with the CPU driver and hand it to that script
//! through `RECAP_INTERCEPT_LIB`, so it is compiled once.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::{cargo, run, target_dir};

/// A virtual environment at `dir` with `packages` from PyPI (made once; `fresh` remakes it).
fn venv(dir: &Path, packages: &[&str], fresh: bool) -> Result<PathBuf> {
    let python = dir.join("bin/python");
    if fresh && dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    if !python.exists() {
        eprintln!("xtask: making a Python virtual environment in {}", dir.display());
        let mut make = Command::new("python3");
        make.args(["-m", "venv"]).arg(dir);
        run(make).context("python3 -m venv: the Python package needs python3 with its venv module")?;
    }
    if !packages.is_empty() {
        let mut pip = Command::new(&python);
        pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(packages);
        run(pip)?;
    }
    Ok(python)
}

/// Builds the interposer and the CPU driver the capture tests put behind it, with the dev profile;
/// returns their paths.
fn native_libraries(root: &Path) -> Result<(PathBuf, PathBuf)> {
    let mut build = cargo();
    build.args(["build", "--profile", "dev", "-p", "recap-intercept", "-p", "recap-cpudriver"]);
    run(build)?;
    let dir = target_dir(root).join("debug");
    Ok((dir.join("librecap_intercept.so"), dir.join("librecap_cpudriver.so")))
}

/// Builds the wheel with maturin into `target/wheels/` and returns its path.
/// `interposer`, when given, is the one the wheel ships (else its build script builds one).
fn build_wheel(root: &Path, python: &Path, profile: &str, interposer: Option<&Path>) -> Result<PathBuf> {
    let out = target_dir(root).join("wheels");
    let _ = std::fs::remove_dir_all(&out);
    let mut maturin = Command::new(python);
    maturin
        .args(["-m", "maturin", "build", "--quiet", "--profile", profile, "--manifest-path"])
        .arg(root.join("python/Cargo.toml"))
        .arg("--out")
        .arg(&out);
    if let Some(lib) = interposer {
        maturin.env("RECAP_INTERCEPT_LIB", lib);
    }
    run(maturin)?;
    let wheel = std::fs::read_dir(&out)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .with_context(|| format!("maturin wrote no wheel into {}", out.display()))?;
    Ok(wheel)
}

/// `cargo xtask wheel`: the wheel users install (`pip install target/wheels/recap-*.whl`), the
/// interposer inside it.
pub fn wheel(root: &Path) -> Result<()> {
    eprintln!("xtask wheel: the interposer, then the extension with the `wheel` profile, into one abi3 wheel");
    let python = venv(&target_dir(root).join("python/build"), &["maturin>=1.9,<2"], false)?;
    let wheel = build_wheel(root, &python, "wheel", None)?;
    println!("{}", wheel.display());
    Ok(())
}

/// The Python package's tests: `pip install ./python` into a test environment and pytest there,
/// then the wheel into a fresh environment and a smoke test in it.
pub fn test(root: &Path) -> Result<()> {
    eprintln!(
        "xtask test: the Python package: the interposer and CPU driver, `pip install ./python` into \
         target/python/venv, pytest python/tests, then its wheel into a fresh environment"
    );
    let (interposer, cpudriver) = native_libraries(root)?;
    let python = venv(&target_dir(root).join("python/venv"), &["maturin>=1.9,<2", "pytest", "numpy"], false)?;
    let mut install = Command::new(&python);
    install
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--force-reinstall", "--no-deps"])
        .arg(root.join("python"))
        // The dev profile: what the Rust tests already built (pyproject.toml's `wheel` profile is
        // for users).
        .env("MATURIN_PEP517_ARGS", "--profile dev")
        .env("CARGO_TARGET_DIR", target_dir(root))
        .env("RECAP_INTERCEPT_LIB", &interposer);
    run(install)?;
    let mut pytest = Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .arg(root.join("python/tests"))
        .arg("--ignore")
        .arg(root.join("python/tests/gpu"))
        // The interposer is the installed package's own copy: the test proves it ships.
        .env_remove("RECAP_INTERCEPT_LIB")
        .env("RECAP_TEST_CPUDRIVER", &cpudriver)
        .current_dir(root.join("python/tests"));
    run(pytest)?;

    let wheel = build_wheel(root, &python, "dev", Some(&interposer))?;
    let fresh = venv(&target_dir(root).join("python/fresh"), &[], true)?;
    let mut install = Command::new(&fresh);
    install.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).arg(&wheel);
    run(install)?;
    let mut smoke = Command::new(&fresh);
    smoke.arg(root.join("python/tests/wheel_smoke.py")).current_dir(std::env::temp_dir());
    run(smoke).with_context(|| format!("the wheel {} does not work in a fresh environment", wheel.display()))
}
