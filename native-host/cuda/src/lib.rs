//! recap's CUDA backend: replays an archive on NVIDIA GPUs as one CUDA graph, and gives the
//! capture API checked driver calls for eager work. Depends on `shared` and cudarc only.
//!
//! The key design decision: the graph is built with the explicit node API from the archive's
//! [`shared::plan::Plan`], not captured from a stream. Every op becomes a node (kernel, memcpy,
//! memset; a generated fill kernel for 8-byte patterns whose halves differ), edges exist only where
//! the plan finds a data hazard, so independent work runs as parallel branches, and the archive's
//! while/if ops become conditional graph nodes whose handle is set by a small PTX kernel recap
//! generates. The graph is instantiated once and launched per replay; new inputs are copies into
//! the bound regions and new launch parameters are exec updates, never a rebuild. Every replay on
//! a device runs on that device's one stream: once kernels have been launched on a second stream
//! of a context, the driver launches every graph kernel node in it about 0.18 us slower for the
//! rest of its life (see [`Device`]'s stream and `bench/cuda/launch_modes.cpp`).
//!
//! Layers, lowest first:
//! - [`driver`]: the driver library loaded at run time (the binary starts without CUDA), checked
//!   raw calls, the device and its primary context, and recovery after a kernel fault;
//! - [`kernels`]: the PTX recap generates; [`library`]: library ops as launches of recap's
//!   library kernels (CUDA C, `kernels/library.cu`); [`pdl`]: the rewrite that lets an archive's
//!   kernels follow each other through programmatic edges (`ReplayOptions::pdl`);
//! - `placed`: regions at their captured device addresses (virtual memory management);
//! - [`replay`]: [`CudaReplay`], the safe API the CLI, the host's sessions and the capture API use.
//!
//! A kernel fault (illegal address, trap) poisons the CUDA context. The replay that hit it fails
//! with an error naming the op ([`locate_fault`] replays op by op to find it when the graph could
//! not say). recap then drops the context and makes a fresh one so the next replay works; where
//! the driver keeps the fault for the whole process (as driver 580 does for an illegal address on
//! an H200), the device is marked lost for this process, the op is found by a child process
//! (`recap cuda-probe`), and the next replay must run in a new process: a long-lived host should
//! run GPU replays in a worker process for that reason.

// Errors carry the driver's own words and the JIT log: large, but only on the cold path.
#![allow(clippy::result_large_err)]
// `call!` evaluates its arguments inside its `unsafe` block on purpose: they are the raw pointers
// and handles the driver call takes (see `driver::call`).
#![allow(clippy::macro_metavars_in_unsafe)]

pub mod driver;
pub mod eager;
mod error;
pub mod kernels;
mod launch_attrs;
pub mod library;
mod module_vars;
pub mod nvrtc;
pub mod pdl;
mod placed;
pub mod probe;
pub mod replay;
mod tensor_maps;

/// The raw driver bindings [`call!`] checks.
pub use cudarc::driver::sys;
pub use driver::{driver, Device, DriverError, DriverInfo, OpenError};
pub use eager::{EagerModule, LaunchError};
pub use replay::{
    locate_fault, CudaError, CudaReplay, LoadTimes, LoopLimit, Mode, OpHook, OpTime, Pdl, ReplayOptions, ServeCall,
    Sink, Source, UnknownMode,
};
