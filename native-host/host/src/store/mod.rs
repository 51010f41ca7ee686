//! Where the host keeps archives and sessions: a blob store for the bytes and an index for the rest.
//!
//! The key design decision: both are traits ([`BlobStore`], [`Index`]) with an implementation each
//! for one machine (files named by blake3 hash, SQLite, the default) and one for a team's services
//! (an S3-compatible object store, [`S3BlobStore`]; PostgreSQL, [`PgIndex`]), chosen by URL at
//! start ([`Store::open`]); the server does not know which it has. [`Store`] holds the one piece of
//! logic on top: ingesting an upload safely.

mod blobs;
mod cache;
#[cfg(target_os = "linux")]
mod direct;
mod postgres;
mod s3;
mod sqlite;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::secrets::redact;

pub use blobs::FsBlobStore;
pub use postgres::PgIndex;
pub use s3::S3BlobStore;
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
    /// A service the store runs on (the object store, PostgreSQL) failed or did not answer;
    /// `what` names it and what was being done.
    #[error("{what}: {message}")]
    Backend { what: String, message: String, unreachable: bool },
    /// A `--blobs` or `--index` setting that cannot be used.
    #[error("{0}")]
    Config(String),
}

impl StoreError {
    /// Whether the error means a service the store needs did not answer (the API says 503).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Backend { unreachable: true, .. })
    }
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> StoreError {
    let what = what.into();
    move |source| StoreError::Io { what, source }
}

/// Bytes of archives, addressed by their blake3 hash (hex). Methods block: the server calls them
/// from blocking threads.
pub trait BlobStore: Send + Sync + 'static {
    /// A new temporary file for incoming bytes; dropped without [`BlobStore::commit`], it vanishes.
    fn create_temp(&self) -> Result<tempfile::NamedTempFile, StoreError>;
    /// Where an upload's bytes go while they arrive besides the temporary file (an object store's
    /// multipart upload, invisible until committed); `None` where the temporary file itself
    /// becomes the blob. Dropped without [`BlobStore::commit`], it leaves nothing behind.
    fn stream(&self) -> Result<Option<Box<dyn BlobStream>>, StoreError> {
        Ok(None)
    }
    /// Makes a fully written (and validated) upload durable as the blob `hash`, atomically:
    /// afterwards the blob exists whole, before it does not exist at all. `streamed` is what
    /// [`BlobStore::stream`] gave for this upload, fed every byte.
    fn commit(
        &self,
        temp: tempfile::NamedTempFile,
        hash: &str,
        streamed: Option<Box<dyn BlobStream>>,
    ) -> Result<(), StoreError>;
    /// A local file holding the blob (for memory maps and worker processes); a remote store
    /// fetches it into a local cache first.
    fn local_path(&self, hash: &str) -> Result<PathBuf, StoreError>;
    fn contains(&self, hash: &str) -> Result<bool, StoreError>;
    fn delete(&self, hash: &str) -> Result<(), StoreError>;
    /// Hashes of every stored blob.
    fn hashes(&self) -> Result<Vec<String>, StoreError>;
    /// Hashes of the blobs old enough to be judged by the cleanup at start: where several hosts
    /// share the store, a young blob may be one another host is about to list.
    fn settled_hashes(&self) -> Result<Vec<String>, StoreError> {
        self.hashes()
    }
    /// How a download reads the blob.
    fn download(&self, hash: &str) -> Result<Download, StoreError> {
        self.local_path(hash).map(Download::File)
    }
    /// What and where the store is, for messages (no credentials).
    fn describe(&self) -> String;
    /// Keeps a file of region contents a session kept where every host reaches it; `false` where
    /// this store is local (the file stays in the `sessions/` of the data folder it was written to).
    fn put_kept(&self, _session: &str, _file: &str, _bytes: Vec<u8>) -> Result<bool, StoreError> {
        Ok(false)
    }
    /// A file [`BlobStore::put_kept`] kept, if there is one.
    fn kept(&self, _session: &str, _file: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }
}

