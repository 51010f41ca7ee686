//! recap's library: the capture API, imports of recorded cases and NVIDIA Warp captures,
//! op-by-op comparisons, and the CPU and CUDA replays behind them. This is what a C program
//! links through `recap-capi`: no async runtime, server, database or command line in it.

pub mod aslr;
pub mod capture;
pub mod child_probe;
pub mod clock;
pub mod compare;
pub mod device;
pub mod import;
pub mod import_wrp;
pub mod jit_dump;
pub mod mapped;
pub mod system_driver;
pub mod types;

/// The CUDA backend (the `recap-cuda` crate).
pub use recap_cuda as cuda;

pub use capture::{
    capture_devices, ArchiveFailure, Arg, BindingInfo, Buffer, CaptureError, CudaFailure, Device, Dim3, Element, Graph,
    Kernel, LaunchFailure, Module, PtxFailure, RawBuffer, StructArg,
};
