//! Writing an upload to its temporary file without the page cache (Linux `O_DIRECT`).
//!
//! Why: a buffered write copies every byte into freshly allocated page-cache pages, and the final
//! fsync then writes them all back. On a virtual machine whose host reclaims the guest's free
//! memory, touching those fresh pages is the slowest step of an upload (a 1 GiB upload spent about
//! 2 s of CPU in the kernel's page-cache copy, more than hashing and validation together). Direct
//! writes go from our own, reused, aligned buffers to the device; the final fsync then has only the
//! device cache and the file's metadata left to flush. The bytes are still written to a temporary
//! file, fsynced and renamed, exactly as before.
//!
//! The incoming bytes are copied into large aligned blocks (direct I/O needs aligned buffers,
//! offsets and lengths), and [`WRITERS`] threads write full blocks at their offsets while the next
//! ones fill, so several writes are in flight. The last block is padded to the alignment and the
//! file cut back to its length afterwards. A file system without direct I/O (tmpfs, some network
//! file systems) refuses the open or the first write with `EINVAL`: from then on the same blocks
//! are written through the page cache instead.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Alignment of buffers, offsets and lengths: covers 512-byte and 4 KiB logical blocks.
const ALIGN: usize = 4096;
/// Bytes per write.
const BLOCK: usize = 4 << 20;
/// Threads writing blocks, so that one write's latency does not stall the next.
const WRITERS: usize = 2;
/// Blocks in all (filling, queued and being written): at most 16 MiB of memory per upload. They
/// are taken as the upload grows, so a small upload holds one.
const BLOCKS: usize = 4;
/// Blocks kept for the next uploads when an upload ends (the rest are freed).
const POOL_KEEP: usize = 4;

/// Buffers of ended uploads, reused by the next ones: a burst of uploads then touches the same
/// memory again instead of making the allocator find (and keep) fresh pages for each.
static POOL: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// A `BLOCK`-byte buffer whose data starts on an `ALIGN` boundary (over-allocated, so no `unsafe`).
/// Dropping it gives its memory back to [`POOL`].
struct Aligned {
    buf: Vec<u8>,
    start: usize,
    /// Bytes filled.
    len: usize,
}

impl Aligned {
    fn new() -> Aligned {
        let pooled = POOL.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let buf = pooled.unwrap_or_else(|| vec![0u8; BLOCK + ALIGN]);
        let start = buf.as_ptr().align_offset(ALIGN);
        Aligned { buf, start, len: 0 }
    }

    fn data(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// Appends what fits of `bytes`; how many bytes were taken.
    fn fill(&mut self, bytes: &[u8]) -> usize {
        let take = bytes.len().min(BLOCK - self.len);
        let at = self.start + self.len;
        self.buf[at..at + take].copy_from_slice(&bytes[..take]);
        self.len += take;
        take
    }

    fn is_full(&self) -> bool {
        self.len == BLOCK
    }

    /// Zero-pads the data to the alignment (the file is cut back to its length afterwards).
    fn pad(&mut self) {
        let padded = self.len.next_multiple_of(ALIGN);
        self.buf[self.start + self.len..self.start + padded].fill(0);
        self.len = padded;
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL_KEEP {
            pool.push(buf);
        }
    }
}

/// Where the writer threads write: the direct descriptor while it works, the ordinary one after.
struct Target {
    direct: Option<File>,
    /// Set once a direct write was refused: every later block goes through the page cache.
    refused: AtomicBool,
    buffered: File,
}

impl Target {
    fn write(&self, data: &[u8], offset: u64) -> io::Result<()> {
        if let Some(direct) = self.direct.as_ref().filter(|_| !self.refused.load(Ordering::Relaxed)) {
            match direct.write_all_at(data, offset) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.refused.store(true, Ordering::Relaxed),
                done => return done,
            }
        }
        self.buffered.write_all_at(data, offset)
    }
}

