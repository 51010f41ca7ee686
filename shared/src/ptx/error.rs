//! The error of loading a PTX module.

/// A PTX module that failed to load: the line and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PTX line {line}: {message}")]
pub struct PtxError {
    pub line: u32,
    pub message: String,
}

impl PtxError {
    pub(crate) fn new(line: u32, message: String) -> PtxError {
        PtxError { line, message }
    }
}
