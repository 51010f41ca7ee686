//! The resource options shared by `recap replay` and `recap serve`: what an archive may make a CPU
//! replay allocate and launch (see `shared::replay::ReplayLimits`). Sizes take binary suffixes
//! (`512MiB`, `4G`), so the limits read the way people think of them.

use anyhow::{anyhow, bail, Result};
use shared::replay::ReplayLimits;

const DEFAULTS: ReplayLimits = ReplayLimits::DEFAULT;

/// Limits on what one archive may ask of a CPU replay (checked before anything is allocated)
#[derive(Clone, Debug, clap::Args)]
pub struct LimitArgs {
    /// Largest region a CPU replay allocates (bytes; K, M, G, T suffixes are binary).
    #[arg(long, value_parser = parse_bytes, default_value = "1GiB", value_name = "BYTES")]
    pub max_region_bytes: u64,
    /// Most bytes of all regions of one archive together.
    #[arg(long, value_parser = parse_bytes, default_value = "4GiB", value_name = "BYTES")]
    pub max_total_bytes: u64,
    /// Most regions of one archive.
    #[arg(long, default_value_t = DEFAULTS.max_regions)]
    pub max_regions: u64,
    /// Most thread blocks of one launch.
    #[arg(long, default_value_t = DEFAULTS.max_grid_blocks)]
    pub max_grid_blocks: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> ReplayLimits {
        ReplayLimits {
            max_region_bytes: self.max_region_bytes,
            max_total_bytes: self.max_total_bytes,
            max_regions: self.max_regions,
            max_grid_blocks: self.max_grid_blocks,
        }
    }
}

/// `123`, `64K`, `512MiB`, `4g`, `1TB`: a byte count with an optional binary suffix.
pub fn parse_bytes(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| anyhow!("{text:?} is not a byte count (e.g. 4096, 64MiB, 4G)"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => bail!("unknown size suffix {other:?} in {text:?}: use K, M, G or T"),
    };
    n.checked_mul(1 << shift).ok_or_else(|| anyhow!("{text:?} does not fit in 64 bits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("64K").unwrap(), 64 << 10);
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("4g").unwrap(), 4 << 30);
        assert!(parse_bytes("4 parsecs").unwrap_err().to_string().contains("suffix"));
        assert!(parse_bytes("lots").unwrap_err().to_string().contains("byte count"));
        assert!(parse_bytes("99999999999T").unwrap_err().to_string().contains("64 bits"));
    }

    #[test]
    fn defaults_are_the_libraries() {
        assert_eq!(DEFAULTS, ReplayLimits::default());
        assert_eq!(parse_bytes("1GiB").unwrap(), DEFAULTS.max_region_bytes);
        assert_eq!(parse_bytes("4GiB").unwrap(), DEFAULTS.max_total_bytes);
    }
}
