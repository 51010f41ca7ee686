//! `cargo xtask <command>`: the project's automation, in Rust so a fresh machine needs nothing but
//! rustup's stable toolchain.
//!
//! | command | what it does |
//! |---|---|
//! | `demo [--addr A]` | builds everything, imports the public corpus as demo archives, starts the host |
//! | `test [--no-install]` | checks formatting and lints, installs what the tests need (Chromium, numpy) unless `--no-install`, builds the viewer, runs every test, then the Python package's (pytest in a venv under `target/python/`, its wheel in a fresh one) |
//! | `wasm [--release]` | builds the wasm viewer into `web/pkg` |
//! | `wheel` | builds the Python package's abi3 wheel, the interposer inside, into `target/wheels/` |
//! | `cluster [--no-install] [--debug]` | PostgreSQL, NATS JetStream, an S3 server, two `recap serve` replicas and two CPU workers, on loopback |

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

mod cluster;
mod python;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("wasm") => build_wasm(&root, args.iter().any(|a| a == "--release")),
        Some("demo") => demo(&root, &args[1..]),
        Some("test") => test(&root, &args[1..]),
        Some("cluster") => cluster::run(&root, &args[1..]),
        Some("wheel") => python::wheel(&root),
        _ => {
            eprintln!(
                "usage: cargo xtask demo [--addr HOST:PORT] | test [--no-install] [cargo test args] | wasm [--release] | wheel | cluster [--no-install] [--debug]"
            );
            std::process::exit(2);
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub(crate) fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

pub(crate) fn run(mut cmd: Command) -> Result<()> {
    eprintln!("xtask: {cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// The wasm target comes from rust-toolchain.toml under rustup; add it explicitly where that file
/// is not honoured (an overridden toolchain).
fn ensure_wasm_target() -> Result<()> {
    let out = Command::new("rustc").args(["--print", "sysroot"]).output()?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if Path::new(&sysroot).join("lib/rustlib/wasm32-unknown-unknown").exists() {
        return Ok(());
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add", "wasm32-unknown-unknown"]);
    run(cmd)
}

/// The folder cargo builds into: `CARGO_TARGET_DIR` when set (a shared target folder, relative to
/// the workspace as cargo reads it), else the workspace's `target/`.
pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| if d.is_absolute() { d } else { root.join(d) })
        .unwrap_or_else(|| root.join("target"))
}

/// Builds `wasm-viewer` for the browser and runs wasm-bindgen (as a library, so no CLI install)
/// into `web/pkg`.
pub(crate) fn build_wasm(root: &Path, release: bool) -> Result<()> {
    ensure_wasm_target()?;
    // Beside the native builds.
    let target_dir = target_dir(root).join("wasm");
    let mut cmd = cargo();
    cmd.args(["build", "-p", "recap-viewer", "--lib", "--target", "wasm32-unknown-unknown"])
        .arg("--target-dir")
        .arg(&target_dir);
    if release {
        cmd.arg("--release");
    }
    run(cmd)?;
    let profile = if release { "release" } else { "debug" };
    let wasm = target_dir.join("wasm32-unknown-unknown").join(profile).join("recap_viewer.wasm");
    let out = root.join("web/pkg");
    std::fs::create_dir_all(&out)?;
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&wasm)
        .web(true)?
        .typescript(false)
        .omit_default_module_path(false)
        .generate(&out)
        .with_context(|| format!("wasm-bindgen on {}", wasm.display()))?;
    eprintln!("xtask: viewer built into {}", out.display());
    Ok(())
}

fn corpus_dir(root: &Path) -> PathBuf {
    std::env::var_os("RECAP_CORPUS").map(PathBuf::from).unwrap_or_else(|| root.join("tests/corpus"))
}

/// Every case folder of the corpus (`nvcc/saxpy`, `triton/tr_add`, ...).
fn corpus_cases(root: &Path) -> Result<Vec<PathBuf>> {
    let corpus = corpus_dir(root);
    let mut cases = Vec::new();
    for producer in std::fs::read_dir(&corpus).with_context(|| format!("reading corpus {}", corpus.display()))? {
        let producer = producer?.path();
        if !producer.is_dir() {
            continue;
        }
        for case in std::fs::read_dir(&producer)? {
            let case = case?.path();
            if case.join("case.json").exists() {
                cases.push(case);
            }
        }
    }
    cases.sort();
    Ok(cases)
}

fn demo(root: &Path, args: &[String]) -> Result<()> {
    let addr =
        args.windows(2).find(|w| w[0] == "--addr").map(|w| w[1].clone()).unwrap_or_else(|| "127.0.0.1:8080".into());
    build_wasm(root, true)?;
    let mut cmd = cargo();
    cmd.args(["build", "--release", "-p", "recap-cli", "--bin", "recap"]);
    run(cmd)?;
    let recap = target_dir(root).join("release/recap");
    let demo = target_dir(root).join("demo");
    std::fs::create_dir_all(&demo)?;
    for case in corpus_cases(root)? {
        let name = case.file_name().unwrap().to_string_lossy().to_string();
        let mut cmd = Command::new(&recap);
        cmd.arg("import-case").arg(&case).arg("-o").arg(demo.join(format!("{name}.recap")));
        run(cmd)?;
    }
    // Archives with many ops, a loop, two devices and 2-D fields, beside the corpus cases.
    let mut cmd = Command::new(&recap);
    cmd.arg("examples").arg(&demo);
    run(cmd)?;
    let mut cmd = Command::new(&recap);
    cmd.args(["serve", "--addr", &addr, "--data"]).arg(root.join("data")).arg("--seed").arg(&demo);
    run(cmd)
}

/// Installs Debian's Chromium and ChromeDriver for the browser tests when they are missing and we
/// may (root with apt-get); otherwise the browser tests say what is missing.
fn ensure_chromium() -> Result<()> {
    if Path::new("/usr/bin/chromium").exists() && Path::new("/usr/bin/chromedriver").exists() {
        return Ok(());
    }
    let is_root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false);
    if !is_root || Command::new("apt-get").arg("--version").output().is_err() {
        eprintln!("xtask: chromium not found and cannot be installed here; browser tests will fail");
        return Ok(());
    }
    eprintln!("xtask: installing Debian's chromium and chromium-driver with apt-get: the browser tests drive a headless Chromium");
    let mut update = Command::new("apt-get");
    update.args(["update", "-qq"]);
    run(update)?;
    let mut install = Command::new("apt-get");
    install.args(["install", "-y", "-qq", "chromium", "chromium-driver"]).env("DEBIAN_FRONTEND", "noninteractive");
    run(install)
}

