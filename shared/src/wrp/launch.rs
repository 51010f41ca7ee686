//! A kernel launch record, in the two layouts Warp has written: from format 10 each argument's
//! bytes as the kernel takes them with relocations for the pointers inside them, and in format 3
//! one fixed record per argument (an array as its region, offset, shape and strides; a scalar's
//! bytes inline), whose argument bytes this reader builds as the later formats store them, so
//! the importer sees one model.

use std::borrow::Cow;

use super::formats::{Format, LaunchLayout};
use super::parse::Reader;
use super::{Launch, Param, Pointer, PointerTarget, WrpError};

/// Bytes of a format 3 argument record.
const ARGUMENT_RECORD: usize = 88;
/// Bytes of Warp's `array_t` as a kernel takes it: data and grad pointers, shape and strides as
/// four `i32`s each, `ndim` and flags as `u16`s, padded to 8.
const ARRAY_BYTES: usize = 56;
/// The most bytes of a scalar a format 3 record holds inline (its shape and strides words).
const INLINE_SCALAR: usize = 64;

/// The fields every layout shares, read up to the strings.
struct Head {
    launch: Launch<'static>,
    key_len: usize,
    hash_len: usize,
    params: usize,
    /// Format 3: handle offsets after the argument records; later: padding.
    extra: u16,
}

/// A launch record after its 8-byte op header.
pub(super) fn launch<'a>(r: &mut Reader<'a>, format: Format) -> Result<Launch<'a>, WrpError> {
    let head = head(r, format)?;
    match format.launch() {
        LaunchLayout::ArgumentRecords => argument_records(r, head),
        LaunchLayout::Blobs { .. } => blobs(r, head),
    }
}

fn head(r: &mut Reader<'_>, format: Format) -> Result<Head, WrpError> {
    let shape_at = r.at();
    let mut shape = [0u32; 4];
    for s in &mut shape {
        *s = r.u32("the launch shape")?;
    }
    let ndim = r.i32("the launch's dimensions")?;
    if !(1..=4).contains(&ndim) {
        return r.error(format!("a launch of {ndim} dimensions (1 to 4)"));
    }
    if format.signed_shape() {
        if let Some(d) = shape[..ndim as usize].iter().position(|&s| s > i32::MAX as u32) {
            return Err(WrpError {
                offset: shape_at + 4 * d as u64,
                what: format!(
                    "dimension {d} of the launch shape is negative, which format {} cannot hold",
                    format.version
                ),
            });
        }
    }
    let size = r.u64("the launch size")?;
    let dim = r.u64("the launch's thread count")?;
    let max_blocks = r.i32("max_blocks")?.max(0) as u32;
    let block_dim = r.i32("block_dim")?.max(0) as u32;
    let smem_bytes = r.i32("the shared memory size")?.max(0) as u32;
    let (grid_stride, forward) = match format.launch() {
        LaunchLayout::Blobs { fixed: 80 } => {
            let grid_stride = r.i32("grid_stride")? != 0;
            let forward = r.u8("is_forward")? != 0;
            let _cluster = r.u8("cluster_dim")?;
            r.skip(2, "padding")?;
            (grid_stride, forward)
        }
        _ => {
            let forward = r.u8("is_forward")? != 0;
            r.skip(3, "padding")?;
            (false, forward)
        }
    };
    let key_len = r.u16("the kernel key's length")? as usize;
    let hash_len = r.u16("the module hash's length")? as usize;
    let params = r.u16("the parameter count")? as usize;
    let extra = r.u16("the handle offset count")?;
    let launch = Launch {
        shape,
        ndim: ndim as u32,
        size,
        dim,
        max_blocks,
        block_dim,
        smem_bytes,
        grid_stride,
        forward,
        kernel_key: String::new(),
        module_hash: String::new(),
        params: Vec::new(),
        adjoints: Vec::new(),
    };
    Ok(Head { launch, key_len, hash_len, params, extra })
}

/// The kernel key and module hash that follow the fixed part.
fn names(r: &mut Reader<'_>, head: &Head) -> Result<(String, String), WrpError> {
    let key = r.take(head.key_len, "the kernel key")?;
    let kernel_key = r.utf8(key, "the kernel key")?;
    let hash = r.take(head.hash_len, "the module hash")?;
    let module_hash = r.utf8(hash, "the module hash")?;
    Ok((kernel_key, module_hash))
}

