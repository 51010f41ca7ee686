//! The CPU executor: a launch's blocks run on workers, each block by the interpreter or by native
//! code, over one [`Memory`](super::Memory).
//!
//! - `launch.rs`: the public launch API ([`LaunchPlan`], [`launch`]) and the choice of engine;
//! - `worker.rs`: a worker and the block state both engines run over ([`Worker`](worker::Worker));
//! - `interp.rs`: the interpreter, one instruction across all of a block's lanes;
//! - `access.rs`: one lane's checked loads, stores and atomics, for both engines;
//! - `warp.rs`, `warpgroup.rs`, `asynchronous.rs`: the warp, warpgroup and asynchronous
//!   instructions as the interpreter runs them;
//! - `dump.rs`: where native code goes as it is compiled ([`JitDump`]);
//! - `jit/` (native builds with the `jit` feature): native code. It uses the worker, the lane
//!   semantics of `ptx::ops` and its own files, never the interpreter or the launch code.

mod access;
mod asynchronous;
mod dump;
mod interp;
#[cfg(all(feature = "jit", not(target_arch = "wasm32")))]
mod jit;
mod launch;
mod warp;
mod warpgroup;
mod worker;

pub use dump::JitDump;
pub(crate) use launch::{jit_support, lanes_support, JitCache, NoNativeCode};
pub use launch::{launch, Engine, ExecError, ExecOptions, LaunchDims, LaunchPlan, LaunchStats};
