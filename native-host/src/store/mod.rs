//! Where the host keeps archives and sessions: a blob store for the bytes and an index for the rest.
//!
//! The key design decision: both are traits ([`BlobStore`], [`Index`]) with one implementation each
//! for one machine (files named by blake3 hash, SQLite). Moving past one machine (an S3-compatible
//! object store, PostgreSQL) means writing a second implementation, not touching the server.
//! [`Store`] holds the one piece of logic on top: ingesting an upload safely.

mod blobs;
mod sqlite;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use blobs::FsBlobStore;
pub use shared::protocol::{ArchiveInfo, Event, SessionInfo, SessionState};
pub use sqlite::SqliteIndex;

/// Failures of the store, with what and where.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("index database: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("index database: {0}")]
    Corrupt(String),
    #[error("archive is invalid: {0}")]
    Invalid(#[from] shared::archive::FormatError),
    #[error("archive is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> StoreError {
    let what = what.into();
    move |source| StoreError::Io { what, source }
}

/// Bytes of archives, addressed by their blake3 hash (hex).
pub trait BlobStore: Send + Sync + 'static {
    /// A new temporary file for incoming bytes; dropped without [`BlobStore::commit`], it vanishes.
    fn create_temp(&self) -> Result<tempfile::NamedTempFile, StoreError>;
    /// Makes a fully written temporary file durable as the blob `hash`, atomically: afterwards the
    /// blob exists whole, before it does not exist at all.
    fn commit(&self, temp: tempfile::NamedTempFile, hash: &str) -> Result<(), StoreError>;
    /// A local file holding the blob (for memory maps and range requests).
    fn local_path(&self, hash: &str) -> PathBuf;
    fn contains(&self, hash: &str) -> bool;
    fn delete(&self, hash: &str) -> Result<(), StoreError>;
    /// Hashes of every stored blob.
    fn hashes(&self) -> Result<Vec<String>, StoreError>;
}

/// A session row: what the index keeps about a session besides its events.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRecord {
    pub info: SessionInfo,
    /// blake3 of the control key (hex): the key itself is never stored.
    pub control_hash: String,
}

/// Metadata of archives and sessions.
pub trait Index: Send + Sync + 'static {
    /// Adds an archive; `false` when one with the same id is already there (left unchanged).
    fn put_archive(&self, archive: &ArchiveInfo) -> Result<bool, StoreError>;
    fn archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError>;
    /// Newest first.
    fn archives(&self) -> Result<Vec<ArchiveInfo>, StoreError>;
    fn remove_archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError>;

    /// Adds a new session with the bytes of its bindings (kept until it ends).
    fn put_session(&self, session: &SessionRecord, bindings: &[(String, Vec<u8>)]) -> Result<(), StoreError>;
    /// The bindings a session was created with (none once it has ended).
    fn bindings(&self, session: &str) -> Result<Vec<(String, Vec<u8>)>, StoreError>;
    /// Records a session's new state (without touching its log).
    fn update_session(&self, info: &SessionInfo) -> Result<(), StoreError>;
    /// Records a session's state and outcome together with its whole log, replacing the log kept so
    /// far; a terminal state also drops its bindings. One transaction.
    fn save_session(&self, info: &SessionInfo, events: &[Event]) -> Result<(), StoreError>;
    fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Newest first, at most `limit`.
    fn sessions(&self, limit: usize) -> Result<Vec<SessionInfo>, StoreError>;
    fn events(&self, session: &str) -> Result<Vec<Event>, StoreError>;
    /// Sessions recorded as queued or running, oldest first (what a restarted host finds).
    fn unfinished(&self) -> Result<Vec<SessionRecord>, StoreError>;
}

/// The first 128 bits of a blake3 hash (hex): an archive's id.
pub fn archive_id(hash: &str) -> String {
    hash[..32].to_string()
}

/// Now, as RFC 3339 UTC seconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Counts an archive's contents, validating it whole on the way (structure, checksums, every
/// blob) from a reader, in memory bounded by the archive's tables rather than its size.
pub fn inspect(file: &std::fs::File) -> Result<(u64, u64, u64), shared::archive::FormatError> {
    let mut reader = io::BufReader::with_capacity(1 << 20, file);
    let counts = shared::archive::validate_reader(&mut reader)?;
    Ok((counts.ops, counts.kernels, counts.regions))
}

/// What ingesting an upload produced.
#[derive(Debug)]
pub struct Ingested {
    pub archive: ArchiveInfo,
    /// `false` when identical bytes were already stored (the existing archive is returned).
    pub created: bool,
}

/// Bytes an upload gathers before hashing and writing them (both at once, on two threads).
const INCOMING_BLOCK: usize = 1 << 20;

/// An incoming archive being written to a temporary file while its hash is computed.
pub struct Incoming {
    file: tempfile::NamedTempFile,
    block: Vec<u8>,
    hasher: blake3::Hasher,
    len: u64,
    limit: u64,
}

impl Incoming {
    pub fn write(&mut self, mut chunk: &[u8]) -> Result<(), StoreError> {
        self.len += chunk.len() as u64;
        if self.len > self.limit {
            return Err(StoreError::TooLarge { limit: self.limit });
        }
        while !chunk.is_empty() {
            let take = chunk.len().min(INCOMING_BLOCK - self.block.len());
            self.block.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.block.len() == INCOMING_BLOCK {
                self.flush_block()?;
            }
        }
        Ok(())
    }

