//! `recap run --cpu [--devices N] [--arch sm_90] [--memory 16G] [--sms N] [--capture -o X.recap] -- CMD [ARGS]`:
//! runs an unmodified CUDA program with recap's CPU driver (`native-host/cpudriver`,
//! `librecap_cpudriver.so`) standing in for `libcuda.so.1`, on a machine with or without a GPU.
//!
//! The program reaches the CPU driver however it looks for the driver:
//! - by name (`-lcuda`, `dlopen("libcuda.so.1")`): a fresh folder of links `libcuda.so.1` and
//!   `libcuda.so` first on `LD_LIBRARY_PATH`;
//! - through `ctypes.util.find_library("cuda")`, which asks `ldconfig`, then `gcc`, then `ld`: the
//!   same folder first on `LIBRARY_PATH` (gcc's and ld's search path) as well;
//! - by absolute path: the audit library `recap capture` uses (`native-host/audit`, `LD_AUDIT`),
//!   pointed at the CPU driver instead of the interposer.
//!
//! The device is configured through the environment the driver reads (`cpudriver/src/config.rs`).
//! With `--capture`, this is `recap capture --range all --driver <the CPU driver>` with that
//! configuration: the interposer records in front of the CPU driver.
//!
//! Where the CPU driver is found (the first that exists): `RECAP_CPU_DRIVER_LIB`; beside this
//! executable (`target/release/`, or an install that keeps the libraries with the binary); in
//! `../lib/recap/` from this executable's folder (`/usr/local/bin/recap` and
//! `/usr/local/lib/recap/librecap_cpudriver.so`). The audit library and the interposer are looked
//! for beside it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use shared::capture::env;

use super::capture;

const DRIVER_LIB: &str = "librecap_cpudriver.so";

/// The environment `cpudriver/src/config.rs` reads.
const DEVICES_ENV: &str = "RECAP_CPU_DEVICES";
const ARCH_ENV: &str = "RECAP_CPU_ARCH";
const MEMORY_ENV: &str = "RECAP_CPU_MEMORY";
const SMS_ENV: &str = "RECAP_CPU_SMS";

/// Run a CUDA program on recap's CPU driver
#[derive(Clone, Debug, clap::Args)]
#[command(after_help = "Examples:\n  recap run --cpu -- python -m pytest tests/gpu\n  \
                        recap run --cpu --arch sm_80 --memory 4G -- ./my_cuda_app\n  \
                        recap run --cpu --devices 2 -- ./multi_gpu_app\n  \
                        recap run --cpu --capture -o step.recap -- python train.py")]