/// An upload's bytes on their way into a remote store while they arrive.
pub trait BlobStream: Send {
    /// Sends the next bytes (blocking while the store is behind).
    fn write(&mut self, chunk: bytes::Bytes) -> Result<(), StoreError>;
    /// For the store that made it, to take it back at commit.
    fn as_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

/// Bytes of a download, as they come.
pub type ByteStream = std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<bytes::Bytes, io::Error>> + Send>>;

/// A blob read by byte ranges from a remote store.
pub trait ObjectRead: Send + Sync {
    fn read(
        &self,
        range: std::ops::Range<u64>,
    ) -> futures_util::future::BoxFuture<'static, Result<ByteStream, io::Error>>;
}

/// Where a download's bytes come from.
pub enum Download {
    /// A local file (the server answers ranges from it).
    File(PathBuf),
    /// An object read by ranges.
    Object(Box<dyn ObjectRead>),
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
    /// Removes an archive and its aliases.
    fn remove_archive(&self, id: &str) -> Result<Option<ArchiveInfo>, StoreError>;
    /// Keeps `name` as another name of archive `id` (after those it has); `false` when it was
    /// already one of its names or the archive is not there.
    fn add_alias(&self, id: &str, name: &str) -> Result<bool, StoreError>;

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
    /// Newest first, at most `limit`; only those of `archive` when given.
    fn sessions(&self, limit: usize, archive: Option<&str>) -> Result<Vec<SessionInfo>, StoreError>;
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
/// blob) from a reader, in memory bounded by the archive's tables rather than its size. With the
/// scan of the bytes as they were written, only what the scan does not vouch for is read.
pub fn inspect(
    file: &std::fs::File,
    scanned: Option<&shared::archive::Scanned>,
) -> Result<(u64, u64, u64), shared::archive::FormatError> {
    let mut reader = io::BufReader::with_capacity(1 << 20, file);
    let counts = match scanned {
        Some(scanned) => shared::archive::validate_scanned(&mut reader, scanned)?,
        None => shared::archive::validate_reader(&mut reader)?,
    };
    Ok((counts.ops, counts.kernels, counts.regions))
}

/// What ingesting an upload produced.
#[derive(Debug)]
pub struct Ingested {
    pub archive: ArchiveInfo,
    /// `false` when identical bytes were already stored (the existing archive is returned).
    pub created: bool,
}

/// Chunks queued for the scanning thread: bounds how far it may fall behind (and the memory that
/// holds).
const SCAN_QUEUE: usize = 16;

/// An incoming archive on its way to a temporary file. Three things happen to every chunk, so that
/// little is left to do after the last byte: this thread hashes it (the archive's id) and copies it
/// into the file's write blocks ([`direct`]); a scanning thread ([`shared::archive::scan`]) checks
/// the blobs in it (the blobs come first in an archive, the tables last).
pub struct Incoming {
    file: tempfile::NamedTempFile,
    out: Output,
    hasher: blake3::Hasher,
    len: u64,
    limit: u64,
    scan: Option<ScanFeed>,
    /// The blob store's copy, streamed as the bytes arrive ([`BlobStore::stream`]).
    stream: Option<Box<dyn BlobStream>>,
}

/// How the bytes reach the file.
enum Output {
    /// Large aligned blocks written without the page cache, by background threads.
    #[cfg(target_os = "linux")]
    Direct(direct::DirectWriter),
    /// Plain writes through the page cache.
    #[cfg(not(target_os = "linux"))]
    Buffered,
}

/// The scanning thread and its queue.
struct ScanFeed {
    queue: std::sync::mpsc::SyncSender<bytes::Bytes>,
    thread: std::thread::JoinHandle<io::Result<shared::archive::Scanned>>,
}

/// The scanning thread's side of the queue, read as one stream.
struct Queued {
    queue: std::sync::mpsc::Receiver<bytes::Bytes>,
    current: bytes::Bytes,
}

impl io::Read for Queued {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = {
            let buf = io::BufRead::fill_buf(self)?;
            let n = buf.len().min(out.len());
            out[..n].copy_from_slice(&buf[..n]);
            n
        };
        io::BufRead::consume(self, n);
        Ok(n)
    }
}

impl io::BufRead for Queued {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.current.is_empty() {
            // A closed queue is the end of the stream (the upload ended, or was abandoned).
            match self.queue.recv() {
                Ok(chunk) => self.current = chunk,
                Err(_) => break,
            }
        }
        Ok(&self.current)
    }

    fn consume(&mut self, n: usize) {
        bytes::Buf::advance(&mut self.current, n);
    }
}

