//! Region contents a session keeps for download, in the session's own folder (what messages a
//! replay sends is `shared::report`'s, the same for every engine).

use std::path::{Path, PathBuf};

use shared::archive::RegionId;

/// Most bytes of region contents a session keeps for download.
pub const KEEP_BYTES: u64 = 256 << 20;

/// Region contents a session keeps for download (`GET /api/sessions/{id}/regions/{name}`): files in
/// the session's folder, `{region}.bin` for a replay's final state and `a-{region}.bin` /
/// `b-{region}.bin` for both sides of a comparison where they part. A region that would take the
/// session past [`KEEP_BYTES`] is not kept.
pub struct Keeper {
    dir: Option<PathBuf>,
    used: u64,
}

impl Keeper {
    pub fn new(dir: Option<&Path>) -> Keeper {
        Keeper { dir: dir.map(Path::to_path_buf), used: 0 }
    }

    /// Keeps `bytes` as `file`, unless that file exists already, this session keeps nothing or its
    /// allowance is spent; an error only when the file cannot be written.
    pub fn keep(&mut self, file: &str, bytes: &[u8]) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = dir.join(file);
        if path.exists() || self.used + bytes.len() as u64 > KEEP_BYTES {
            return Ok(());
        }
        self.used += bytes.len() as u64;
        std::fs::write(path, bytes)
    }
}

/// The file a session keeps `region` in: `side` is `a` or `b` for a comparison.
pub fn kept_file(region: RegionId, side: Option<&str>) -> String {
    match side {
        Some(side) => format!("{side}-{region}.bin"),
        None => format!("{region}.bin"),
    }
}
