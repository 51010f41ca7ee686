//! The device address space of one replay: buffers ("regions") far apart from each other, each
//! stored as 32-bit atomic words so that racing or hostile kernels running on many cores are never
//! undefined behaviour in Rust. Relaxed atomic loads and stores compile to plain moves on x86 and
//! ARM, so checked accesses cost a bounds test and an index, not a lock.
//!
//! Regions are either fresh (one per 64 GiB window, at its start) or placed at addresses a capture
//! recorded ([`Memory::place_regions`]): then the regions that share a window share one slot
//! whose storage spans them all, each region a view at its own offset. Storage is allocated zeroed
//! by the allocator (anonymous pages the kernel zeroes on first touch), so gaps between placed
//! regions cost address space, not memory; bytes in a gap read as zeros instead of faulting.
//! Where the allocator gives it, a placed slot's storage starts at the window's start, so compiled
//! kernels check it inline like any other slot; otherwise it starts at its lowest region (its
//! `origin`) and compiled kernels reach it through the checked slow path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

use super::ir::{MAX_REGION_SLOTS, REGION_SHIFT};
use super::typemap;

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
    #[error("host memory at {addr:#x} is not aligned to 4 bytes")]
    HostMisaligned { addr: u64 },
    #[error("{addr:#x} is not the start of a window without a region")]
    WindowInUse { addr: u64 },
}

/// Why regions cannot be placed at their addresses; `index` is the region's position in the list
/// given to [`Memory::place_regions`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error(
        "address {addr:#x} is outside the addresses regions can have on the CPU ({:#x} to {:#x})",
        1u64 << REGION_SHIFT,
        (MAX_REGION_SLOTS + 1) << REGION_SHIFT
    )]
    Reserved { index: usize, addr: u64 },
    #[error("{addr:#x} + {size} bytes crosses a {} GiB window boundary", (1u64 << REGION_SHIFT) >> 30)]
    CrossesWindow { index: usize, addr: u64, size: u64 },
    #[error("{addr:#x} + {size} bytes overlaps another placed region at {other_addr:#x}")]
    Overlap { index: usize, addr: u64, size: u64, other: usize, other_addr: u64 },
    #[error("{addr:#x} lies in a window a fresh region already has")]
    InUse { index: usize, addr: u64 },
    #[error("the regions placed in window {window:#x} span {span} bytes from {addr:#x}, more than the limit of {max}")]
    Span { index: usize, window: u64, addr: u64, span: u64, max: u64 },
    #[error("cannot allocate the {span} bytes the regions placed in window {window:#x} span from {addr:#x}")]
    AllocFailed { index: usize, window: u64, addr: u64, span: u64 },
}

impl PlaceError {
    /// The region the error is about (its position in the list given to `place_regions`).
    pub fn index(&self) -> usize {
        match *self {
            PlaceError::Reserved { index, .. }
            | PlaceError::CrossesWindow { index, .. }
            | PlaceError::Overlap { index, .. }
            | PlaceError::InUse { index, .. }
            | PlaceError::Span { index, .. }
            | PlaceError::AllocFailed { index, .. } => index,
        }
    }
}

/// One contiguous buffer of the device address space: a fresh region, or the storage a window's
/// placed regions share.
pub(crate) struct Region {
    size: u64,
    readonly: bool,
    /// The window offset of the storage's first byte (0 but for a placed slot that could not get
    /// storage from the window's start).
    origin: u64,
    words: Words,
    /// Per byte, the element type of the last store that wrote it (`super::typemap`), kept only
    /// while [`Memory::record_types`] is on: a check's type inference, never a plain replay.
    types: Option<Box<[AtomicU8]>>,
}

/// A region's storage: words it owns, or host memory lent to it ([`Memory::add_host_region`]).
/// One pointer and length either way, so that an access costs no more than a slice's.
struct Words {
    ptr: std::ptr::NonNull<AtomicU32>,
    len: usize,
    /// Whether `ptr` and `len` are a `Box<[AtomicU32]>` to free; lent memory stays the lender's.
    owned: bool,
}

impl Words {
    fn owned(words: Box<[AtomicU32]>) -> Words {
        let len = words.len();
        // A box's pointer is never null.
        let ptr = std::ptr::NonNull::from(Box::leak(words)).cast();
        Words { ptr, len, owned: true }
    }
}

