//! The rules a well-formed archive obeys, on typed values, shared by the writer (which refuses to
//! write a breaking record) and the reader (which refuses to open one). Each rule returns the byte
//! offset, within the record, of the field at fault, so the reader can point at it in the file.

use super::model::*;

/// A rule's complaint: the field's offset within its record, and why.
pub(crate) type Broken = (usize, String);

/// How deep while/if bodies may nest. Consumers may recurse into bodies; this bounds their stack.
pub const MAX_NESTING: usize = 64;

/// CUDA's limit on the size of a kernel's parameter buffer (Volta and later, CUDA 12.1 and later).
pub(crate) const MAX_PARAM_BYTES: u64 = 32 * 1024;

pub(crate) fn launch_dims(grid: [u32; 3], block: [u32; 3]) -> Result<(), Broken> {
    if grid.contains(&0) {
        return Err((8, format!("empty grid {grid:?}")));
    }
    if block.contains(&0) {
        return Err((20, format!("empty block {block:?}")));
    }
    // Saturating: three u32 factors overflow u64, and a wrapped product could pass for a small block.
    if block.iter().fold(1u64, |n, &b| n.saturating_mul(b as u64)) > 1024 {
        return Err((20, format!("block {block:?} has more than 1024 threads")));
    }
    Ok(())
}

/// `[offset, offset + len)` lies within a region of `size` bytes.
pub(crate) fn range(field: usize, what: &str, offset: u64, len: u64, size: u64) -> Result<(), Broken> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err((
            field,
            format!("{what} bytes {offset}..{} fall outside its region of {size} bytes", offset.saturating_add(len)),
        )),
    }
}

/// A device index names one of the archive's `count` logical devices.
pub(crate) fn device(field: usize, what: &str, device: DeviceId, count: u32) -> Result<(), Broken> {
    if device >= count {
        let has = if count == 1 { "1 device".to_string() } else { format!("{count} devices") };
        return Err((field, format!("{what} is on device {device}, but the archive has {has}")));
    }
    Ok(())
}

/// An op (or a pointer stored in a region) reaches only memory of its own device: kernels, fills
/// and conditions act on their device's memory, and bytes move between devices only by copies.
pub(crate) fn same_device(
    field: usize,
    what: &str,
    region: RegionId,
    region_device: DeviceId,
    device: DeviceId,
) -> Result<(), Broken> {
    if region_device != device {
        return Err((field, format!("{what} region {region} is on device {region_device}, not on device {device} (only a copy moves bytes between devices)")));
    }
    Ok(())
}

pub(crate) fn copy(c: &CopyOp, src_size: u64, dst_size: u64) -> Result<(), Broken> {
    range(16, "copy source", c.src_offset, c.len, src_size)?;
    range(24, "copy destination", c.dst_offset, c.len, dst_size)?;
    if c.src == c.dst && c.src_offset < c.dst_offset + c.len && c.dst_offset < c.src_offset + c.len {
        return Err((16, format!("copy within region {} overlaps itself", c.src)));
    }
    Ok(())
}

pub(crate) fn memset(m: &MemsetOp, size: u64) -> Result<(), Broken> {
    if ![1, 2, 4, 8].contains(&m.width) {
        return Err((8, format!("memset pattern width {} is not 1, 2, 4 or 8", m.width)));
    }
    let w = m.width as u64;
    if !m.offset.is_multiple_of(w) || !m.len.is_multiple_of(w) {
        return Err((16, format!("memset of {}+{} bytes is not aligned to its {w}-byte pattern", m.offset, m.len)));
    }
    if w < 8 && m.pattern >> (8 * w) != 0 {
        return Err((32, format!("memset pattern {:#x} is wider than {w} bytes", m.pattern)));
    }
    range(16, "memset", m.offset, m.len, size)
}

pub(crate) fn condition(c: &Condition, size: u64) -> Result<(), Broken> {
    if !c.offset.is_multiple_of(4) {
        return Err((16, format!("condition word at offset {} is not 4-byte aligned", c.offset)));
    }
    range(16, "condition word", c.offset, 4, size)
}

/// A kernel's parameters: power-of-two alignment, aligned offsets, in order and not overlapping,
/// within CUDA's parameter limit. Returns the index of the parameter at fault with the complaint.
pub(crate) fn params(params: &[ParamDecl]) -> Result<(), (usize, Broken)> {
    let mut end = 0u64;
    for (i, p) in params.iter().enumerate() {
        if !p.align.is_power_of_two() || p.offset % p.align != 0 {
            return Err((
                i,
                (12, format!("parameter {} at offset {} has bad alignment {}", p.name, p.offset, p.align)),
            ));
        }
        if (p.offset as u64) < end {
            return Err((i, (4, format!("parameter {} at offset {} overlaps the one before it", p.name, p.offset))));
        }
        end = p.offset as u64 + p.size as u64;
        if end > MAX_PARAM_BYTES {
            return Err((
                i,
                (4, format!("parameter {} ends at byte {end}, past the {MAX_PARAM_BYTES}-byte limit", p.name)),
            ));
        }
        if p.kind == ParamKind::Pointer && p.size != 8 {
            return Err((i, (8, format!("pointer parameter {} is {} bytes, not 8", p.name, p.size))));
        }
    }
    Ok(())
}

/// A relocation's 8 bytes lie within its owner and its target offset within (or one past) its target.
pub(crate) fn reloc(r: &Reloc, owner_size: u64, target_size: u64) -> Result<(), Broken> {
    if r.offset.checked_add(8).is_none_or(|e| e > owner_size) {
        return Err((8, format!("pointer at offset {} runs past its owner's {owner_size} bytes", r.offset)));
    }
    if r.target_offset > target_size {
        return Err((24, format!("points {} bytes into region {} of {target_size} bytes", r.target_offset, r.target)));
    }
    Ok(())
}

pub(crate) fn region(shape: &[u64], align: u32) -> Result<(), Broken> {
    if !align.is_power_of_two() {
        return Err((12, format!("alignment {align} is not a power of two")));
    }
    if shape.len() > 4 {
        return Err((24, format!("{} dimensions; at most 4", shape.len())));
    }
    Ok(())
}

pub(crate) fn tolerance(t: &Tolerance) -> Result<(), Broken> {
    let ok = match *t {
        Tolerance::Exact => true,
        Tolerance::Close { rtol, atol } => rtol.is_finite() && atol.is_finite() && rtol >= 0.0 && atol >= 0.0,
        Tolerance::MismatchFraction { max_fraction } => (0.0..=1.0).contains(&max_fraction),
    };
    if ok {
        Ok(())
    } else {
        Err((128, format!("invalid tolerance {t:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_too_large_for_u64_is_refused() {
        assert!(launch_dims([1; 3], [32, 32, 1]).is_ok());
        assert!(launch_dims([1; 3], [u32::MAX; 3]).is_err());
        // 2^64 threads: a wrapping product would call this an empty block.
        assert!(launch_dims([1; 3], [1 << 22, 1 << 22, 1 << 20]).is_err());
    }
}
