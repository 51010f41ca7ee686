//! The device address space of one replay: buffers ("regions") far apart from each other, each
//! stored as 32-bit atomic words so that racing or hostile kernels running on many cores are never
//! undefined behaviour in Rust. Relaxed atomic loads and stores compile to plain moves on x86 and
//! ARM, so checked accesses cost a bounds test and an index, not a lock.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;

use super::ir::{MAX_REGION_SLOTS, REGION_SHIFT};

/// Errors of host-side accesses to [`Memory`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemError {
    #[error("address {addr:#x} (+{len} bytes) is outside every region")]
    OutOfBounds { addr: u64, len: u64 },
    #[error("region of {size} bytes is larger than the {max} byte limit")]
    TooLarge { size: u64, max: u64 },
    #[error("cannot allocate a region of {size} bytes")]
    AllocFailed { size: u64 },
    #[error("too many regions (at most {max} live at once)")]
    TooManyRegions { max: u64 },
    #[error("{base:#x} is not the base address of a region")]
    NotARegion { base: u64 },
    #[error("alignment {align} is not a power of two or exceeds {max}")]
    BadAlign { align: u64, max: u64 },
}

/// One contiguous buffer of the device address space.
pub(crate) struct Region {
    size: u64,
    readonly: bool,
    words: Box<[AtomicU32]>,
}

/// Why a device access failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    OutOfBounds,
    Misaligned,
    ReadOnly,
}

/// 64-bit atomics over 32-bit words: a 64-bit read-modify-write holds one of these locks (chosen by
/// address), so 64-bit atomics on the same address exclude each other.
static WIDE_LOCKS: [Mutex<()>; 64] = [const { Mutex::new(()) }; 64];