impl Incoming {
    pub fn write(&mut self, chunk: bytes::Bytes) -> Result<(), StoreError> {
        self.len += chunk.len() as u64;
        if self.len > self.limit {
            return Err(StoreError::TooLarge { limit: self.limit });
        }
        // First to the scan (a reference, not a copy), so that it works while this thread does.
        if let Some(scan) = &self.scan {
            if scan.queue.send(chunk.clone()).is_err() {
                // The scan is gone (it cannot fail on the bytes, only panic): validation reads the file.
                self.scan = None;
            }
        }
        if let Some(stream) = &mut self.stream {
            stream.write(chunk.clone())?;
        }
        // On this thread alone: the socket, the scan and the writers keep the other cores busy.
        self.hasher.update(&chunk);
        let written = match &mut self.out {
            #[cfg(target_os = "linux")]
            Output::Direct(w) => w.write(&chunk),
            #[cfg(not(target_os = "linux"))]
            Output::Buffered => io::Write::write_all(&mut self.file, &chunk),
        };
        written.map_err(io_err("writing the upload's temporary file"))
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Empties `tmp/` at start: only this host's work in progress lives there (uploads on their way,
/// bundles being converted), and a host that was killed or crashed leaves it behind, in any shape
/// (files, folders of unpacked bundles, links an unpacked bundle held). Each thing removed is
/// logged; one that cannot be removed is logged and left, and never stops the host from starting.
pub fn clear_tmp(tmp: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(tmp).map_err(io_err(format!("creating {}", tmp.display())))?;
    let listing = std::fs::read_dir(tmp).map_err(io_err(format!("reading {}", tmp.display())))?;
    for entry in listing {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                tracing::warn!(folder = %tmp.display(), "listing leftover work: {e}");
                continue;
            }
        };
        let path = entry.path();
        // Not followed: a link is removed, never what it points to.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let (what, removed) = match is_dir {
            true => ("a scratch folder", std::fs::remove_dir_all(&path)),
            false => ("a temporary file", std::fs::remove_file(&path)),
        };
        match removed {
            Ok(()) => tracing::info!(path = %path.display(), "removed {what} a previous run left unfinished"),
            Err(e) => tracing::warn!(path = %path.display(), "could not remove {what} a previous run left: {e}"),
        }
    }
    Ok(())
}

/// The blob store and the index together.
pub struct Store {
    pub blobs: Arc<dyn BlobStore>,
    pub index: Arc<dyn Index>,
    /// Serialises the short commit and delete steps so that a delete never races a commit of the
    /// same bytes (which would leave an index row without its blob).
    commit_lock: std::sync::Mutex<()>,
    /// `sessions/`: a folder per session with the region contents it keeps for download.
    sessions_dir: std::path::PathBuf,
    /// `tmp/`: work in progress, on the same file system as the blobs.
    tmp_dir: std::path::PathBuf,
}

impl Store {
    /// Opens (creating it if needed) the store of one machine in `dir`: `blobs/`, `tmp/`, `index.sqlite`.
    pub fn open_dir(dir: &Path) -> Result<Store, StoreError> {
        Store::open(dir, None, None)
    }

