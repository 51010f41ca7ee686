//! Tensor maps (TMA descriptors) a captured launch passed as parameters, encoded again against the
//! replay's own regions (shared::tensor_map says why the archive keeps encode arguments rather than
//! bytes). Each map is encoded once at load, with the region's replay address plus the captured
//! offset, and its 128 bytes written over the launch's zeroed parameter bytes.
//!
//! The encode entry points are resolved through `cuGetProcAddress` with their arguments as plain
//! integers: the archive's values pass to the driver unchanged, and the driver, not this crate,
//! judges them (a value it refuses fails the load with the driver's error).

use std::collections::HashMap;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use shared::archive::{Archive, MetadataError};
use shared::tensor_map::{Layout, TensorMapUse, META_KEY, SIZE};

use crate::driver::{check, DriverError};
use crate::sys;

type EncodeTiled = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    *mut c_void,
    *const u64,
    *const u64,
    *const u32,
    *const u32,
    u32,
    u32,
    u32,
    u32,
) -> sys::CUresult;

type EncodeIm2col = unsafe extern "C" fn(
    *mut c_void,
    u32,
    u32,
    *mut c_void,
    *const u64,
    *const u64,
    *const i32,
    *const i32,
    u32,
    u32,
    *const u32,
    u32,
    u32,
    u32,
    u32,
) -> sys::CUresult;

/// A `CUtensorMap`: 128 bytes, 64-byte aligned, as the driver writes it.
#[repr(C, align(64))]
struct Map([u8; SIZE]);

/// The driver's entry point `name` (CUDA 12.0 semantics), or why there is none.
fn entry(name: &'static CStr) -> Result<usize, DriverError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    let mut status = sys::CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
    // SAFETY: a NUL-terminated name and out-parameters.
    let r = unsafe { sys::cuGetProcAddress_v2(name.as_ptr(), &mut p, 12000, 0, &mut status) };
    check(r, "cuGetProcAddress_v2")?;
    if p.is_null() {
        check(sys::CUresult::CUDA_ERROR_NOT_FOUND, "cuGetProcAddress_v2")?;
    }
    Ok(p as usize)
}

/// The archive's tensor map parameters, by launch op: `(parameter offset, use)`. An archive
/// without the metadata has none; metadata that does not read is an error.
pub(crate) fn uses(archive: &Archive) -> Result<HashMap<u32, Vec<TensorMapUse>>, MetadataError> {
    let Some(json) = archive.meta_value(META_KEY) else { return Ok(HashMap::new()) };
    let list: Vec<TensorMapUse> = serde_json::from_str(json).map_err(|e| MetadataError::invalid(META_KEY, e))?;
    let mut by_op: HashMap<u32, Vec<TensorMapUse>> = HashMap::new();
    for u in list {
        if !u.encode.is_consistent() {
            let reason = format!("op {}: the encode arguments do not agree with rank {}", u.op, u.encode.rank);
            return Err(MetadataError::invalid(META_KEY, reason));
        }
        by_op.entry(u.op).or_default().push(u);
    }
    Ok(by_op)
}

/// The encode entry point of `layout`: its name and its address, resolved once.
fn encoder(layout: &Layout) -> (&'static CStr, Result<usize, DriverError>) {
    static TILED: OnceLock<Result<usize, DriverError>> = OnceLock::new();
    static IM2COL: OnceLock<Result<usize, DriverError>> = OnceLock::new();
    let (name, cell) = match layout {
        Layout::Tiled { .. } => (c"cuTensorMapEncodeTiled", &TILED),
        Layout::Im2col { .. } => (c"cuTensorMapEncodeIm2col", &IM2COL),
    };
    (name, cell.get_or_init(|| entry(name)).clone())
}

/// Encodes `u`'s map for the global address `addr`.
pub(crate) fn encode(u: &TensorMapUse, addr: u64) -> Result<[u8; SIZE], DriverError> {
    let e = &u.encode;
    let (name, f) = encoder(&e.layout);
    let f = f?;
    let mut map = Map([0; SIZE]);
    let out = map.0.as_mut_ptr() as *mut c_void;
    // Both encoders take the map, the tensor and its strides first and the traversal and fill
    // options last; only the layout's own arguments in between differ.
    macro_rules! call {
        ($ty:ty, $($layout_args:expr),+) => {{
            let f: $ty = std::mem::transmute(f);
            f(
                out,
                e.dtype,
                e.rank,
                addr as *mut c_void,
                e.global_dim.as_ptr(),
                e.global_strides.as_ptr(),
                $($layout_args,)+
                e.element_strides.as_ptr(),
                e.interleave,
                e.swizzle,
                e.l2_promotion,
                e.oob_fill,
            )
        }};
    }
    // SAFETY: each entry point has the signature cuda.h gives it; the arrays have the lengths the
    // rank asks for (`uses` checked them).
    let r = unsafe {
        match &e.layout {
            Layout::Tiled { box_dim } => call!(EncodeTiled, box_dim.as_ptr()),
            Layout::Im2col { lower_corner, upper_corner, channels_per_pixel, pixels_per_column } => call!(
                EncodeIm2col,
                lower_corner.as_ptr(),
                upper_corner.as_ptr(),
                *channels_per_pixel,
                *pixels_per_column
            ),
        }
    };
    check(r, name.to_str().unwrap_or("cuTensorMapEncode"))?;
    Ok(map.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::archive::{ArchiveWriter, DType, MemsetOp, RegionDecl};

    fn archive_with(tensor_maps: Option<&str>) -> Vec<u8> {
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
        let x = w.add_region(RegionDecl::new("x", 16, DType::F32)).unwrap();
        w.memset(MemsetOp { region: x, offset: 0, len: 16, width: 4, pattern: 0 }).unwrap();
        if let Some(json) = tensor_maps {
            w.set_meta(META_KEY, json);
        }
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn tensor_map_metadata_that_does_not_read_is_refused_under_its_key() {
        let without = archive_with(None);
        assert!(uses(&Archive::open(&without).unwrap()).unwrap().is_empty());
        for bad in ["not json", "[{\"op\": 0}]"] {
            let bytes = archive_with(Some(bad));
            let e = uses(&Archive::open(&bytes).unwrap()).unwrap_err();
            assert!(matches!(e, MetadataError::Invalid { key: META_KEY, .. }), "{e}");
            assert!(e.to_string().starts_with("archive metadata capture.tensor_maps: "), "{e}");
        }
    }
}
