//! What an archive may ask of a CPU replay.
//!
//! An archive declares its regions' sizes and its launches' grids; a file of a few hundred bytes can
//! declare gigabytes and billions of blocks. Every figure is checked here against [`ReplayLimits`]
//! before anything is allocated, so a replay refuses such an archive with one error that names the
//! limit, the archive's figure and the option that raises it, instead of failing an allocation (or
//! taking the process that runs it down) later.

use crate::archive::{Archive, Op};

/// The most a replay may allocate and launch. Each has a command-line option of the same name
/// (`--max-region-bytes`, ...) on `recap replay` and `recap serve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplayLimits {
    /// Bytes of one region.
    pub max_region_bytes: u64,
    /// Bytes of all regions together, scratch included (the plan may have all of it allocated at once).
    pub max_total_bytes: u64,
    /// Regions of one archive.
    pub max_regions: u64,
    /// Thread blocks of one launch.
    pub max_grid_blocks: u64,
}

impl ReplayLimits {
    /// No limit at all (for tools that replay archives they made themselves).
    pub const UNLIMITED: ReplayLimits = ReplayLimits {
        max_region_bytes: u64::MAX,
        max_total_bytes: u64::MAX,
        max_regions: u64::MAX,
        max_grid_blocks: u64::MAX,
    };
}

impl ReplayLimits {
    /// Room for real workloads on a developer's machine (a 1 GiB tensor, 4 GiB of them, a grid of
    /// 16 million blocks), well short of what takes a machine down.
    pub const DEFAULT: ReplayLimits = ReplayLimits {
        max_region_bytes: 1 << 30,
        max_total_bytes: 4 << 30,
        max_regions: 4096,
        max_grid_blocks: 1 << 24,
    };
}

impl Default for ReplayLimits {
    fn default() -> Self {
        ReplayLimits::DEFAULT
    }
}

/// An archive asking for more than its replay may give.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} is {figure}, over the limit of {limit} (raise it with --{option})")]
pub struct LimitError {
    /// What was measured (`region "x" has bytes`, `op 7 (launch of k) has thread blocks`).
    pub what: String,
    pub figure: u64,
    pub limit: u64,
    /// The option that raises the limit, without its dashes (`max-region-bytes`).
    pub option: &'static str,
}

impl LimitError {
    /// `Err` when `figure` is over `limit`.
    pub fn over(what: String, figure: u64, limit: u64, option: &'static str) -> Result<(), LimitError> {
        if figure > limit {
            return Err(LimitError { what, figure, limit, option });
        }
        Ok(())
    }
}

use LimitError as L;

impl ReplayLimits {
    /// Checks the regions `(name, size)` an archive declares or an importer is about to declare:
    /// their number, each one's size and their total.
    pub fn check_regions<'n>(&self, regions: impl ExactSizeIterator<Item = (&'n str, u64)>) -> Result<(), LimitError> {
        L::over("the number of regions".into(), regions.len() as u64, self.max_regions, "max-regions")?;
        let mut total = 0u64;
        for (name, size) in regions {
            L::over(format!("the size of region {name:?} in bytes"), size, self.max_region_bytes, "max-region-bytes")?;
            total = total.saturating_add(size);
        }
        L::over("the size of all regions together in bytes".into(), total, self.max_total_bytes, "max-total-bytes")
    }

    /// Checks every region and every launch of `archive`, before anything is allocated for it.
    pub fn check(&self, archive: &Archive<'_>) -> Result<(), LimitError> {
        self.check_regions(archive.regions().map(|r| (r.name, r.size)))?;
        for id in 0..archive.op_count() as u32 {
            if let Op::Launch(l) = archive.op(id) {
                let blocks = l.grid.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
                let kernel = archive.kernel(l.kernel).name;
                L::over(
                    format!("the number of thread blocks of op {id} (launch of {kernel})"),
                    blocks,
                    self.max_grid_blocks,
                    "max-grid-blocks",
                )?;
            }
        }
        Ok(())
    }
}
