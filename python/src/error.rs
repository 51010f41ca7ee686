//! The one Python exception recap raises for its own errors, with the library's message.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(
    recap,
    RecapError,
    PyException,
    "An error from recap: a bad archive, a failed replay, input that does not fit a region."
);

/// A recap error as a Python exception; the message is the library's, unchanged.
pub fn recap_error(e: impl std::fmt::Display) -> PyErr {
    RecapError::new_err(e.to_string())
}