pub struct Args {
    /// Run on the CPU driver (the only way `recap run` runs a program today)
    #[arg(long, required = true)]
    pub cpu: bool,
    /// Devices the driver reports (1 to 64), alike, sharing the host's memory: for programs that
    /// use several GPUs (contexts on each, peer copies)
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub devices: u32,
    /// The device's architecture, which its compute capability reports and which PTX `.target`s
    /// it loads follow
    #[arg(long, default_value = "sm_90", value_parser = parse_arch)]
    pub arch: u32,
    /// Device memory (bytes, or with a K, M, G or T suffix): allocations past it fail with
    /// CUDA_ERROR_OUT_OF_MEMORY
    #[arg(long, default_value = "16G", value_parser = parse_size)]
    pub memory: u64,
    /// Multiprocessors the device reports, which are the CPU threads a launch's blocks run on
    /// (default: every CPU thread)
    #[arg(long)]
    pub sms: Option<usize>,
    /// Also record the program's work into an archive, as `recap capture --range all` does
    #[arg(long)]
    pub capture: bool,
    /// The archive `--capture` writes
    #[arg(short, long, default_value = "capture.recap", requires = "capture")]
    pub output: PathBuf,
    /// The program and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `sm_90`, `sm_90a`, `compute_80` or `90` as 90.
fn parse_arch(v: &str) -> anyhow::Result<u32> {
    let digits = v.trim_start_matches("sm_").trim_start_matches("compute_");
    let digits = digits.strip_suffix(['a', 'f']).unwrap_or(digits);
    match digits.parse::<u32>() {
        Ok(arch) if (50..=130).contains(&arch) => Ok(arch),
        _ => anyhow::bail!("`{v}` is not an architecture from sm_50 to sm_130 (such as sm_90)"),
    }
}

/// `4096`, `64K`, `512M`, `16G`, `1T` (powers of 1024) as bytes.
fn parse_size(v: &str) -> anyhow::Result<u64> {
    let (digits, shift) = match v.trim().char_indices().last() {
        Some((i, 'K' | 'k')) => (&v[..i], 10),
        Some((i, 'M' | 'm')) => (&v[..i], 20),
        Some((i, 'G' | 'g')) => (&v[..i], 30),
        Some((i, 'T' | 't')) => (&v[..i], 40),
        _ => (v, 0),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .filter(|&n| n > 0)
        .ok_or_else(|| anyhow::anyhow!("`{v}` is not a size such as 4096, 512M or 16G"))
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let driver = cpu_driver()?;
    let config: [(&str, String); 3] = [
        (DEVICES_ENV, args.devices.to_string()),
        (ARCH_ENV, args.arch.to_string()),
        (MEMORY_ENV, args.memory.to_string()),
    ];
    let sms = args.sms.filter(|&n| n > 0).map(|n| (SMS_ENV, n.to_string()));
    if args.capture {
        // The capture runs the program with this process's environment, the device's included.
        for (name, value) in config.iter().cloned().chain(sms) {
            // Set before any thread starts, so nothing reads the environment meanwhile.
            std::env::set_var(name, value);
        }
        if std::env::var_os("RECAP_INTERCEPT_LIB").is_none() {
            let interposer = driver.with_file_name("librecap_intercept.so");
            if interposer.is_file() {
                std::env::set_var("RECAP_INTERCEPT_LIB", interposer);
            }
        }
        return capture::run(capture::Args {
            range: "all".into(),
            output: args.output,
            driver: Some(driver),
            json: false,
            record_effects: false,
            place_regions: false,
            keep_aslr: false,
            infer_types_seconds: 60.0,
            repeat_range: None,
            no_array_types: false,
            command: args.command,
        });
    }

    let shim = super::libcuda_folder("recap-run-", &driver)?;
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    for var in ["LD_LIBRARY_PATH", "LIBRARY_PATH"] {
        cmd.env(var, super::prepend(shim.path(), var));
    }
    match capture::audit_library(&driver) {
        Some(audit) => {
            let mut list = OsString::from(audit);
            if let Some(old) = std::env::var_os("LD_AUDIT").filter(|v| !v.is_empty()) {
                list.push(":");
                list.push(old);
            }
            // The audit library answers a driver's name with this path (`native-host/audit`).
            cmd.env("LD_AUDIT", list).env(env::INTERPOSER, &driver);
        }
        None => eprintln!(
            "recap run: librecap_audit.so is not beside {}: a program that opens the driver by its absolute path \
             will find the system's",
            driver.display()
        ),
    }
    cmd.envs(config).envs(sms);
    let status = cmd.status().with_context(|| format!("running {}", args.command[0].to_string_lossy()))?;
    Ok(match status.code() {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        // Killed by a signal: the shell's convention, 128 + the signal.
        None => ExitCode::from(std::os::unix::process::ExitStatusExt::signal(&status).map_or(1, |s| 128 + s) as u8),
    })
}

/// `dir` first on the search path `var`, before what it held.
/// The CPU driver: `RECAP_CPU_DRIVER_LIB`, else beside this executable, else in `../lib/recap/`.
fn cpu_driver() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("RECAP_CPU_DRIVER_LIB") {
        let p = PathBuf::from(p);
        return p.canonicalize().with_context(|| format!("RECAP_CPU_DRIVER_LIB={}", p.display()));
    }
    let exe = std::env::current_exe().context("finding this executable")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let beside = exe.with_file_name(DRIVER_LIB);
    let lib_dir = exe.parent().and_then(Path::parent).map(|p| p.join("lib/recap").join(DRIVER_LIB));
    for candidate in std::iter::once(beside.clone()).chain(lib_dir) {
        if candidate.is_file() {
            return Ok(candidate.canonicalize().unwrap_or(candidate));
        }
    }
    bail!(
        "the CPU driver {} is missing: `cargo build --release -p recap-cpudriver -p recap-audit` builds it into \
         target/release; install librecap_cpudriver.so beside this binary or in ../lib/recap/, or point \
         RECAP_CPU_DRIVER_LIB at it",
        beside.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_architectures_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_size("4096").ok(), Some(4096));
        assert_eq!(parse_size("512M").ok(), Some(512 << 20));
        assert_eq!(parse_size("16G").ok(), Some(16 << 30));
        assert!(parse_size("0").is_err() && parse_size("G").is_err() && parse_size("99999999999T").is_err());
        assert_eq!(parse_size("9X").unwrap_err().to_string(), "`9X` is not a size such as 4096, 512M or 16G");
        assert_eq!(parse_arch("sm_90").ok(), Some(90));
        assert_eq!(parse_arch("sm_90a").ok(), Some(90));
        assert_eq!(parse_arch("75").ok(), Some(75));
        assert!(parse_arch("sm_9").is_err() && parse_arch("gfx90a").is_err());
        assert_eq!(
            parse_arch("gfx90a").unwrap_err().to_string(),
            "`gfx90a` is not an architecture from sm_50 to sm_130 (such as sm_90)"
        );
    }
}
