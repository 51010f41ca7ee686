//! What the program's environment asks of the device (`recap run --cpu` sets it): its
//! architecture, how much memory it has, and how many CPU threads stand for its SMs. Read once;
//! a value that does not parse is reported on stderr and the default kept, since a driver has no
//! other way to refuse its environment.
//!
//! - `RECAP_CPU_DEVICES`: how many devices the driver reports (default 1, at most 64). They share
//!   the one host memory and the worker threads; each allocation belongs to the device whose
//!   context made it.
//! - `RECAP_CPU_ARCH`: the compute capability as `sm_XY` or `XY` (default 90). The device
//!   attributes report it, and PTX whose `.target` needs a newer one does not load.
//! - `RECAP_CPU_MEMORY`: device memory in bytes (default 16 GiB): what `cuDeviceTotalMem` and
//!   `cuMemGetInfo` report, and the total that allocations may reach.
//! - `RECAP_CPU_SMS`: multiprocessors, and the worker threads a launch's blocks run on (default:
//!   the CPU's threads).
//! - `RECAP_CPU_BLOCK_ORDER`: the order a launch's blocks start in: `index` (the default),
//!   `random` (a fresh order every launch and every run, as a GPU promises none), or a number, a
//!   seed that gives every launch its own order, the same from run to run. A program whose result
//!   depends on that order (float atomics, a lock-ordered sum) then shows it as it would on a GPU.

use std::sync::LazyLock;

use crate::result::report;

pub(crate) const DEVICES: &str = "RECAP_CPU_DEVICES";
pub(crate) const ARCH: &str = "RECAP_CPU_ARCH";
pub(crate) const MEMORY: &str = "RECAP_CPU_MEMORY";
pub(crate) const SMS: &str = "RECAP_CPU_SMS";
pub(crate) const BLOCK_ORDER: &str = "RECAP_CPU_BLOCK_ORDER";

/// The order a launch's blocks start in (`RECAP_CPU_BLOCK_ORDER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BlockOrder {
    Index,
    Random,
    Seeded(u64),
}

impl BlockOrder {
    fn parse(v: &str) -> Option<BlockOrder> {
        match v {
            "index" => Some(BlockOrder::Index),
            "random" => Some(BlockOrder::Random),
            n => n.parse().ok().map(BlockOrder::Seeded),
        }
    }

    /// The shuffle seed of the next launch (`ExecOptions::block_order`); `None` runs blocks in
    /// index order.
    pub(crate) fn next_seed(self) -> Option<u64> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static LAUNCHES: AtomicU64 = AtomicU64::new(0);
        let n = LAUNCHES.fetch_add(1, Ordering::Relaxed);
        // A multiplicative hash, so that consecutive launches get unrelated orders.
        let mix = |x: u64| (x ^ (x >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        match self {
            BlockOrder::Index => None,
            BlockOrder::Seeded(seed) => Some(mix(seed ^ mix(n + 1))),
            BlockOrder::Random => {
                static START: LazyLock<u64> = LazyLock::new(|| {
                    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
                });
                Some(mix(*START ^ mix(n + 1)))
            }
        }
    }
}

pub(crate) struct Config {
    /// Devices reported, ordinals 0 to `devices - 1`.
    pub devices: u32,
    /// Compute capability, major * 10 + minor.
    pub arch: u32,
    pub memory: u64,
    pub sms: usize,
    pub block_order: BlockOrder,
}

pub(crate) fn config() -> &'static Config {
    static CONFIG: LazyLock<Config> = LazyLock::new(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Config {
            devices: read(DEVICES, 1, |v| v.parse().ok().filter(|n| (1..=MAX_DEVICES).contains(n))),
            arch: read(ARCH, 90, |v| parse_arch(v).filter(|a| (50..=130).contains(a))),
            memory: read(MEMORY, 16 << 30, |v| v.parse().ok().filter(|&m| m > 0)),
            sms: read(SMS, cores, |v| v.parse().ok().filter(|&n| (1..=4096).contains(&n))),
            block_order: read(BLOCK_ORDER, BlockOrder::Index, BlockOrder::parse),
        }
    });
    &CONFIG
}

/// The most devices `RECAP_CPU_DEVICES` may ask for.
pub(crate) const MAX_DEVICES: u32 = 64;

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
