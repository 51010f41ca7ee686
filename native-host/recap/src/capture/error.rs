//! Why a capture API call failed ([`CaptureError`]), keeping the error of the layer below (the
//! CUDA driver, the PTX loader, the executor, the archive writer) as its source, so a caller can
//! match on it and walk `source()` chains; the message says where, the source what.

use shared::archive::{FormatError, WriteError};
use shared::ptx::signature::SignatureError;
use shared::ptx::{ExecError, MemError, PtxError};

use crate::cuda::{CudaError, DriverError, LaunchError, OpenError};
use crate::device::{DeviceSpec, DeviceSpecError};

/// Why a capture API call failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("no CUDA driver library (libcuda) on this machine; use the CPU device instead")]
    NoCudaDriver,
    /// Boxed, as are the other sources below: driver and executor errors are large.
    #[error("CUDA device {ordinal}: {source}")]
    Cuda { ordinal: usize, source: Box<CudaFailure> },
    #[error("NVRTC is not installed (no libnvrtc on the library path); load PTX text instead")]
    NoNvrtc,
    #[error("compiling CUDA C module {module} with NVRTC failed: {log}")]
    Nvrtc { module: String, log: String },
    #[error("PTX module {module}: {source}")]
    Ptx { module: String, source: Box<PtxFailure> },
    #[error("kernel {kernel}: {source}")]
    Launch { kernel: String, source: Box<LaunchFailure> },
    #[error("CPU device: {0}")]
    Cpu(#[from] MemError),
    /// A graph's replay on the CPU (`shared::replay`), boxed: the error is large.
    #[error("replay on the CPU: {0}")]
    Replay(Box<shared::replay::ReplayError>),
    /// A device spelling that names no device.
    #[error(transparent)]
    DeviceSpec(#[from] DeviceSpecError),
    /// A CPU engine named in a device spelling: the capture API's CPU device runs its own.
    #[error("device {0}: the capture API's CPU device chooses its engine itself; use cpu")]
    CpuEngine(DeviceSpec),
    #[error("{0}")]
    Usage(String),
    /// The archive file being written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("writing the archive: {0}")]
    Write(#[source] WriteError),
    /// An archive's module text, or the archive a graph recorded, that does not read back.
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("binding {name}: {message}")]
    Binding { name: String, message: String },
    /// An archive file that could not be written or loaded.
    #[error("archive {path}: {source}")]
    Archive { path: String, source: Box<ArchiveFailure> },
}

/// Why an archive file could not be written or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveFailure {
    #[error("cannot create: {0}")]
    Create(#[source] std::io::Error),
    #[error("cannot open: {0}")]
    Open(#[source] std::io::Error),
    /// Its bytes are not a valid archive.
    #[error(transparent)]
    Format(FormatError),
    /// Writing it, or loading what it holds on the device.
    #[error(transparent)]
    Capture(CaptureError),
}

impl From<shared::replay::ReplayError> for CaptureError {
    fn from(e: shared::replay::ReplayError) -> Self {
        CaptureError::Replay(Box::new(e))
    }
}

/// What failed on a CUDA device.
#[derive(Debug, thiserror::Error)]
pub enum CudaFailure {
    /// Opening the device (no such GPU, or a driver that refuses).
    #[error(transparent)]
    Open(OpenError),
    /// A driver call: `what` the capture API was doing.
    #[error("{what}: {source}")]
    Driver { what: String, source: DriverError },
    /// A graph's replay on the GPU (`cuda/`).
    #[error(transparent)]
    Replay(CudaError),
}

/// Why a module's PTX does not load.
#[derive(Debug, thiserror::Error)]
pub enum PtxFailure {
    /// The CPU executor refuses it.
    #[error(transparent)]
    Parse(#[from] PtxError),
    /// An `.entry` declaration that gives no parameter layout.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    #[error("PTX text contains a NUL byte")]
    Nul,
    #[error("the CUDA JIT refused it ({source}): {log}")]
    Jit { source: DriverError, log: String },
    /// `entries` lists the module's kernels, comma-separated.
    #[error("no entry named {entry}; it has {entries}")]
    NoEntry { entry: String, entries: String },
}

/// Why a kernel launch failed, on the device it ran on.
#[derive(Debug, thiserror::Error)]
pub enum LaunchFailure {
    #[error(transparent)]
    Cpu(#[from] ExecError),
    #[error(transparent)]
    Cuda(#[from] LaunchError),
}
