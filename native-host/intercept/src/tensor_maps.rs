//! Tensor maps (TMA descriptors): `cuTensorMapEncodeTiled`, `cuTensorMapEncodeIm2col` and
//! `cuTensorMapReplaceAddress` recorded, so a launch parameter that is one of them can be kept as
//! what it is (shared::tensor_map says how the archive keeps it).
//!
//! A map is known by its 128 bytes: the program may copy it anywhere (Triton packs it into the
//! launch's parameters), and its bytes are what a launch passes. So every encode the driver
//! accepts files the bytes it produced with the encode's arguments and the global address; a
//! launch parameter of 128 bytes equal to a filed map is that map. Its bytes are not searched for
//! pointers (the address inside is the driver's encoding, not a plain word) and become zeros in
//! the archive.

use std::collections::HashMap;
use std::ffi::c_void;

use shared::tensor_map::{Encode, Layout, SIZE};

use crate::hooks::{guarded, then, Call};
use crate::real::Slot;
use crate::record::state;
use crate::sys::*;

/// A filed map: its global address and how it was encoded.
#[derive(Clone, Debug)]
pub struct Filed {
    pub global: u64,
    pub encode: Encode,
}

#[derive(Default)]
pub struct TensorMaps {
    by_bytes: HashMap<[u8; SIZE], Filed>,
}

impl TensorMaps {
    /// The map whose bytes are `bytes`, if it is one.
    pub fn find(&self, bytes: &[u8]) -> Option<&Filed> {
        let key: &[u8; SIZE] = bytes.try_into().ok()?;
        self.by_bytes.get(key)
    }

    pub fn is_empty(&self) -> bool {
        self.by_bytes.is_empty()
    }

    fn file(&mut self, bytes: [u8; SIZE], filed: Filed) {
        self.by_bytes.insert(bytes, filed);
    }
}

/// The map's 128 bytes as the driver wrote them.
///
/// # Safety
/// `map` points to a `CUtensorMap`.
unsafe fn map_bytes(map: *const c_void) -> Option<[u8; SIZE]> {
    // SAFETY: the caller's contract.
    (!map.is_null()).then(|| unsafe { *(map as *const [u8; SIZE]) })
}

/// `n` elements of a C array, or none for null.
///
/// # Safety
/// `p` is null or has `n` readable elements.
unsafe fn array<T: Copy>(p: *const T, n: usize) -> Vec<T> {
    if p.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
}

/// Files `encode` for the map at `map` once the driver has filled it.
unsafe fn encoded(call: Call, map: *mut c_void, global: *mut c_void, encode: Option<Encode>) -> CUresult {
    then(call, || {
        // SAFETY: the driver just filled the map.
        if let (Some(bytes), Some(encode)) = (unsafe { map_bytes(map) }, encode) {
            state().tensor_maps.file(bytes, Filed { global: global as u64, encode });
        }
    })
}

/// The arrays of an encode call, read when the rank is one the driver takes.
#[expect(clippy::too_many_arguments, reason = "cuTensorMapEncode*'s own arguments, as the driver takes them")]
unsafe fn encode_of(
    dtype: u32,
    rank: u32,
    dims: *const u64,
    strides: *const u64,
    element_strides: *const u32,
    interleave: u32,
    swizzle: u32,
    l2_promotion: u32,
    oob_fill: u32,
    layout: impl FnOnce(usize) -> Layout,
) -> Option<Encode> {
    let r = rank as usize;
    if !(1..=5).contains(&r) {
        return None;
    }
    // SAFETY: the arrays have the lengths the driver API gives them for this rank.
    let encode = unsafe {
        Encode {
            dtype,
            rank,
            global_dim: array(dims, r),
            global_strides: array(strides, r - 1),
            element_strides: array(element_strides, r),
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
            layout: layout(r),
        }
    };
    encode.is_consistent().then_some(encode)
}

hook! {
    [cuTensorMapEncodeTiled](map: *mut c_void, dtype: u32, rank: u32, global: *mut c_void, dims: *const u64, strides: *const u64, box_dim: *const u32, element_strides: *const u32, interleave: u32, swizzle: u32, l2: u32, oob: u32) =>
        |call: Call, map, dtype, rank, global, dims, strides, box_dim: *const u32, es, il, sw, l2, oob| {
            let encode = encode_of(dtype, rank, dims, strides, es, il, sw, l2, oob, |r| Layout::Tiled { box_dim: array(box_dim, r) });
            encoded(call, map, global, encode)
        };
    [cuTensorMapEncodeIm2col](map: *mut c_void, dtype: u32, rank: u32, global: *mut c_void, dims: *const u64, strides: *const u64, lower: *const i32, upper: *const i32, channels: u32, pixels: u32, element_strides: *const u32, interleave: u32, swizzle: u32, l2: u32, oob: u32) =>
        |call: Call, map, dtype, rank, global, dims, strides, lower: *const i32, upper: *const i32, channels, pixels, es, il, sw, l2, oob| {
            let encode = encode_of(dtype, rank, dims, strides, es, il, sw, l2, oob, |r| Layout::Im2col {
                lower_corner: array(lower, r.saturating_sub(2)),
                upper_corner: array(upper, r.saturating_sub(2)),
                channels_per_pixel: channels,
                pixels_per_column: pixels,
            });
            encoded(call, map, global, encode)
        };
    [cuTensorMapReplaceAddress](map: *mut c_void, global: *mut c_void) =>
        |call: Call, map: *mut c_void, global: *mut c_void| {
            let before = map_bytes(map);
            then(call, || {
                let mut st = state();
                let old = before.and_then(|b| st.tensor_maps.find(&b).cloned());
                match (old, map_bytes(map)) {
                    (Some(old), Some(bytes)) => st.tensor_maps.file(bytes, Filed { global: global as u64, encode: old.encode }),
                    _ => st.report.note("cuTensorMapReplaceAddress on a tensor map recap did not see encoded"),
                }
            })
        };
}
