//! [`CudaError`]: everything that can go wrong loading or replaying on a GPU. Its own file so that
//! the layers below the replay (placed regions, module variables) can name it without importing
//! the replay that uses them.

use shared::archive::{FormatError, MetadataError, OpId};

use crate::driver::{DriverError, OpenError};

/// Everything that can go wrong loading or replaying on a GPU.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Driver(#[from] DriverError),
    #[error("archive: {0}")]
    Format(#[from] FormatError),
    /// Archive metadata the replay cannot follow (placement, launch attributes, tensor maps).
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("module {module} did not load: {error}{}", if log.is_empty() { String::new() } else { format!("\nJIT log:\n{log}") })]
    Jit { module: String, error: DriverError, log: String },
    #[error("kernel {kernel} of module {module}: {error}")]
    Kernel { module: String, kernel: String, error: DriverError },
    #[error("op {op} ({label}) failed: {error}")]
    Op { op: OpId, label: String, error: DriverError },
    #[error("replay faulted on {device}{}: {error}; {}", match op { Some((id, label)) => format!(" at op {id} ({label})"), None => String::new() }, match lost { None => "the device was reset and is ready for the next replay".to_string(), Some(why) => format!("the driver keeps the error for this process ({why}), so the next replay on this device must run in a new process") })]
    Fault { device: String, op: Option<(OpId, String)>, error: DriverError, lost: Option<String> },
    #[error("the device was reset after a fault since this replay was loaded: load the archive again")]
    Stale,
    #[error("{0}")]
    Invalid(String),
}

impl CudaError {
    pub(crate) fn driver(&self) -> Option<&DriverError> {
        match self {
            CudaError::Driver(e) | CudaError::Op { error: e, .. } | CudaError::Fault { error: e, .. } => Some(e),
            CudaError::Jit { error, .. } | CudaError::Kernel { error, .. } => Some(error),
            _ => None,
        }
    }

    /// Whether the error faulted the device (the context had to be reset).
    pub fn is_fault(&self) -> bool {
        matches!(self, CudaError::Fault { .. })
    }
}
