//! What the `recap` binary says when it cannot do what was asked, run as a user runs it: each
//! message once, naming the flag the command really takes, and `--dump` that never writes
//! nothing without a word.

use std::path::Path;
use std::process::Command;

use anyhow::Result;
use shared::archive::*;

/// A kernel captured as machine code only: the CPU cannot run it.
fn write_machine_code_only(path: &Path) -> Result<()> {
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(std::fs::File::create(path)?))?;
    let m = w.add_module("machine", "")?;
    w.add_cubin(m, 90, b"\x7fELF not for the CPU")?;
    let param = ParamDecl { name: "p".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
    let k = w.add_kernel(m, "gemm", vec![param])?;
    let y = w.add_region(RegionDecl::new("y", 16, DType::U32))?;
    let relocs = vec![Reloc { offset: 0, target: y, target_offset: 0 }];
    w.launch(LaunchDecl { kernel: k, grid: [1; 3], block: [1; 3], shared_bytes: 0, params: vec![0; 8], relocs })?;
    w.finish()?;
    Ok(())
}

/// Two regions and a memset, no bindings: what a capture without names gives.
fn write_unnamed(path: &Path) -> Result<()> {
    let mut w = ArchiveWriter::new(std::io::BufWriter::new(std::fs::File::create(path)?))?;
    let a = w.add_region(RegionDecl::new("a", 64, DType::U32))?;
    w.add_region(RegionDecl::new("b", 32, DType::F32))?;
    w.memset(MemsetOp { region: a, offset: 0, len: 64, width: 4, pattern: 7 })?;
    w.finish()?;
    Ok(())
}

fn recap(args: &[&std::ffi::OsStr]) -> Result<(bool, String, String)> {
    let o = Command::new(recap_tests::recap_bin()).args(args).output()?;
    Ok((o.status.success(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into()))
}

#[test]
fn a_refusal_is_said_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("machine.recap");
    write_machine_code_only(&file)?;
    // Two CPU engines: the CPU's refusal of machine code, once.
    let (ok, _, err) = recap(&["compare".as_ref(), file.as_os_str(), "--devices".as_ref(), "interp,jit".as_ref()])?;
    assert!(!ok);
    assert_eq!(err.matches("the CPU cannot run gemm").count(), 1, "{err}");
    // A GPU side where there is no CUDA driver: said once, with compare's own flag.
    let (ok, _, err) = recap(&["compare".as_ref(), file.as_os_str(), "--devices".as_ref(), "cpu,cuda".as_ref()])?;
    assert!(!ok);
    if err.contains("no CUDA driver") {
        assert_eq!(err.matches("no CUDA driver").count(), 1, "{err}");
        assert!(!err.contains("--device ") && err.contains("--devices interp,jit"), "{err}");
    }
    Ok(())
}

#[test]
fn dump_without_output_bindings_writes_every_region_and_says_so() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("unnamed.recap");
    write_unnamed(&file)?;
    let out = dir.path().join("out");
    let (ok, stdout, err) = recap(&[
        "replay".as_ref(),
        file.as_os_str(),
        "--device".as_ref(),
        "cpu".as_ref(),
        "--dump".as_ref(),
        out.as_os_str(),
    ])?;
    assert!(ok, "{stdout}{err}");
    assert!(err.contains("names no output binding: --dump writes every region"), "{err}");
    let mut files: Vec<String> = std::fs::read_dir(&out)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()?;
    files.sort();
    assert_eq!(files, ["a.npy", "b.npy"]);
    let a = std::fs::read(out.join("a.npy"))?;
    assert_eq!(&a[a.len() - 4..], &7u32.to_le_bytes(), "the memset's value");
    Ok(())
}
