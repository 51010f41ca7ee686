//! The capture API: run GPU compute work from Rust on a CPU or a CUDA device, record it once as a
//! [`Graph`], save it as one `.recap` archive with named inputs and outputs, and replay it anywhere.
//!
//! The key design decision: a recorded op refers to *regions* (buffers known to the graph), never to
//! raw device addresses. A kernel argument that is a buffer, or a pointer field inside a by-value
//! struct or inside a buffer, is recorded as a relocation and patched with the region's address at
//! replay time. That one rule is what lets the same recording replay in place on the device that made
//! it (over the caller's live buffers), be saved without a single raw address, and be loaded on
//! another device — a CUDA capture on the CPU, or the reverse — with fresh allocations.
//!
//! | concept | type | what it is |
//! |---|---|---|
//! | device | [`Device`] | `Device::cpu()` (PTX interpreted by `shared::ptx`) or `Device::cuda(n)` (the CUDA driver) |
//! | buffer | [`Buffer<T>`] | typed device memory: `dev.alloc::<f32>(n)`, `dev.upload(&[..])`, `buf.read()` |
//! | untyped buffer | [`RawBuffer`] | any buffer, as bindings and kernel arguments see it |
//! | module | [`Module`] | PTX text (`dev.load_ptx`) or CUDA C compiled by NVRTC (`dev.compile_cuda`) |
//! | kernel | [`Kernel`] | an entry of a module, with the parameter layout its PTX declares |
//! | argument | [`Arg`], [`StructArg`], [`args!`](crate::args) | a buffer, a scalar, or a by-value struct whose pointer fields are marked |
//! | eager work | `dev.launch`, `dev.copy`, `dev.zero`, `dev.fill`, `dev.write`, `buf.read` | runs now, in order |
//! | capture | `dev.capture(\|d\| ..)`, `dev.begin_capture()` / `dev.end_capture()` | the same calls, recorded instead of run |
//! | several devices | [`capture_devices`]`(&[&d0, &d1], \|d\| ..)`, `d[1].copy_between(&a, &b)` | one graph over several GPUs (a multi-device archive), copies between their memories |
//! | device-side control | `dev.while_nonzero`, `dev.if_nonzero` | a loop or branch over a `u32` word on the device |
//! | graph | [`Graph`] | recorded work: `launch()` replays in place; `save(path, inputs, outputs)` writes an archive |
//! | loaded graph | `Graph::load(path, &dev)` | an archive on any device; `set_param` / `get_param` by binding name |
//!
//! ```no_run
//! use recap::{Device, args};
//! # fn main() -> Result<(), recap::CaptureError> {
//! # let basics_ptx = "";
//! let dev = Device::cpu(); // or Device::cuda(0)?: the rest is the same
//! // native-host/recap/examples/kernels/basics.ptx: axpy(const float* x, float* y, float a, unsigned n)
//! let module = dev.load_ptx("basics", basics_ptx)?;
//! let axpy = module.kernel("axpy")?;
//! let x = dev.upload(&[1.0f32; 256])?;
//! let y = dev.alloc::<f32>(256)?;
//! let graph = dev.capture(|d| {
//!     d.zero(&y)?;
//!     d.launch(&axpy, 1, 256, 0, &args![&x, &y, 2.0f32, 256u32])
//! })?;
//! graph.launch()?;
//! assert_eq!(y.read()?[0], 2.0);
//! graph.save("axpy.recap", &[("x", x.raw())], &[("y", y.raw())])?;
//! let loaded = recap::Graph::load("axpy.recap", &dev)?;
//! loaded.set_param("x", &[3.0f32; 256])?;
//! loaded.launch()?;
//! assert_eq!(loaded.get_param_as::<f32>("y")?[0], 6.0);
//! # Ok(()) }
//! ```
//!
//! Semantics worth knowing:
//! - Inside a capture nothing runs. Buffers allocated inside it are graph-owned scratch: they exist
//!   only while the graph runs and cannot be read from the host. Host data written inside a capture
//!   (`dev.write`, `dev.upload`) becomes a constant region of the graph, copied in at every replay.
//! - `graph.save` stores each region's contents *at the time of saving* as its initial data, so save
//!   before launching when the inputs should be the ones the capture started from.
//! - While and if test a `u32` word on the device before each iteration; `max_iterations` 0 means
//!   unbounded. Eagerly (outside a capture) the host reads the word back; in a graph the test stays
//!   on the device where the backend supports it, and on the CPU a while whose word is still set
//!   after `max_iterations` passes fails the launch (`ReplayError::LoopLimit`), as in every CPU
//!   replay of an archive.
//! - Kernel layouts come from the `.entry` declarations alone, so a module the CPU executor refuses
//!   (TMA copies, say) still loads and records on the CPU; launching it there is the error.

mod args;
mod cpu;
mod cuda;
mod device;
mod error;
mod graph;
mod record;
mod replay;
#[cfg(test)]
mod tests;

pub use args::{Arg, StructArg};
pub use device::{capture_devices, Buffer, Device, Dim3, Element, Kernel, Module, RawBuffer};
pub use error::{ArchiveFailure, CaptureError, CudaFailure, LaunchFailure, PtxFailure};
pub use graph::{BindingInfo, Graph};

pub type Result<T, E = CaptureError> = std::result::Result<T, E>;

pub(crate) fn usage<T>(msg: impl Into<String>) -> Result<T> {
    Err(CaptureError::Usage(msg.into()))
}
