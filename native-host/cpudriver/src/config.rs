//! What the program's environment asks of the device (`recap run --cpu` sets it): its
//! architecture, how much memory it has, and how many CPU threads stand for its SMs. Read once;
//! a value that does not parse is reported on stderr and the default kept, since a driver has no
//! other way to refuse its environment.
//!
//! - `RECAP_CPU_ARCH`: the compute capability as `sm_XY` or `XY` (default 90). The device
//!   attributes report it, and PTX whose `.target` needs a newer one does not load.
//! - `RECAP_CPU_MEMORY`: device memory in bytes (default 16 GiB): what `cuDeviceTotalMem` and
//!   `cuMemGetInfo` report, and the total that allocations may reach.
//! - `RECAP_CPU_SMS`: multiprocessors, and the worker threads a launch's blocks run on (default:
//!   the CPU's threads).

use std::sync::LazyLock;

use crate::result::report;

pub(crate) const ARCH: &str = "RECAP_CPU_ARCH";
pub(crate) const MEMORY: &str = "RECAP_CPU_MEMORY";
pub(crate) const SMS: &str = "RECAP_CPU_SMS";

pub(crate) struct Config {
    /// Compute capability, major * 10 + minor.
    pub arch: u32,
    pub memory: u64,
    pub sms: usize,
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: LazyLock<Config> = LazyLock::new(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            arch: read(ARCH, 90, |v| parse_arch(v).filter(|a| (50..=130).contains(a))),
            memory: read(MEMORY, 16 << 30, |v| v.parse().ok().filter(|&m| m > 0)),
            sms: read(SMS, cores, |v| v.parse().ok().filter(|&n| (1..=4096).contains(&n))),
        }
    });
    &CONFIG
}

/// `sm_90`, `sm_90a`, `compute_90` or `90` as 90.
pub(crate) fn parse_arch(v: &str) -> Option<u32> {
    let digits = v.trim_start_matches("sm_").trim_start_matches("compute_");
    let digits = digits.strip_suffix(['a', 'f']).unwrap_or(digits);
    digits.parse().ok()
}

fn read<T>(name: &str, default: T, parse: impl Fn(&str) -> Option<T>) -> T {
    let Some(value) = std::env::var_os(name) else { return default };
    match value.to_str().and_then(&parse) {
        Some(v) => v,
        None => {
            report(format_args!("{name}={} is not a value it takes; the default stands", value.to_string_lossy()));
            default
        }
    }
}
