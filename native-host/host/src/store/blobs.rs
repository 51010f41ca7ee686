//! Archives as files named by their blake3 hash, under `blobs/` of the data folder.

use std::path::{Path, PathBuf};

use super::{io_err, BlobStore, StoreError};

/// Blobs as files `blobs/<hash>.recap`; temporary files in `tmp/` on the same file system, so a
/// commit is one rename.
pub struct FsBlobStore {
    blobs: PathBuf,
    tmp: PathBuf,
}

impl FsBlobStore {
    /// Opens the store in the data folder (`Store::open` clears what a crash left in `tmp/`).
    pub fn open(data: &Path) -> Result<FsBlobStore, StoreError> {
        let blobs = data.join("blobs");
        let tmp = data.join("tmp");
        for dir in [&blobs, &tmp] {
            std::fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        }
        Ok(FsBlobStore { blobs, tmp })
    }

    /// The store in the data folder `data` as it is, for reading (a `recap worker` beside a host):
    /// nothing is created or cleaned up.
    pub fn at(data: &Path) -> FsBlobStore {
        FsBlobStore { blobs: data.join("blobs"), tmp: data.join("tmp") }
    }

    fn path(&self, hash: &str) -> PathBuf {
        self.blobs.join(format!("{hash}.recap"))
    }
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(format!("syncing folder {}", dir.display())))
}

fn is_hash(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl BlobStore for FsBlobStore {
    fn create_temp(&self) -> Result<tempfile::NamedTempFile, StoreError> {
        tempfile::Builder::new()
            .prefix("upload-")
            .tempfile_in(&self.tmp)
            .map_err(io_err(format!("creating a temporary file in {}", self.tmp.display())))
    }

    fn commit(
        &self,
        temp: tempfile::NamedTempFile,
        hash: &str,
        _streamed: Option<Box<dyn super::BlobStream>>,
    ) -> Result<(), StoreError> {
        assert!(is_hash(hash), "blob names are blake3 hashes");
        temp.as_file().sync_all().map_err(io_err("syncing an archive before storing it"))?;
        let target = self.path(hash);
        temp.persist(&target)
            .map_err(|e| StoreError::Io { what: format!("renaming into {}", target.display()), source: e.error })?;
        sync_dir(&self.blobs)
    }

    fn local_path(&self, hash: &str) -> Result<PathBuf, StoreError> {
        Ok(self.path(hash))
    }

    fn contains(&self, hash: &str) -> Result<bool, StoreError> {
        Ok(self.path(hash).is_file())
    }

    fn delete(&self, hash: &str) -> Result<(), StoreError> {
        let path = self.path(hash);
        match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.blobs),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(format!("removing {}", path.display()))(e)),
        }
    }

    fn hashes(&self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.blobs).map_err(io_err(format!("reading {}", self.blobs.display())))? {
            let entry = entry.map_err(io_err(format!("reading {}", self.blobs.display())))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(hash) = name.strip_suffix(".recap").filter(|h| is_hash(h)) {
                out.push(hash.to_string());
            }
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        format!("files in {}", self.blobs.display())
    }
}