impl Region {
    pub(crate) fn new(size: u64, readonly: bool) -> Result<Region, MemError> {
        let max = (1u64 << REGION_SHIFT) - 8;
        if size > max {
            return Err(MemError::TooLarge { size, max });
        }
        let nwords = size.div_ceil(4) as usize;
        let mut v: Vec<AtomicU32> = Vec::new();
        v.try_reserve_exact(nwords).map_err(|_| MemError::AllocFailed { size })?;
        v.resize_with(nwords, || AtomicU32::new(0));
        Ok(Region { size, readonly, words: v.into_boxed_slice() })
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    #[inline]
    pub(crate) fn check(&self, off: u64, size: u64) -> Result<(), Fault> {
        if off.checked_add(size).is_none_or(|e| e > self.size) {
            return Err(Fault::OutOfBounds);
        }
        if off & (size - 1) != 0 {
            return Err(Fault::Misaligned);
        }
        Ok(())
    }

    /// Load of 1, 2, 4 or 8 bytes at a naturally aligned, in-bounds offset.
    #[inline]
    pub(crate) fn load(&self, off: u64, size: u8) -> u64 {
        let i = (off >> 2) as usize;
        match size {
            4 => self.words[i].load(Relaxed) as u64,
            8 => self.words[i].load(Relaxed) as u64 | (self.words[i + 1].load(Relaxed) as u64) << 32,
            _ => {
                let w = self.words[i].load(Relaxed) as u64;
                (w >> ((off & 3) * 8)) & ((1u64 << (size as u32 * 8)) - 1)
            }
        }
    }

    #[inline]
    pub(crate) fn store(&self, off: u64, size: u8, v: u64) -> Result<(), Fault> {
        if self.readonly {
            return Err(Fault::ReadOnly);
        }
        let i = (off >> 2) as usize;
        match size {
            4 => self.words[i].store(v as u32, Relaxed),
            8 => {
                self.words[i].store(v as u32, Relaxed);
                self.words[i + 1].store((v >> 32) as u32, Relaxed);
            }
            _ => {
                let sh = (off & 3) * 8;
                let m = (((1u64 << (size as u32 * 8)) - 1) << sh) as u32;
                let bits = ((v << sh) as u32) & m;
                let _ = self.words[i].fetch_update(Relaxed, Relaxed, |old| Some((old & !m) | bits));
            }
        }
        Ok(())
    }

    /// Atomic read-modify-write of a 4- or 8-byte word; returns the old value.
    pub(crate) fn rmw(&self, off: u64, size: u8, f: impl Fn(u64) -> u64) -> Result<u64, Fault> {
        if self.readonly {
            return Err(Fault::ReadOnly);
        }
        let i = (off >> 2) as usize;
        if size == 4 {
            let old =
                self.words[i].fetch_update(Relaxed, Relaxed, |old| Some(f(old as u64) as u32)).unwrap_or_else(|x| x);
            return Ok(old as u64);
        }
        let lock = &WIDE_LOCKS[((off >> 3) as usize ^ (self as *const Region as usize >> 4)) % 64];
        let _g = lock.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.load(off, 8);
        self.store(off, 8, f(old))?;
        Ok(old)
    }

    #[inline]
    pub(crate) fn fetch_add32(&self, off: u64, v: u32) -> Result<u32, Fault> {
        if self.readonly {
            return Err(Fault::ReadOnly);
        }
        Ok(self.words[(off >> 2) as usize].fetch_add(v, Relaxed))
    }

    pub(crate) fn read(&self, off: u64, out: &mut [u8]) {
        for (k, b) in out.iter_mut().enumerate() {
            let o = off + k as u64;
            *b = (self.words[(o >> 2) as usize].load(Relaxed) >> ((o & 3) * 8)) as u8;
        }
    }

    pub(crate) fn write(&self, off: u64, data: &[u8]) {
        let mut k = 0usize;
        while k < data.len() {
            let o = off + k as u64;
            let i = (o >> 2) as usize;
            if o & 3 == 0 && data.len() - k >= 4 {
                let v = u32::from_le_bytes([data[k], data[k + 1], data[k + 2], data[k + 3]]);
                self.words[i].store(v, Relaxed);
                k += 4;
            } else {
                let sh = (o & 3) * 8;
                let m = 0xFFu32 << sh;
                let bits = (data[k] as u32) << sh;
                let _ = self.words[i].fetch_update(Relaxed, Relaxed, |old| Some((old & !m) | bits));
                k += 1;
            }
        }
    }
}

/// The device address space for one replay.
///
/// Regions are placed `2^36` bytes apart, so an out-of-bounds pointer lands in no region and every
/// access is checked against the one region its address selects. Adding and removing regions needs
/// `&mut self`; executing kernels and copying data needs only `&self`.
#[derive(Default)]
pub struct Memory {
    slots: Vec<Option<Region>>,
    free: Vec<usize>,
}

impl Memory {
    pub fn new() -> Memory {
        Memory::default()
    }

    /// Adds a zero-filled region and returns its base device address. Any `align` up to 2^36 holds.
    pub fn add_region(&mut self, size: u64, align: u64) -> Result<u64, MemError> {
        let max_align = 1u64 << REGION_SHIFT;
        if !align.is_power_of_two() && align != 0 || align > max_align {
            return Err(MemError::BadAlign { align, max: max_align });
        }
        let region = Region::new(size, false)?;
        let slot = if (self.slots.len() as u64) < MAX_REGION_SLOTS {
            self.slots.push(None);
            self.slots.len() - 1
        } else {
            // Fresh addresses first (a stale pointer then faults); reuse freed ones when none are left.
            self.free.pop().ok_or(MemError::TooManyRegions { max: MAX_REGION_SLOTS })?
        };
        self.slots[slot] = Some(region);
        Ok(((slot as u64) + 1) << REGION_SHIFT)
    }

    /// Frees a region by its base address.
    pub fn remove_region(&mut self, base: u64) -> Result<(), MemError> {
        let slot = self.slot_of(base).ok_or(MemError::NotARegion { base })?;
        if base & ((1 << REGION_SHIFT) - 1) != 0 || self.slots[slot].is_none() {
            return Err(MemError::NotARegion { base });
        }
        self.slots[slot] = None;
        self.free.push(slot);
        Ok(())
    }