    /// Hashes and writes the gathered bytes; hashing (itself on several threads) overlaps the write.
    fn flush_block(&mut self) -> Result<(), StoreError> {
        let (block, hasher, file) = (&self.block, &mut self.hasher, self.file.as_file());
        let (_, written) = rayon::join(|| hasher.update_rayon(block), || (&*file).write_all(block));
        written.map_err(io_err("writing the upload's temporary file"))?;
        self.block.clear();
        Ok(())
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The blob store and the index together.
pub struct Store {
    pub blobs: Arc<dyn BlobStore>,
    pub index: Arc<dyn Index>,
    /// Serialises the short commit and delete steps so that a delete never races a commit of the
    /// same bytes (which would leave an index row without its blob).
    commit_lock: std::sync::Mutex<()>,
}

impl Store {
    /// Opens (creating it if needed) the store of one machine in `dir`: `blobs/`, `tmp/`, `index.sqlite`.
    pub fn open_dir(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating data folder {}", dir.display())))?;
        let blobs = FsBlobStore::open(dir)?;
        let index = SqliteIndex::open(&dir.join("index.sqlite"))?;
        let store = Store { blobs: Arc::new(blobs), index: Arc::new(index), commit_lock: Default::default() };
        store.reconcile()?;
        Ok(store)
    }

    /// Brings blobs and index back in line after a crash: a blob no row names was never
    /// acknowledged (the crash came between rename and insert), a row whose blob is gone is useless.
    fn reconcile(&self) -> Result<(), StoreError> {
        let listed: std::collections::HashSet<String> =
            self.index.archives()?.into_iter().map(|a| a.hash).collect();
        for hash in self.blobs.hashes()? {
            if !listed.contains(&hash) {
                tracing::warn!(hash, "removing a stored archive that is not in the index");
                self.blobs.delete(&hash)?;
            }
        }
        for hash in listed {
            if !self.blobs.contains(&hash) {
                tracing::warn!(hash, "dropping an index entry whose archive file is missing");
                self.index.remove_archive(&archive_id(&hash))?;
            }
        }
        Ok(())
    }

    pub fn begin(&self, limit: u64) -> Result<Incoming, StoreError> {
        let temp = self.blobs.create_temp()?;
        Ok(Incoming {
            file: temp,
            block: Vec::with_capacity(INCOMING_BLOCK),
            hasher: blake3::Hasher::new(),
            len: 0,
            limit,
        })
    }

    /// Flushes, validates and commits an incoming archive; blocking (fsync, a full validation).
    /// On any error the temporary file is removed and nothing is listed.
    pub fn finish(&self, mut incoming: Incoming, name: &str) -> Result<Ingested, StoreError> {
        let started = std::time::Instant::now();
        incoming.flush_block()?;
        let Incoming { file: temp, hasher, len, .. } = incoming;
        let hash = hasher.finalize().to_hex().to_string();
        let id = archive_id(&hash);
        if let Some(existing) = self.index.archive(&id)? {
            return Ok(Ingested { archive: existing, created: false });
        }
        // The disk writes back while the archive is validated from the page cache.
        let syncing = temp.as_file().try_clone().map_err(io_err("opening the upload's temporary file again"))?;
        let sync = std::thread::spawn(move || syncing.sync_all());
        let inspected = inspect(temp.as_file());
        let synced = sync.join().unwrap_or_else(|_| Err(io::Error::other("the sync thread panicked")));
        let (ops, kernels, regions) = inspected?;
        synced.map_err(io_err("syncing the uploaded archive"))?;
        tracing::info!(size = len, took_ms = started.elapsed().as_millis() as u64, "upload validated and synced");
        let archive = ArchiveInfo {
            id,
            name: name.to_string(),
            size: len,
            hash: hash.clone(),
            ops,
            kernels,
            regions,
            uploaded_at: now_rfc3339(),
        };
        let _guard = self.commit_lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = self.index.archive(&archive.id)? {
            return Ok(Ingested { archive: existing, created: false });
        }
        self.blobs.commit(temp, &hash)?;
        self.index.put_archive(&archive)?;
        Ok(Ingested { archive, created: true })
    }

    /// Imports one archive file (for `--seed`), deduplicated like an upload.
    pub fn import_file(&self, path: &Path, limit: u64) -> Result<Ingested, StoreError> {
        let mut src = std::fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
        let mut incoming = self.begin(limit)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = io::Read::read(&mut src, &mut buf).map_err(io_err(format!("reading {}", path.display())))?;
            if n == 0 {
                break;
            }
            incoming.write(&buf[..n])?;
        }
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        self.finish(incoming, &name)
    }

    /// Removes an archive from the index and its bytes from the blob store.
    pub fn delete(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError> {
        let _guard = self.commit_lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(archive) = self.index.remove_archive(id)? else { return Ok(None) };
        self.blobs.delete(&archive.hash)?;
        Ok(Some(archive))
    }

    /// Memory-maps a stored archive for reading.
    pub fn map(&self, archive: &ArchiveInfo) -> Result<memmap2::Mmap, StoreError> {
        let path = self.blobs.local_path(&archive.hash);
        let file = std::fs::File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        // SAFETY: blobs are immutable once committed (written once under a temporary name, renamed).
        unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(format!("mapping {}", path.display())))
    }
}