/// Format 3's arguments: one record each, an array's `array_t` built from its fields (data at
/// (region, offset), no gradient), a scalar's bytes taken from where the record inlines them.
fn argument_records<'a>(r: &mut Reader<'a>, head: Head) -> Result<Launch<'a>, WrpError> {
    if head.extra != 0 {
        return r.error(format!("{} handle offsets, which Warp 1.13 never writes", head.extra));
    }
    if !head.launch.forward {
        return r.error("a backward launch, whose adjoint arguments format 3 does not record");
    }
    let (kernel_key, module_hash) = names(r, &head)?;
    let mut params = Vec::new();
    for i in 0..head.params {
        let at = r.at();
        let rec = r.take(ARGUMENT_RECORD, "an argument record")?;
        let mut f = Reader::new(rec, at);
        let is_array = f.u8("is_array")?;
        let ndim = f.u8("an array's dimensions")?;
        let index = f.u16("a parameter's index")?;
        let region = f.i32("an array's region")?;
        let offset = f.u64("an array's offset or a scalar's size")?;
        if index as usize != i + 1 {
            return Err(WrpError {
                offset: at + 2,
                what: format!("parameter {i} says it is parameter {}", index as i64 - 1),
            });
        }
        let payload = &rec[16..16 + INLINE_SCALAR];
        let param = match is_array {
            1 => {
                let mut value = vec![0u8; ARRAY_BYTES];
                // Warp 1.13 copies the first `ndim` extents and strides, each cut to an `i32`.
                for d in 0..(ndim as usize).min(4) {
                    value[16 + 4 * d..20 + 4 * d].copy_from_slice(&payload[8 * d..8 * d + 4]);
                    value[32 + 4 * d..36 + 4 * d].copy_from_slice(&payload[32 + 8 * d..32 + 8 * d + 4]);
                }
                value[48..50].copy_from_slice(&u16::from(ndim).to_le_bytes());
                let data = if region < 0 { PointerTarget::Null } else { PointerTarget::Data { region, offset } };
                Param {
                    value: Cow::Owned(value),
                    align: 8,
                    pointers: vec![Pointer { at: 0, target: data }, Pointer { at: 8, target: PointerTarget::Null }],
                }
            }
            0 => {
                let Some(size) = usize::try_from(offset).ok().filter(|&s| s <= INLINE_SCALAR) else {
                    return Err(WrpError {
                        offset: at + 8,
                        what: format!(
                            "parameter {i}: a scalar of {offset} bytes (a record holds at most {INLINE_SCALAR})"
                        ),
                    });
                };
                let align = if size >= 8 {
                    8
                } else if size >= 4 {
                    4
                } else {
                    1
                };
                Param { value: Cow::Borrowed(&payload[..size]), align, pointers: Vec::new() }
            }
            other => return Err(WrpError { offset: at, what: format!("parameter {i}: is_array {other} (0 or 1)") }),
        };
        params.push(param);
    }
    if r.remaining() != 0 {
        return r.error(format!("{} bytes after the launch record", r.remaining()));
    }
    Ok(Launch { kernel_key, module_hash, params, ..head.launch })
}

/// Formats 10 to 18: argument bytes with relocations, forward arguments then adjoints.
fn blobs<'a>(r: &mut Reader<'a>, head: Head) -> Result<Launch<'a>, WrpError> {
    let pointer_count = r.u32("the pointer count")? as usize;
    let value_bytes = r.u32("the argument bytes' size")? as usize;
    let (kernel_key, module_hash) = names(r, &head)?;
    let head_params = head.params;
    let forward = head.launch.forward;
    let binding_count = if forward { head_params } else { head_params * 2 };
    let mut records = Vec::new();
    for _ in 0..binding_count {
        let at = r.at();
        let index = r.u16("a parameter's index")?;
        let pointers = r.u16("a parameter's pointer count")? as usize;
        let offset = r.u32("a parameter's offset")? as usize;
        let size = r.u32("a parameter's size")? as usize;
        let align = r.u32("a parameter's alignment")?;
        records.push((at, index, pointers, offset, size, align));
    }
    let mut pointer_records = Vec::new();
    for _ in 0..pointer_count {
        let at = r.at();
        let value_offset = r.u32("a pointer's place")?;
        let region = r.i32("a pointer's region")?;
        let region_offset = r.u64("a pointer's offset")?;
        let kind = r.u8("a pointer's kind")?;
        r.skip(7, "padding")?;
        pointer_records.push((at, value_offset, region, region_offset, kind));
    }
    let values_at = r.at();
    let values = r.take(value_bytes, "the argument bytes")?;
    if r.remaining() != 0 {
        return r.error(format!("{} bytes after the launch record", r.remaining()));
    }
    if records.iter().map(|rec| rec.2).sum::<usize>() != pointer_count {
        return r
            .error(format!("the parameters claim a different number of pointers than the {pointer_count} recorded"));
    }
    let mut next_pointer = pointer_records.into_iter();
    let mut params = Vec::new();
    for (i, (at, index, pointers, offset, size, align)) in records.into_iter().enumerate() {
        if index as usize != i + 1 {
            return Err(WrpError {
                offset: at,
                what: format!("parameter {i} says it is parameter {}", index as i64 - 1),
            });
        }
        let Some(value) = offset.checked_add(size).and_then(|end| values.get(offset..end)) else {
            return Err(WrpError {
                offset: at,
                what: format!(
                    "parameter {i}'s {size} bytes at {offset} lie outside the {} argument bytes (at byte {values_at})",
                    values.len()
                ),
            });
        };
        let mut list = Vec::new();
        for (at, value_offset, region, region_offset, kind) in next_pointer.by_ref().take(pointers) {
            if value_offset as usize + 8 > size {
                return Err(WrpError {
                    offset: at,
                    what: format!("parameter {i}: a pointer at {value_offset} of its {size} bytes"),
                });
            }
            let target = match kind {
                1 => PointerTarget::Data { region, offset: region_offset },
                2 => PointerTarget::Handle,
                3 => PointerTarget::Null,
                other => {
                    return Err(WrpError {
                        offset: at + 16,
                        what: format!("parameter {i}: pointer kind {other} (1 to 3)"),
                    })
                }
            };
            list.push(Pointer { at: value_offset, target });
        }
        params.push(Param { value: Cow::Borrowed(value), align, pointers: list });
    }
    let adjoints = if forward { Vec::new() } else { params.split_off(head_params) };
    Ok(Launch { kernel_key, module_hash, params, adjoints, ..head.launch })
}