/// numpy, which the tests read and write `.npy` files with: installed from PyPI when missing.
fn ensure_numpy() -> Result<()> {
    let has = |py: &str| Command::new(py).args(["-c", "import numpy"]).output().is_ok_and(|o| o.status.success());
    if has("python3") {
        return Ok(());
    }
    eprintln!("xtask: installing numpy with pip: the tests read and write .npy files with it");
    let mut pip = Command::new("python3");
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "numpy"]);
    if run(pip).is_err() {
        eprintln!("xtask: numpy could not be installed; the .npy tests will fail");
    }
    Ok(())
}

fn test(root: &Path, args: &[String]) -> Result<()> {
    let no_install = args.iter().any(|a| a == "--no-install");
    let extra: Vec<&String> = args.iter().filter(|a| *a != "--no-install").collect();
    eprintln!(
        "xtask test: 1) formatting and lints, 2) {}, 3) the wasm viewer, 4) every test of the workspace, \
         5) the Python package (pip install ./python, pytest, its wheel in a fresh venv); about 25 minutes on \
         2 cores from a clean clone",
        if no_install {
            "no system packages (--no-install: without Chromium the browser tests fail, without numpy the .npy tests)"
        } else {
            "Chromium and numpy where missing"
        }
    );
    // The habits first: formatting and lints fail fast, before the long build of the suite.
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    run(fmt).context("the workspace is not formatted: run `cargo fmt --all`")?;
    let mut clippy = cargo();
    clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
    run(clippy)?;
    // The viewer's `app/` exists only for wasm32, and `fuzz/` is a workspace of its own: a
    // workspace lint on the host target sees neither.
    ensure_wasm_target()?;
    let mut clippy = cargo();
    clippy.args(["clippy", "-p", "recap-viewer", "--target", "wasm32-unknown-unknown", "--", "-D", "warnings"]);
    run(clippy)?;
    let mut clippy = cargo();
    clippy
        .args(["clippy", "--locked", "--all-targets", "--manifest-path"])
        .arg(root.join("fuzz/Cargo.toml"))
        .args(["--", "-D", "warnings"])
        // The main workspace's build of the crates the targets share is reused.
        .env("CARGO_TARGET_DIR", target_dir(root));
    run(clippy)?;
    if !no_install {
        ensure_chromium()?;
        ensure_numpy()?;
        // The cluster tests run real PostgreSQL, NATS and S3 servers; without them they skip.
        cluster::ensure_tools(root)?;
    }
    build_wasm(root, true)?;
    let mut cmd = cargo();
    cmd.args(["test", "--workspace", "--exclude", "xtask"]).args(extra);
    cmd.env("RECAP_CORPUS", corpus_dir(root));
    if no_install {
        cmd.env("RECAP_NO_INSTALL", "1");
    }
    run(cmd)?;
    python::test(root)
}
