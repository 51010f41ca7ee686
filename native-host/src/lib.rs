//! recap's native side: the CLI, the host, the CPU and CUDA backends and the capture API.

pub mod capture;
pub mod compare;
pub mod import;
pub mod import_wrp;
pub mod jit_dump;
pub mod cuda;
pub mod mapped;
pub mod server;
pub mod sessions;
pub mod store;

pub use capture::{capture_devices, Arg, BindingInfo, Buffer, CaptureError, Device, Dim3, Element, Graph, Kernel, Module, RawBuffer, StructArg};