    fn slot_of(&self, addr: u64) -> Option<usize> {
        let s = (addr >> REGION_SHIFT) as usize;
        if s == 0 || s > self.slots.len() {
            None
        } else {
            Some(s - 1)
        }
    }

    /// The region an address falls in, and the offset within it.
    #[inline]
    pub(crate) fn region(&self, addr: u64) -> Option<(&Region, u64)> {
        let s = (addr >> REGION_SHIFT) as usize;
        let r = self.slots.get(s.wrapping_sub(1))?.as_ref()?;
        Some((r, addr & ((1 << REGION_SHIFT) - 1)))
    }

    /// Per slot (address `(i + 1) << REGION_SHIFT`): the region's storage and size, for compiled
    /// kernels' inline bounds checks. The pointers stay valid while `self` is borrowed.
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    pub(crate) fn slot_regions(&self) -> impl Iterator<Item = Option<(*mut u8, u64)>> + '_ {
        self.slots.iter().map(|s| s.as_ref().map(|r| (r.words.as_ptr() as *mut u8, r.size)))
    }

    /// The size of the region starting at `base`.
    pub fn region_size(&self, base: u64) -> Option<u64> {
        match self.region(base) {
            Some((r, 0)) => Some(r.size),
            _ => None,
        }
    }

    fn span(&self, addr: u64, len: u64) -> Result<(&Region, u64), MemError> {
        let err = MemError::OutOfBounds { addr, len };
        let (r, off) = self.region(addr).ok_or(err.clone())?;
        if off.checked_add(len).is_none_or(|e| e > r.size) {
            return Err(err);
        }
        Ok((r, off))
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), MemError> {
        let (r, off) = self.span(addr, out.len() as u64)?;
        r.read(off, out);
        Ok(())
    }

    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let (r, off) = self.span(addr, data.len() as u64)?;
        r.write(off, data);
        Ok(())
    }

    /// Fills `len` bytes with a repeated pattern (1, 2, 4 or 8 bytes, little-endian).
    pub fn fill(&self, addr: u64, len: u64, pattern: &[u8]) -> Result<(), MemError> {
        let (r, off) = self.span(addr, len)?;
        if pattern.is_empty() {
            return Ok(());
        }
        let mut chunk = Vec::with_capacity(4096);
        while chunk.len() < 4096 {
            chunk.extend_from_slice(pattern);
        }
        chunk.truncate(4096 - 4096 % pattern.len());
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            r.write(off + done, &chunk[..n]);
            done += n as u64;
        }
        Ok(())
    }

    /// Copies `len` bytes between (possibly the same) regions, as `memmove` does.
    pub fn copy(&self, dst: u64, src: u64, len: u64) -> Result<(), MemError> {
        let (rs, so) = self.span(src, len)?;
        let (rd, d_off) = self.span(dst, len)?;
        let mut buf = vec![0u8; len.min(1 << 20) as usize];
        let step = buf.len().max(1) as u64;
        let backwards = std::ptr::eq(rs, rd) && d_off > so;
        let mut k = 0u64;
        while k < len {
            let n = (len - k).min(step);
            let at = if backwards { len - k - n } else { k };
            rs.read(so + at, &mut buf[..n as usize]);
            rd.write(d_off + at, &buf[..n as usize]);
            k += n;
        }
        Ok(())
    }

    pub fn read_u32(&self, addr: u64) -> Result<u32, MemError> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a whole region into a vector.
    pub fn read_region(&self, base: u64) -> Result<Vec<u8>, MemError> {
        let size = self.region_size(base).ok_or(MemError::NotARegion { base })?;
        let mut v = vec![0u8; size as usize];
        self.read(base, &mut v)?;
        Ok(v)
    }
}