/// An upload's file being written in aligned blocks by background threads.
pub struct DirectWriter {
    current: Aligned,
    /// Offset of `current` in the file.
    offset: u64,
    /// Full blocks to the writers.
    queue: Option<SyncSender<(u64, Aligned)>>,
    /// Empty blocks back from the writers.
    free: Receiver<Aligned>,
    /// Blocks this upload has taken so far (at most [`BLOCKS`]).
    taken: usize,
    writers: Vec<JoinHandle<io::Result<()>>>,
    file: File,
}

impl DirectWriter {
    /// Writes into `file` (an empty file at `path`), directly where the file system allows it.
    pub fn new(path: &Path, file: &File) -> io::Result<DirectWriter> {
        // A second descriptor with O_DIRECT; EINVAL means this file system has no direct I/O.
        let direct = match std::fs::OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path) {
            Ok(f) => Some(f),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            Err(e) => return Err(e),
        };
        let target = Arc::new(Target { direct, refused: AtomicBool::new(false), buffered: file.try_clone()? });
        let (queue, full) = sync_channel::<(u64, Aligned)>(BLOCKS);
        let (give_back, free) = sync_channel::<Aligned>(BLOCKS);
        let full = Arc::new(Mutex::new(full));
        let writers = (0..WRITERS)
            .map(|i| {
                let (full, give_back, target) = (full.clone(), give_back.clone(), target.clone());
                std::thread::Builder::new().name(format!("upload-write-{i}")).spawn(move || -> io::Result<()> {
                    loop {
                        // The lock is held only while waiting for the next block, not while writing it.
                        let next = full.lock().unwrap_or_else(|e| e.into_inner()).recv();
                        let Ok((offset, mut block)) = next else { return Ok(()) };
                        target.write(block.data(), offset)?;
                        block.len = 0;
                        // The filler may be gone (the upload ended early): then the block is just freed.
                        let _ = give_back.send(block);
                    }
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(DirectWriter {
            current: Aligned::new(),
            offset: 0,
            queue: Some(queue),
            free,
            taken: 1,
            writers,
            file: file.try_clone()?,
        })
    }

    pub fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let took = self.current.fill(bytes);
            bytes = &bytes[took..];
            if self.current.is_full() {
                self.send_current()?;
            }
        }
        Ok(())
    }

    /// Hands the current block to the writers and takes an empty one.
    fn send_current(&mut self) -> io::Result<()> {
        let empty = match self.free.try_recv() {
            Ok(block) => block,
            Err(_) if self.taken < BLOCKS => {
                self.taken += 1;
                Aligned::new()
            }
            Err(_) => match self.free.recv() {
                Ok(block) => block,
                Err(_) => return Err(self.writer_error()),
            },
        };
        let full = std::mem::replace(&mut self.current, empty);
        let len = full.len as u64;
        let queue = self.queue.as_ref().expect("only `finish` closes the queue");
        if queue.send((self.offset, full)).is_err() {
            return Err(self.writer_error());
        }
        self.offset += len;
        Ok(())
    }

    /// Why the writers stopped early: the first error of a writer that returned one.
    fn writer_error(&mut self) -> io::Error {
        self.queue = None;
        for writer in self.writers.drain(..) {
            match writer.join() {
                Ok(Err(e)) => return e,
                Ok(Ok(())) => {}
                Err(_) => return io::Error::other("an upload writer thread panicked"),
            }
        }
        io::Error::other("the upload writer threads stopped")
    }

    /// Writes what is left, waits for every write and cuts the file back to `len` bytes (the last
    /// block was padded). Does not fsync.
    pub fn finish(mut self, len: u64) -> io::Result<()> {
        if self.current.len > 0 {
            self.current.pad();
            self.send_current()?;
        }
        self.queue = None;
        for writer in self.writers.drain(..) {
            writer.join().map_err(|_| io::Error::other("an upload writer thread panicked"))??;
        }
        self.file.set_len(len)
    }
}