    /// Opens the store: archives in `blobs` (an `s3://` URL; default: files under `dir`), the
    /// index in `index` (a `postgres://` URL; default: `index.sqlite` in `dir`). `dir` keeps what
    /// stays local either way: temporary files, a remote store's cache, sessions' kept regions.
    /// Blocking: call it from a blocking thread of a tokio runtime (the remote stores run on it).
    pub fn open(dir: &Path, blobs_url: Option<&str>, index_url: Option<&str>) -> Result<Store, StoreError> {
        let (blobs, index) = (blobs_url, index_url);
        std::fs::create_dir_all(dir).map_err(io_err(format!("creating data folder {}", dir.display())))?;
        let handle = || {
            tokio::runtime::Handle::try_current()
                .map_err(|_| StoreError::Config("remote stores need a tokio runtime".into()))
        };
        let blobs: Arc<dyn BlobStore> = match blobs {
            None => Arc::new(FsBlobStore::open(dir)?),
            Some(url) if url.starts_with("s3://") => Arc::new(S3BlobStore::open(url, dir, handle()?)?),
            Some(url) => {
                return Err(StoreError::Config(format!(
                    "--blobs {}: not a blob store URL; s3://BUCKET?endpoint=URL, or leave it out for files in the data folder",
                    redact(url)
                )))
            }
        };
        let index: Arc<dyn Index> = match index {
            None => Arc::new(SqliteIndex::open(&dir.join("index.sqlite"))?),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Arc::new(PgIndex::open(url, handle()?)?)
            }
            Some(url) => {
                return Err(StoreError::Config(format!(
                    "--index {}: not an index URL; postgres://USER@HOST:PORT/DB, or leave it out for SQLite in the data folder",
                    redact(url)
                )))
            }
        };
        let store = Store {
            blobs,
            index,
            commit_lock: Default::default(),
            sessions_dir: dir.join("sessions"),
            tmp_dir: dir.join("tmp"),
        };
        clear_tmp(&store.tmp_dir)?;
        // Blobs and index are only judged against each other where they belong together: both in
        // this data folder, or both shared by the cluster's hosts (a shared index beside this
        // host's own files, or the reverse, holds rows or blobs of other hosts).
        if blobs_url.is_some() == index_url.is_some() {
            store.reconcile()?;
        } else {
            tracing::info!("archives and index are kept apart (one shared, one local): no cleanup at start");
        }
        Ok(store)
    }

    /// Brings blobs and index back in line after a crash: a blob no row names was never
    /// acknowledged (the crash came between storing and indexing it), a row whose blob is gone is
    /// useless. Where hosts share the stores, only blobs old enough are judged (another host may be
    /// about to list a young one).
    fn reconcile(&self) -> Result<(), StoreError> {
        let listed: std::collections::HashSet<String> = self.index.archives()?.into_iter().map(|a| a.hash).collect();
        let stored: std::collections::HashSet<String> = self.blobs.hashes()?.into_iter().collect();
        for hash in self.blobs.settled_hashes()? {
            if !listed.contains(&hash) {
                tracing::warn!(hash, "removing a stored archive that is not in the index");
                self.blobs.delete(&hash)?;
            }
        }
        for hash in listed {
            if !stored.contains(&hash) {
                tracing::warn!(hash, "dropping an index entry whose archive file is missing");
                self.index.remove_archive(&archive_id(&hash))?;
            }
        }
        Ok(())
    }

    /// A scratch folder under `tmp/`, removed when dropped (and at the next start after a crash:
    /// [`clear_tmp`]).
    pub fn scratch(&self) -> Result<tempfile::TempDir, StoreError> {
        std::fs::create_dir_all(&self.tmp_dir).map_err(io_err(format!("creating {}", self.tmp_dir.display())))?;
        tempfile::Builder::new()
            .prefix("work-")
            .tempdir_in(&self.tmp_dir)
            .map_err(io_err(format!("creating a folder in {}", self.tmp_dir.display())))
    }

    /// The folder of the region contents a session keeps (`sessions/{id}`; the id is 32 hex digits).
    pub fn session_dir(&self, id: &str) -> std::path::PathBuf {
        self.sessions_dir.join(id)
    }

    pub fn begin(&self, limit: u64) -> Result<Incoming, StoreError> {
        let temp = self.blobs.create_temp()?;
        #[cfg(target_os = "linux")]
        let out = Output::Direct(
            direct::DirectWriter::new(temp.path(), temp.as_file())
                .map_err(io_err("opening the upload's temporary file"))?,
        );
        #[cfg(not(target_os = "linux"))]
        let out = Output::Buffered;
        let (queue, queued) = std::sync::mpsc::sync_channel(SCAN_QUEUE);
        let thread = std::thread::Builder::new()
            .name("upload-scan".into())
            .spawn(move || shared::archive::scan(Queued { queue: queued, current: bytes::Bytes::new() }))
            .map_err(io_err("starting the upload's scanning thread"))?;
        let stream = self.blobs.stream()?;
        Ok(Incoming {
            file: temp,
            out,
            hasher: blake3::Hasher::new(),
            len: 0,
            limit,
            scan: Some(ScanFeed { queue, thread }),
            stream,
        })
    }

    /// Flushes, validates and commits an incoming archive; blocking (fsync, a full validation).
    /// On any error the temporary file is removed and nothing is listed.
    pub fn finish(&self, incoming: Incoming, name: &str) -> Result<Ingested, StoreError> {
        let started = std::time::Instant::now();
        let Incoming { file: temp, out, hasher, len, scan, stream, .. } = incoming;
        // Closing the queue ends the scan once it has seen every byte (a scan not waited for, as on
        // a duplicate below, winds down on its own).
        let scan = scan.map(|s| {
            drop(s.queue);
            s.thread
        });
        match out {
            #[cfg(target_os = "linux")]
            Output::Direct(w) => w.finish(len),
            #[cfg(not(target_os = "linux"))]
            Output::Buffered => Ok(()),
        }
        .map_err(io_err("writing the upload's temporary file"))?;
        let written_ms = started.elapsed().as_millis() as u64;
        let hash = hasher.finalize().to_hex().to_string();
        let id = archive_id(&hash);
        {
            let _guard = self.commit_lock.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(archive) = self.join(&id, name)? {
                return Ok(Ingested { archive, created: false });
            }
        }
        // The disk flushes while the archive is validated.
        let syncing = temp.as_file().try_clone().map_err(io_err("opening the upload's temporary file again"))?;
        let sync = std::thread::spawn(move || syncing.sync_all());
        // Without a scan (it panicked, or the upload's writes failed), the whole file is read instead.
        let scanned = scan.and_then(|t| t.join().ok()?.ok());
        let scanned_ms = started.elapsed().as_millis() as u64;
        let inspected = inspect(temp.as_file(), scanned.as_ref());
        let synced = sync.join().unwrap_or_else(|_| Err(io::Error::other("the sync thread panicked")));
        let (ops, kernels, regions) = inspected?;
        synced.map_err(io_err("syncing the uploaded archive"))?;
        tracing::info!(
            size = len,
            written_ms,
            scanned_ms,
            took_ms = started.elapsed().as_millis() as u64,
            "upload validated and synced"
        );
        let archive = ArchiveInfo {
            id,
            name: name.to_string(),
            size: len,
            hash: hash.clone(),
            ops,
            kernels,
            regions,
            uploaded_at: now_rfc3339(),
            aliases: Vec::new(),
            alias_added: None,
            note: None,
        };
        let _guard = self.commit_lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(existing) = self.join(&archive.id, name)? {
            return Ok(Ingested { archive: existing, created: false });
        }
        self.blobs.commit(temp, &hash, stream)?;
        self.index.put_archive(&archive)?;
        Ok(Ingested { archive, created: true })
    }

    /// Where archive `id` is stored already, an upload of the same bytes joins it: its name is
    /// kept as an alias (unless already one of its names) and the archive is answered, with
    /// `alias_added` saying so. `None` when there is no such archive. The caller holds the commit
    /// lock, so that a delete on this host cannot come between.
    fn join(&self, id: &str, name: &str) -> Result<Option<ArchiveInfo>, StoreError> {
        let added = self.index.add_alias(id, name)?;
        let archive = self.index.archive(id)?;
        Ok(archive.map(|a| ArchiveInfo { alias_added: added.then(|| name.to_string()), ..a }))
    }

    /// Imports one archive file (for `--seed`, and converted uploads), deduplicated like an upload;
    /// `name` defaults to the file's.
    pub fn import_file(&self, path: &Path, name: Option<&str>, limit: u64) -> Result<Ingested, StoreError> {
        let mut src = std::fs::File::open(path).map_err(io_err(format!("opening {}", path.display())))?;
        let mut incoming = self.begin(limit)?;
        loop {
            let mut buf = vec![0u8; 1 << 20];
            let n = io::Read::read(&mut src, &mut buf).map_err(io_err(format!("reading {}", path.display())))?;
            if n == 0 {
                break;
            }
            buf.truncate(n);
            incoming.write(buf.into())?;
        }
        let name = name
            .map(str::to_string)
            .unwrap_or_else(|| path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
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
        let path = self.blobs.local_path(&archive.hash)?;
        let file = std::fs::File::open(&path).map_err(io_err(format!("opening {}", path.display())))?;
        // SAFETY: blobs are immutable once committed (written once under a temporary name, renamed).
        unsafe { memmap2::Mmap::map(&file) }.map_err(io_err(format!("mapping {}", path.display())))
    }
}
