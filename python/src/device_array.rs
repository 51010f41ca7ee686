//! Arrays in GPU memory that other libraries own (a torch tensor, a CuPy array, a Warp array), as
//! a device address, a size and a dtype, read from the two protocols those libraries share: the
//! `__cuda_array_interface__` dict (Numba's, version 2 or 3) and DLPack (`__dlpack__` with
//! `__dlpack_device__`). Only C-contiguous arrays of the region's dtype and shape (or its element
//! count, flat) are accepted: the copy is one block, device to device.

use std::ffi::c_void;

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use shared::archive::RegionView;
use shared::npy::{self, NpyHeader};

use crate::error::recap_error;

/// A block of device memory, and what keeps it alive while a replay copies to or from it.
pub struct DeviceArray {
    pub ptr: u64,
    pub bytes: u64,
    /// A stream the producer's writes may still be pending on (CAI v3); synchronised before a copy.
    pub stream: Option<u64>,
    /// For error messages: `torch.Tensor (__cuda_array_interface__)`.
    pub what: String,
    /// The array or the DLPack capsule: holding it keeps the memory alive.
    _keep: Py<PyAny>,
}

/// DLPack's `kDLCUDA` and `kDLCUDAManaged` device types.
const DL_CUDA: i32 = 2;
const DL_CUDA_MANAGED: i32 = 13;

/// `value` as device memory for region `name`, or `None` when it is not a GPU array.
pub fn of<'py>(value: &Bound<'py, PyAny>, name: &str, region: &RegionView<'_>) -> PyResult<Option<DeviceArray>> {
    let kind = value.get_type().qualname()?.to_string();
    if value.hasattr("__cuda_array_interface__")? {
        let cai = value.getattr("__cuda_array_interface__")?;
        let cai = cai.cast::<PyDict>()?;
        let get = |k: &str| -> PyResult<Bound<'py, PyAny>> {
            cai.get_item(k)?.ok_or_else(|| recap_error(format!("input {name}: __cuda_array_interface__ lacks {k:?}")))
        };
        let shape: Vec<u64> = get("shape")?.extract()?;
        let descr: String = get("typestr")?.extract()?;
        let (ptr, _readonly): (u64, bool) = get("data")?.extract()?;
        if let Some(strides) = cai.get_item("strides")?.filter(|s| !s.is_none()) {
            let strides: Vec<i64> = strides.extract()?;
            if !c_contiguous(&shape, &strides, item_size(&descr)) {
                return Err(recap_error(format!(
                    "input {name}: the {kind} is not C-contiguous (strides {strides:?}); pass .contiguous() or a copy"
                )));
            }
        }
        let stream = cai.get_item("stream")?.filter(|s| !s.is_none()).map(|s| s.extract::<u64>()).transpose()?;
        fit(name, region, descr, shape)?;
        return Ok(Some(DeviceArray {
            ptr,
            bytes: region.size,
            stream,
            what: format!("{kind} (__cuda_array_interface__)"),
            _keep: value.clone().unbind(),
        }));
    }
    if value.hasattr("__dlpack_device__")? && value.hasattr("__dlpack__")? {
        let (device_type, _id): (i32, i32) = value.call_method0("__dlpack_device__")?.extract()?;
        if device_type != DL_CUDA && device_type != DL_CUDA_MANAGED {
            return Ok(None);
        }
        let capsule = value.call_method0("__dlpack__")?;
        let cap = capsule.cast::<PyCapsule>()?;
        let ptr = cap.pointer_checked(Some(c"dltensor"))?;
        // SAFETY: a capsule named "dltensor" holds a DLManagedTensor (DLPack's ABI), alive while
        // the capsule is not consumed; it is kept, unconsumed, for as long as the copy needs it.
        let t = unsafe { &*(ptr.as_ptr() as *const DLTensor) };
        let shape = dims(t.shape, t.ndim);
        let descr = dl_descr(t.dtype).ok_or_else(|| {
            recap_error(format!(
                "input {name}: the {kind}'s DLPack dtype (code {}, {} bits, {} lanes) is not a plain number type",
                t.dtype.code, t.dtype.bits, t.dtype.lanes
            ))
        })?;
        if !t.strides.is_null() {
            let strides = dims(t.strides, t.ndim);
            if !c_contiguous(&shape.iter().map(|&d| d as u64).collect::<Vec<_>>(), &strides, 1) {
                return Err(recap_error(format!(
                    "input {name}: the {kind} is not C-contiguous; pass a contiguous copy"
                )));
            }
        }
        fit(name, region, descr, shape.iter().map(|&d| d as u64).collect())?;
        return Ok(Some(DeviceArray {
            ptr: t.data as u64 + t.byte_offset,
            bytes: region.size,
            stream: None,
            what: format!("{kind} (DLPack)"),
            _keep: capsule.unbind(),
        }));
    }
    Ok(None)
}

/// Whether an array of `descr` and `shape` fits region `name` (`shared::npy`'s rules).
pub fn fit(name: &str, region: &RegionView<'_>, descr: String, shape: Vec<u64>) -> PyResult<()> {
    let header = NpyHeader { descr, fortran_order: false, shape };
    npy::check_fit(&header, name, region.dtype, region.size, &region.shape)
        .map_err(|e| recap_error(format!("input {name}: {e}")))
}

/// Bytes per element of a numpy type string (`<f4` is 4); 1 when it cannot be told.
fn item_size(descr: &str) -> i64 {
    descr.trim_start_matches(['<', '>', '|', '=']).get(1..).and_then(|n| n.parse().ok()).unwrap_or(1)
}

/// Whether `strides` (in units where one element is `item`) are the C order of `shape`.
fn c_contiguous(shape: &[u64], strides: &[i64], item: i64) -> bool {
    let mut want = item;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d > 1 && s != want {
            return false;
        }
        want *= d as i64;
    }
    true
}

/// DLPack's tensor header (`dlpack.h`, ABI version 0.8 onward: `DLManagedTensor`'s first member).
#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: [i32; 2],
    ndim: i32,
    dtype: DLDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

fn dims(p: *const i64, n: i32) -> Vec<i64> {
    if p.is_null() || n <= 0 {
        return Vec::new();
    }
    // SAFETY: DLPack gives `ndim` entries behind a non-NULL shape or strides pointer.
    unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec()
}

/// numpy's type string for a DLPack dtype (bfloat16 as its raw bits, as `.npy` files have it).
fn dl_descr(t: DLDataType) -> Option<String> {
    let kind = match (t.code, t.lanes) {
        (0, 1) => 'i',
        (1, 1) => 'u',
        (2, 1) => 'f',
        (4, 1) if t.bits == 16 => return Some("<u2".into()),
        _ => return None,
    };
    Some(format!("<{kind}{}", t.bits / 8))
}
