//! recap's CUDA driver interposer: a `libcuda.so.1` that forwards every call to the real driver
//! and records the work a range of the program issues (`recap capture -- CMD`).
//!
//! # How it sits in front of the driver
//!
//! `recap capture` runs the program with this library first on `LD_LIBRARY_PATH` under the names
//! `libcuda.so.1` and `libcuda.so`, and names the real driver in `RECAP_REAL_LIBCUDA`. So every
//! way a program reaches the driver reaches this library first:
//! - linked against `libcuda.so.1` (driver API programs): the dynamic linker finds this library;
//! - `dlopen("libcuda.so.1")` or `dlopen("libcuda.so")` (the CUDA runtime, NVIDIA Warp, numba,
//!   CuPy's bindings) and `dlsym`: the same;
//! - `cuGetProcAddress` (how the CUDA runtime resolves every entry point at start-up, at exact
//!   ABI versions and per-thread-stream variants, and how `cudaGetDriverEntryPoint` answers): the
//!   hook calls the real resolver, then maps the address it returns back to the export of this
//!   library with the same name ([`real::ours_for`]). Whatever variant a new driver picks is one of
//!   its exports, and this library exports all of them, so no version table is kept here.
//!
//! Every export of the real driver (`exports.txt`, read off driver 580) that recap does not record
//! is a generated trampoline: a counted jump through a slot filled from the real driver when this
//! library loads (build.rs). The counts are how the capture report lists the calls that passed
//! through unrecorded. The entry points recap records are in [`hooks`].
//!
//! Why not CUPTI callbacks (`CUDA_INJECTION64_PATH`): they observe, but a callback cannot read the
//! PTX the program loaded (CUPTI hands out cubins), only one subscriber may exist on older CUPTI
//! (so recap would fight Nsight and PyTorch's profiler for it), and the runtime's own resolution
//! through `cuGetProcAddress` happens before an injection library can subscribe.
//!
//! # Environment
//! The capture request (`shared::capture::Request`), read once ([`request`]):
//! - `RECAP_REAL_LIBCUDA`: the real driver's path (required);
//! - `RECAP_CAPTURE_RANGE`: `profiler` (default), `launches:SKIP:COUNT`, `all` or
//!   `nvtx:NAME[@DOMAIN]` (with `NVTX_INJECTION64_PATH` naming this library: [`nvtx`]);
//! - `RECAP_CAPTURE_OUT`: the archive to write (default `capture.recap`);
//! - `RECAP_CAPTURE_REPORT`: where to write the JSON capture report;
//! - `RECAP_CAPTURE_COMMAND`: the command line, kept in the archive's metadata;
//! - `RECAP_CAPTURE_EFFECTS`: `1` records what launches of kernels without PTX write
//!   (`record/effects.rs`);
//! - `RECAP_CAPTURE_PLACE`: `1` makes replays place regions at their captured addresses
//!   (`placement.rs`);
//! - `RECAP_INTERPOSER`: set when `LD_AUDIT` sends loads by path here too (`native-host/audit`);
//! - `RECAP_REAL_LIBNVRTC`: the NVRTC the audit library linked for [`nvrtc`];
//! - `RECAP_REAL_LIBNVJITLINK`: the nvJitLink the audit library linked for [`nvjitlink`].
//!
//! A program that loads this library itself (the Python package's `recap.capture`, in process)
//! drives the range through the exported control API instead ([`control`]).

// The one exception to the workspace's lints: about 180 hook bodies (the `hooks!` tables, NVTX's
// and NVRTC's exports) are `unsafe extern "C"` functions whose whole body is the driver API's
// contract with its caller, written before the lint was the house rule; each is documented at the
// function. New code here writes its unsafe operations in blocks as everywhere else.
#![allow(unsafe_op_in_unsafe_fn)]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("the interposer's trampolines are x86-64 Linux assembly");

mod archive;
pub mod control;
pub mod declared;
mod ending;
mod forward;
pub mod graphs;
#[macro_use]
pub mod hooks;
mod globals;
mod graph_hooks;
mod images;
pub mod launch_attrs;
pub mod nvjitlink;
pub mod nvrtc;
pub mod nvtx;
mod placement;
mod ptx_sources;
mod ptxas;
mod readable;
pub mod real;
pub mod record;
pub mod request;
mod tensor_maps;

pub mod sys;

/// Loads the real driver when this library is loaded, before the program can call any export.
#[used]
#[link_section = ".init_array"]
static LOAD_REAL_DRIVER: extern "C" fn() = {
    extern "C" fn load() {
        real::load();
    }
    load
};
