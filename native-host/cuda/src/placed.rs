//! Regions at their captured device addresses on a GPU (docs/FORMAT.md, "Regions at their
//! captured addresses"): the driver's virtual memory management reserves the very addresses a
//! capture recorded and maps fresh physical memory there.
//!
//! The driver maps memory in units of its allocation granularity (2 MiB on current GPUs), and
//! `cuMemAlloc` packs small allocations into such units, so several captured regions often share
//! one. Regions are therefore grouped: each region's range is widened to whole units, ranges that
//! then overlap are merged, and each merged range is one reservation (`cuMemAddressReserve` at
//! its start), one physical allocation (`cuMemCreate`), one mapping (`cuMemMap`) and one access
//! grant (`cuMemSetAccess`). The address is only a request to the driver: where it reserves
//! another one (the range is taken in this process), the replay stops with an error naming the
//! region and the address rather than use memory where the captured pointers do not point.

use cudarc::driver::sys::{self, CUdeviceptr};

use super::driver::call;
use crate::error::CudaError;

/// One reserved, mapped range; released by [`Reservation::release`].
pub(crate) struct Reservation {
    start: CUdeviceptr,
    len: usize,
    handle: sys::CUmemGenericAllocationHandle,
}

/// A region to place: its name (for errors), captured address and size.
pub(crate) struct Wanted<'a> {
    pub name: &'a str,
    pub address: u64,
    pub size: u64,
}

/// The error for a region that cannot have its captured address, in the CPU replay's words.
fn unplaceable(r: &Wanted<'_>, why: String) -> CudaError {
    CudaError::Invalid(format!(
        "region {} cannot be placed at its captured address {:#x}: {why}; replay with --placement fresh to give \
         regions fresh addresses (pointers the capture did not see then point outside every region)",
        r.name, r.address
    ))
}

fn prop(ordinal: usize) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all zeros is the driver's documented default.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = ordinal as i32;
    prop
}

/// Places `regions` on the GPU `ordinal`, whose context is current. On an error, what was already
/// placed is in `done`, for the caller to release.
pub(crate) fn place(ordinal: usize, regions: &[Wanted<'_>], done: &mut Vec<Reservation>) -> Result<(), CudaError> {
    let prop = prop(ordinal);
    let mut granularity = 0usize;
    call!(cuMemGetAllocationGranularity(
        &mut granularity,
        &prop,
        sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
    ))?;
    let g = granularity.max(1) as u64;
    // Whole units per region, merged where they overlap; each range keeps its first region for errors.
    let mut ranges: Vec<(u64, u64, usize)> = Vec::new();
    let mut order: Vec<usize> = (0..regions.len()).collect();
    order.sort_by_key(|&i| regions[i].address);
    for i in order {
        let r = &regions[i];
        let bad = |why: &str| unplaceable(r, why.to_string());
        let start = r.address / g * g;
        let end = r.address.checked_add(r.size.max(1)).and_then(|e| e.checked_next_multiple_of(g));
        let end = end.ok_or_else(|| bad("the range ends past the address space"))?;
        match ranges.last_mut() {
            Some(last) if start < last.1 => last.1 = last.1.max(end),
            _ => ranges.push((start, end, i)),
        }
    }
    for (start, end, first) in ranges {
        let r = &regions[first];
        let len = (end - start) as usize;
        let bad = |why: String| unplaceable(r, why);
        let mut got: CUdeviceptr = 0;
        call!(cuMemAddressReserve(&mut got, len, g as usize, start, 0))
            .map_err(|e| bad(format!("reserving {len} bytes at {start:#x} failed: {e}")))?;
        if got != start {
            call!(cuMemAddressFree(got, len))?;
            return Err(bad(format!(
                "the driver reserved {len} bytes at {got:#x} instead of {start:#x} (the range is taken in this process)"
            )));
        }
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        if let Err(e) = call!(cuMemCreate(&mut handle, len, &prop, 0)) {
            call!(cuMemAddressFree(start, len))?;
            return Err(bad(format!("allocating {len} bytes of device memory failed: {e}")));
        }
        if let Err(e) = call!(cuMemMap(start, len, 0, handle, 0)) {
            call!(cuMemRelease(handle))?;
            call!(cuMemAddressFree(start, len))?;
            return Err(bad(format!("mapping {len} bytes at {start:#x} failed: {e}")));
        }
        // From here `release` undoes it all.
        done.push(Reservation { start, len, handle });
        let access = sys::CUmemAccessDesc {
            location: prop.location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        call!(cuMemSetAccess(start, len, &access, 1))
            .map_err(|e| bad(format!("granting access to {len} bytes at {start:#x} failed: {e}")))?;
    }
    Ok(())
}

impl Reservation {
    /// Unmaps, frees and unreserves the range (its GPU's context current). Errors are ignored: it
    /// runs while a replay is dropped.
    pub(crate) fn release(&self) {
        // SAFETY: the range and handle this reservation made, released once.
        unsafe {
            sys::cuMemUnmap(self.start, self.len);
            sys::cuMemRelease(self.handle);
            sys::cuMemAddressFree(self.start, self.len);
        }
    }
}
