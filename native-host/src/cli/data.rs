//! Region data in and out of files for the commands: `.npy` (numpy's format, with the region's
//! dtype and shape) or raw little-endian bytes (`.bin`, or any other name), chosen by the file's
//! extension on the way out and by numpy's magic on the way in.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use shared::archive::{Archive, RegionId, RegionView};
use shared::npy;

/// The region a binding or region name names.
pub fn region_named(archive: &Archive, name: &str) -> Result<RegionId> {
    Ok(archive.region_named(name)?)
}

/// `NAME=FILE` of `--input`.
#[derive(Clone, Debug)]
pub struct InputArg {
    pub name: String,
    pub file: PathBuf,
}

impl std::str::FromStr for InputArg {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.split_once('=') {
            Some((name, file)) if !name.is_empty() && !file.is_empty() => {
                Ok(InputArg { name: name.to_string(), file: PathBuf::from(file) })
            }
            _ => bail!("expected NAME=FILE, got {s:?}"),
        }
    }
}

/// The bytes of an input file for `region`: a `.npy` whose dtype and shape fit it, or raw bytes of
/// exactly its size.
pub fn read_input(region: &RegionView, file: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let fit = |what: String| format!("{} for region {:?}: {what}", file.display(), region.name);
    if bytes.starts_with(b"\x93NUMPY") {
        let (header, data) = npy::parse(&bytes).map_err(|e| anyhow::anyhow!(fit(e.to_string())))?;
        npy::check_fit(&header, region.name, region.dtype, region.size, &region.shape)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        return Ok(data.to_vec());
    }
    if bytes.len() as u64 != region.size {
        bail!(fit(format!(
            "{} bytes of raw data but the region has {} ({} of {}); a .npy file says its dtype and shape",
            bytes.len(),
            region.size,
            region.size / region.dtype.size() as u64,
            region.dtype.name()
        )));
    }
    Ok(bytes)
}

/// Writes a region's bytes to `file`: `.npy` with its dtype and shape, else raw.
pub fn write_region(region: &RegionView, bytes: &[u8], file: &Path) -> Result<()> {
    let mut out = Vec::new();
    if file.extension().is_some_and(|e| e == "npy") {
        let shape = npy::region_shape(region.dtype, bytes.len() as u64, &region.shape);
        out = npy::header(region.dtype, &shape);
    }
    out.extend_from_slice(bytes);
    std::fs::write(file, out).with_context(|| format!("writing {}", file.display()))
}

/// The file name a dumped region gets in a folder: its name with anything but letters, digits,
/// `-`, `_` and `.` replaced, so that any name makes one file.
pub fn dump_name(name: &str) -> String {
    format!("{}.npy", npy::file_stem(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_arguments_parse() {
        let a: InputArg = "x=data/x.npy".parse().unwrap();
        assert_eq!((a.name.as_str(), a.file.as_path()), ("x", Path::new("data/x.npy")));
        assert!("x".parse::<InputArg>().is_err());
        assert!("=f".parse::<InputArg>().is_err());
    }

    #[test]
    fn dump_names_are_one_file_each() {
        assert_eq!(dump_name("y"), "y.npy");
        assert_eq!(dump_name("../a/b c"), "_a_b_c.npy");
    }
}
