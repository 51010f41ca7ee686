//! Archive files opened through a memory map: the reader borrows the mapped bytes, nothing is copied.

use std::fs::File;
use std::ops::Deref;
use std::path::Path;

/// The bytes of a file, mapped read-only (an empty file maps to an empty slice).
pub struct MappedFile {
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if path.is_dir() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a folder, not an archive file"));
        }
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the map is read-only. Another process truncating the file while it is mapped would
        // fault the reader; archives are written to a temporary name and renamed into place, never
        // modified in place, so that does not happen to files this project writes.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(MappedFile { map: Some(map) })
    }
}

impl Deref for MappedFile {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}
