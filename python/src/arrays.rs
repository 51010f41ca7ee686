//! Region bytes to numpy arrays and back: an array comes out with the region's dtype and shape
//! (`shared::npy`'s rules, the ones `.npy` files follow), and goes in only when it fits.

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use shared::archive::{DType, RegionView};
use shared::npy::{self, NpyHeader};

use crate::error::recap_error;

/// `bytes` as a numpy array of `dtype` in the shape `hints` give (one dimension when they do not
/// describe the size; bf16 as its raw `uint16` bits, as in `.npy` files).
pub fn to_numpy<'py>(py: Python<'py>, dtype: DType, hints: &[u64], bytes: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
    let shape = npy::region_shape(dtype, bytes.len() as u64, hints);
    let flat = PyArray1::from_vec(py, bytes);
    flat.call_method1("view", (npy::descr(dtype),))?.call_method1("reshape", (shape,))
}

/// The bytes of `value` for region `name`: a numpy array (or anything with `__array__`) of the
/// region's dtype and either its shape or its element count flat; a list or scalar is converted
/// to the region's dtype first.
pub fn region_bytes(value: &Bound<'_, PyAny>, name: &str, region: &RegionView<'_>) -> PyResult<Vec<u8>> {
    let py = value.py();
    let np = py.import("numpy")?;
    let array = if value.hasattr("dtype")? {
        np.call_method1("ascontiguousarray", (value,))?
    } else {
        np.call_method1("ascontiguousarray", (value, npy::descr(region.dtype)))?
    };
    let header = NpyHeader {
        descr: array.getattr("dtype")?.getattr("str")?.extract()?,
        fortran_order: false,
        shape: array.getattr("shape")?.extract()?,
    };
    npy::check_fit(&header, name, region.dtype, region.size, &region.shape)
        .map_err(|e| recap_error(format!("input {name}: {e}")))?;
    let bytes = array.call_method0("tobytes")?;
    Ok(bytes.cast::<PyBytes>()?.as_bytes().to_vec())
}
