//! The C API: its checked-in header is what cbindgen makes of the source, and a C program compiled
//! with gcc against the cdylib replays an archive the Rust capture API saved.

use std::path::{Path, PathBuf};
use std::process::Command;

use recap::{args, Device};

const BASICS: &str = include_str!("../../native-host/recap/examples/kernels/basics.ptx");

/// The repository root: the first ancestor of the working directory holding the C API crate.
fn repo_root() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors().find(|d| d.join("native-host/capi/cbindgen.toml").is_file()).map(Path::to_path_buf)
}

#[test]
fn c_header_is_current() {
    let Some(root) = repo_root() else {
        eprintln!("skipping c_header_is_current: the C API source is not under the working directory");
        return;
    };
    let capi = root.join("native-host/capi");
    let config = cbindgen::Config::from_file(capi.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(capi.join("src/lib.rs"))
        .generate()
        .expect("cbindgen fails on native-host/capi/src/lib.rs")
        .write(&mut generated);
    let header = capi.join("include/recap.h");
    if std::env::var_os("RECAP_BLESS").is_some() {
        std::fs::write(&header, &generated).unwrap();
    }
    let current = std::fs::read(&header).unwrap_or_default();
    assert!(
        current == generated,
        "native-host/capi/include/recap.h is stale: regenerate it with `RECAP_BLESS=1 cargo test -p recap-tests c_header_is_current`"
    );
}

/// The cdylib: cargo builds it beside the test executable, since the tests depend on the crate.
fn capi_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    let lib = dir.join(format!("{}recap_capi{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX));
    lib.is_file().then_some(lib)
}

#[test]
fn c_program_replays_an_archive_and_reports_errors() {
    let (Some(root), Some(lib)) = (repo_root(), capi_library()) else {
        eprintln!("skipping c_program_replays_an_archive_and_reports_errors: no C API source or library found");
        return;
    };
    if Command::new("gcc").arg("--version").output().is_err() {
        eprintln!("skipping c_program_replays_an_archive_and_reports_errors: gcc is not installed");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let capi = root.join("native-host/capi");
    let exe = tmp.path().join("replay");
    let lib_dir = lib.parent().unwrap();
    let out = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(capi.join("examples/replay.c"))
        .arg("-I")
        .arg(capi.join("include"))
        .arg("-L")
        .arg(lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-lrecap_capi")
        .output()
        .unwrap();
    assert!(out.status.success(), "gcc failed:\n{}", String::from_utf8_lossy(&out.stderr));

    // An archive from the Rust capture API: y = 2 x + y, then y = -0.5 x + y.
    let dev = Device::cpu();
    let axpy = dev.load_ptx("basics", BASICS).unwrap().kernel("axpy").unwrap();
    let n = 300usize;
    let x = dev.upload(&vec![1.0f32; n]).unwrap();
    let y = dev.alloc::<f32>(n).unwrap();
    let graph = dev
        .capture(|d| {
            d.launch(&axpy, 3, 128, 0, &args![&x, &y, 2.0f32, n as u32])?;
            d.launch(&axpy, 3, 128, 0, &args![&x, &y, -0.5f32, n as u32])
        })
        .unwrap();
    let archive = tmp.path().join("axpy.recap");
    graph.save(&archive, &[("x", x.raw()), ("y", y.raw())], &[("y", y.raw())]).unwrap();

    let xs: Vec<f32> = (0..n).map(|i| i as f32 - 100.0).collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    std::fs::write(tmp.path().join("x.bin"), bytes(&xs)).unwrap();
    std::fs::write(tmp.path().join("y.bin"), bytes(&ys)).unwrap();
    let run = |extra: &[&str]| {
        Command::new(&exe)
            // cargo's library path may hold another build of the library; the rpath names this one.
            .env_remove("LD_LIBRARY_PATH")
            .current_dir(tmp.path())
            .arg(&archive)
            .arg("cpu")
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--set", "x", "x.bin", "--set", "y", "y.bin", "--launches", "2", "--get", "y", "out.bin"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "replay failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("binding x: 1200 bytes") && stdout.contains("launched 2 time(s)"), "{stdout}");
    let got: Vec<f32> = std::fs::read(tmp.path().join("out.bin"))
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // Each launch of the graph adds 1.5 x.
    let want: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| y + 1.5 * x + 1.5 * x).collect();
    assert_eq!(got, want);

    let out = run(&["--set", "nope", "x.bin"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("binding nope: no such binding; the graph has x, y"), "{stderr}");
    let out = run(&["--set", "x", "y.bin", "--get", "y", "short.bin"]);
    assert!(out.status.success());
    std::fs::write(tmp.path().join("short.bin"), [0u8; 12]).unwrap();
    let out = run(&["--set", "x", "short.bin"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("1200 bytes (f32 x 300); 12 bytes were given"));
    let out = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .arg(tmp.path().join("missing.recap"))
        .arg("cpu")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.recap: cannot open"), "{:?}", out);
}