impl Drop for Words {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: `ptr` and `len` came from `Box::leak` in `owned`, and are freed once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) });
        }
    }
}

// SAFETY: owned words are a box of atomics; lent words are plain memory that
// `add_host_region`'s caller keeps valid for every thread while the region exists. Both are only
// reached through atomics.
unsafe impl Send for Words {}
// SAFETY: as for `Send`.
unsafe impl Sync for Words {}

impl std::ops::Deref for Words {
    type Target = [AtomicU32];

    #[inline]
    fn deref(&self) -> &[AtomicU32] {
        // SAFETY: `len` valid, aligned words at `ptr`: a box's, or the lender's by
        // `add_host_region`'s contract.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// `n` zeroed words, from the allocator's zeroed allocation (untouched pages of a large one cost
/// nothing); `None` where it cannot give them.
fn zeroed_words(n: usize) -> Option<Box<[AtomicU32]>> {
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<AtomicU32>(n).ok()?;
    // SAFETY: `layout` has a non-zero size. All-zero bytes are a valid `AtomicU32` (it has the
    // size, alignment and bit validity of `u32`), and the box is given the allocation with the
    // layout it was allocated with, so it frees it as allocated.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut AtomicU32;
        if p.is_null() {
            return None;
        }
        Some(Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)))
    }
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
        let words = zeroed_words(size.div_ceil(4) as usize).ok_or(MemError::AllocFailed { size })?;
        Ok(Region { size, readonly, origin: 0, words: Words::owned(words), types: None })
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The window offset of the storage's first byte.
    #[inline]
    pub(crate) fn origin(&self) -> u64 {
        self.origin
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

    /// Marks `len` bytes at `off` as written by a store of element type `code` (`super::typemap`),
    /// where types are recorded; the caller has checked the range.
    #[inline]
    pub(crate) fn note_type(&self, off: u64, len: u64, code: impl FnOnce() -> u8) {
        if let Some(t) = &self.types {
            let code = code();
            for b in &t[off as usize..(off + len) as usize] {
                b.store(code, Relaxed);
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
    /// Placed regions: base address to size. Their slots are not in `free` while any is placed.
    placed: BTreeMap<u64, u64>,
    /// Whether regions keep a type map (`record_types`).
    record_types: bool,
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
        let slot = self.fresh_slot()?;
        self.slots[slot] = Some(region);
        self.start_types(slot);
        Ok(((slot as u64) + 1) << REGION_SHIFT)
    }

    /// A slot for a new region: fresh addresses first (a stale pointer then faults), freed ones
    /// when none are left.
    fn fresh_slot(&mut self) -> Result<usize, MemError> {
        if (self.slots.len() as u64) < MAX_REGION_SLOTS {
            self.slots.push(None);
            return Ok(self.slots.len() - 1);
        }
        self.free.pop().ok_or(MemError::TooManyRegions { max: MAX_REGION_SLOTS })
    }

    /// Adds a region of `size` bytes whose storage is host memory lent by the caller, so that
    /// kernels and copies read and write those very bytes and the host sees every store at once,
    /// and the region's kernels see the host's: a CUDA driver's host memory mapped into the device
    /// and its managed memory, on a machine with one memory. The region takes the window starting
    /// at `at` (which must have no region), so that its device address can be the host address
    /// itself, or a fresh window. Returns its base address; [`Memory::remove_region`] ends the
    /// loan.
    ///
    /// # Safety
    /// `host` is valid for reads and writes of `size` rounded up to 4 bytes, from any thread,
    /// until the region is removed, and nothing but the lender and this memory reach it meanwhile.
    pub unsafe fn add_host_region(
        &mut self,
        host: std::ptr::NonNull<u8>,
        size: u64,
        at: Option<u64>,
    ) -> Result<u64, MemError> {
        let max = (1u64 << REGION_SHIFT) - 8;
        if size > max {
            return Err(MemError::TooLarge { size, max });
        }
        if !(host.as_ptr() as usize).is_multiple_of(4) {
            return Err(MemError::HostMisaligned { addr: host.as_ptr() as u64 });
        }
        let slot = match at {
            None => self.fresh_slot()?,
            Some(addr) => {
                let window = addr >> REGION_SHIFT;
                let taken = self.slots.get((window as usize).wrapping_sub(1)).is_some_and(Option::is_some);
                if addr & ((1 << REGION_SHIFT) - 1) != 0 || window == 0 || window > MAX_REGION_SLOTS || taken {
                    return Err(MemError::WindowInUse { addr });
                }
                let slot = (window - 1) as usize;
                if self.slots.len() <= slot {
                    self.slots.resize_with(slot + 1, || None);
                }
                self.free.retain(|&f| f != slot);
                slot
            }
        };
        let words = Words { ptr: host.cast(), len: size.div_ceil(4) as usize, owned: false };
        self.slots[slot] = Some(Region { size, readonly: false, origin: 0, words, types: None });
        self.start_types(slot);
        Ok(((slot as u64) + 1) << REGION_SHIFT)
    }

    /// Places regions, `(address, size)` each, at their addresses: those that share a 64 GiB
    /// window share one slot, whose storage spans from the lowest to the highest of them (at most
    /// `max_span` bytes). Called before any fresh region is added in the windows it uses (fresh
    /// regions go after the highest slot in use, so adding them later is fine). Each placed
    /// region is a region of its own for [`Memory::region_size`], [`Memory::read_region`] and
    /// [`Memory::remove_region`]; bytes between them read as zeros.
    pub fn place_regions(&mut self, regions: &[(u64, u64)], max_span: u64) -> Result<(), PlaceError> {
        self.place_regions_from(regions, max_span, true)
    }

    /// [`Memory::place_regions`]; `window_start`: try storage from the window's start first
    /// (tests turn it off to reach the other layout).
    pub(crate) fn place_regions_from(
        &mut self,
        regions: &[(u64, u64)],
        max_span: u64,
        window_start: bool,
    ) -> Result<(), PlaceError> {
        let lowest = 1u64 << REGION_SHIFT;
        let highest = (MAX_REGION_SLOTS + 1) << REGION_SHIFT;
        let mut order: Vec<usize> = (0..regions.len()).collect();
        order.sort_by_key(|&i| regions[i]);
        let mut windows: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut previous: Option<usize> = None;
        for &i in &order {
            let (addr, size) = regions[i];
            let end = addr.checked_add(size.max(1)).ok_or(PlaceError::Reserved { index: i, addr })?;
            if addr < lowest || end > highest {
                return Err(PlaceError::Reserved { index: i, addr });
            }
            if addr >> REGION_SHIFT != (end - 1) >> REGION_SHIFT {
                return Err(PlaceError::CrossesWindow { index: i, addr, size });
            }
            if let Some(p) = previous {
                let (paddr, psize) = regions[p];
                if paddr + psize.max(1) > addr {
                    return Err(PlaceError::Overlap { index: i, addr, size, other: p, other_addr: paddr });
                }
            }
            previous = Some(i);
            windows.entry(addr >> REGION_SHIFT).or_default().push(i);
        }
        let mask = (1u64 << REGION_SHIFT) - 1;
        for (&window, members) in &windows {
            let slot = (window - 1) as usize;
            let first = members[0];
            let (lo, hi) =
                (regions[first].0 & mask, members.iter().map(|&i| (regions[i].0 & mask) + regions[i].1).max());
            let hi = hi.unwrap_or(lo);
            let at = window << REGION_SHIFT;
            if self.slots.get(slot).is_some_and(|s| s.is_some()) {
                return Err(PlaceError::InUse { index: first, addr: regions[first].0 });
            }
            let span = hi - lo;
            if span > max_span || hi > (1u64 << REGION_SHIFT) - 8 {
                return Err(PlaceError::Span { index: first, window: at, addr: at + lo, span, max: max_span });
            }
            // From the window's start where the allocator gives it (compiled kernels then check it
            // inline), else from the lowest region.
            let whole = if window_start && cfg!(target_pointer_width = "64") {
                zeroed_words(hi.div_ceil(4) as usize)
            } else {
                None
            };
            let (origin, words) =
                match whole {
                    Some(words) => (0, words),
                    _ => {
                        // Page-aligned, so that offsets into the storage keep every address's
                        // alignment (accesses are checked for natural alignment on them).
                        let origin = lo & !0xFFF;
                        let words = zeroed_words((hi - origin).div_ceil(4) as usize)
                            .ok_or(PlaceError::AllocFailed { index: first, window: at, addr: at + lo, span })?;
                        (origin, words)
                    }
                };
            if self.slots.len() <= slot {
                self.slots.resize_with(slot + 1, || None);
            }
            self.free.retain(|&f| f != slot);
            self.slots[slot] =
                Some(Region { size: hi - origin, readonly: false, origin, words: Words::owned(words), types: None });
            self.start_types(slot);
            for &i in members {
                self.placed.insert(regions[i].0, regions[i].1);
            }
        }
        Ok(())
    }

    /// Frees a region by its base address.
    pub fn remove_region(&mut self, base: u64) -> Result<(), MemError> {
        if self.placed.remove(&base).is_some() {
            // The window's storage goes when its last placed region does.
            if !self.placed_in_window(base) {
                let slot = ((base >> REGION_SHIFT) - 1) as usize;
                self.slots[slot] = None;
                self.free.push(slot);
            }
            return Ok(());
        }
        if self.placed_in_window(base) {
            return Err(MemError::NotARegion { base });
        }
        let slot = self.slot_of(base).ok_or(MemError::NotARegion { base })?;
        if base & ((1 << REGION_SHIFT) - 1) != 0 || self.slots[slot].is_none() {
            return Err(MemError::NotARegion { base });
        }
        self.slots[slot] = None;
        self.free.push(slot);
        Ok(())
    }

    /// Whether the window of `addr` holds placed regions.
    fn placed_in_window(&self, addr: u64) -> bool {
        let window = addr >> REGION_SHIFT;
        self.placed.range(window << REGION_SHIFT..(window + 1) << REGION_SHIFT).next().is_some()
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
        Some((r, (addr & ((1 << REGION_SHIFT) - 1)).checked_sub(r.origin)?))
    }

    /// Per slot (address `(i + 1) << REGION_SHIFT`): the region's storage and size, for compiled
    /// kernels' inline bounds checks. The pointers stay valid while `self` is borrowed. Storage
    /// that does not start at its window's start has no entry: its accesses take the slow path.
    #[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
    pub(crate) fn slot_regions(&self) -> impl Iterator<Item = Option<(*mut u8, u64)>> + '_ {
        self.slots.iter().map(|s| s.as_ref().filter(|r| r.origin == 0).map(|r| (r.words.as_ptr() as *mut u8, r.size)))
    }

    /// The size of the region starting at `base`.
    pub fn region_size(&self, base: u64) -> Option<u64> {
        if let Some(&size) = self.placed.get(&base) {
            return Some(size);
        }
        if self.placed_in_window(base) {
            return None;
        }
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
        // A memset's bytes have no PTX writer.
        r.note_type(off, len, || typemap::UNTYPED);
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
            // Copied bytes keep the types their source had.
            if let (Some(ts), Some(td)) = (&rs.types, &rd.types) {
                let src: Vec<u8> =
                    ts[(so + at) as usize..(so + at + n) as usize].iter().map(|b| b.load(Relaxed)).collect();
                for (d, s) in td[(d_off + at) as usize..(d_off + at + n) as usize].iter().zip(src) {
                    d.store(s, Relaxed);
                }
            }
            k += n;
        }
        Ok(())
    }

    /// From now on, every region (those there and those added later) keeps, per byte, the
    /// element type of the last PTX store that wrote it (`super::typemap`), all untyped at first.
    /// For inferring a region's typed layout: a store costs a few byte writes more.
    pub fn record_types(&mut self) {
        self.record_types = true;
        for slot in 0..self.slots.len() {
            self.start_types(slot);
        }
    }

    /// Whether [`Memory::record_types`] is on.
    pub fn records_types(&self) -> bool {
        self.record_types
    }

    fn start_types(&mut self, slot: usize) {
        if !self.record_types {
            return;
        }
        if let Some(r) = &mut self.slots[slot] {
            if r.types.is_none() {
                r.types = Some((0..r.words.len() * 4).map(|_| AtomicU8::new(typemap::UNTYPED)).collect());
            }
        }
    }

    /// The type map (`super::typemap` codes, one per byte) of `len` bytes at `addr`; `None` where
    /// types are not recorded.
    pub fn types(&self, addr: u64, len: u64) -> Result<Option<Vec<u8>>, MemError> {
        let (r, off) = self.span(addr, len)?;
        Ok(r.types.as_ref().map(|t| t[off as usize..(off + len) as usize].iter().map(|b| b.load(Relaxed)).collect()))
    }

    /// Whether `addr` lies inside a region (what makes a stored 64-bit value a pointer).
    pub(crate) fn is_address(&self, addr: u64) -> bool {
        self.region(addr).is_some_and(|(r, off)| off < r.size)
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
