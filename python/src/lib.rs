//! `recap._recap`, the native half of the `recap` Python package: archives opened and inspected,
//! replays on the CPU or a CUDA GPU, archives built from numpy arrays and PTX text.
//!
//! The key design decision: this module hands Python plain data (dicts, lists, numpy arrays) and
//! leaves the objects people see in a notebook (dataclasses with readable reprs, the `capture`
//! context manager) to the pure-Python package around it. Everything that decides something about
//! an archive — validation, the replay loop, dtype and shape fits, error messages — is the Rust
//! library's, reached through the same calls the `recap` command and the C API make, so Python
//! can never disagree with them. Errors are `recap.RecapError` carrying the library's message.

mod archive;
mod arrays;
mod device_array;
mod error;
mod from_arrays;
mod replay;
mod serve;

use pyo3::prelude::*;

/// The machine's CUDA driver (`libcuda.so.1`), found as the dynamic linker would, or None.
#[pyfunction]
fn system_driver() -> Option<std::path::PathBuf> {
    recap::system_driver::system_driver()
}

/// Gives the archive at `path` its element types in place (`recap::types::infer_file`), within
/// `seconds`; the report as JSON text. The GIL is released while the CPU replays.
#[pyfunction]
fn infer_types(py: Python<'_>, path: std::path::PathBuf, seconds: f64) -> PyResult<String> {
    let result =
        py.detach(|| recap::types::infer_file(&path, &path, shared::replay::ReplayOptions::default(), Some(seconds)));
    let (report, _) = result.map_err(error::recap_error)?;
    serde_json::to_string(&report).map_err(error::recap_error)
}

#[pymodule]
fn _recap(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RecapError", m.py().get_type::<error::RecapError>())?;
    m.add_class::<archive::Archive>()?;
    m.add_class::<replay::Replayer>()?;
    m.add_class::<from_arrays::Builder>()?;
    m.add_class::<from_arrays::Buffer>()?;
    m.add_function(wrap_pyfunction!(archive::open, m)?)?;
    m.add_function(wrap_pyfunction!(system_driver, m)?)?;
    m.add_function(wrap_pyfunction!(infer_types, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
