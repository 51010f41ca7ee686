//! The one crate that both sides of recap share: the native host and the browser viewer.
//!
//! The key design decision: everything that describes or interprets captured GPU work is pure Rust
//! here, with no I/O of its own. The archive reader works over a byte slice (a memory map natively,
//! a `Uint8Array` copy in the browser), the PTX executor works over regions it is handed, and the
//! planner and protocol are plain data. That is what lets one archive be parsed, planned and
//! replayed identically on a server, a laptop without a GPU, and inside a web page.
//!
//! Invariant: this crate knows nothing about servers, GPUs or browsers.
//!
//! | module | what it is |
//! |---|---|
//! | [`archive`] | the `.recap` file format: streaming writer, zero-copy reader, validator |
//! | [`ptx`] | PTX parser and the CPU executor that runs it a thread block at a time |
//! | [`check`] | judging final regions against expected bytes under a tolerance; region summaries |
//! | [`replay`] | op-level CPU replay of an archive over the PTX executor |
//! | [`effects`] | recorded effects: what a launch the CPU cannot run wrote, keyed by its inputs' hash |
//! | [`cuda_graph`] | CUDA graphs built node by node: the driver API's node parameter layouts and their run order |
//! | [`compare`] | two replays held side by side, op by op: the first op whose writes differ |
//! | [`npy`] | numpy's `.npy` files for a region's bytes, written and read |
//! | [`plan`] | read/write sets of every op, hazards, the op DAG both engines and the viewer use |
//! | [`protocol`] | the messages the host and the viewer exchange |
//! | [`tensor_map`] | TMA descriptors a captured program passed to kernels: how to encode them again |
//! | [`wrp`] | NVIDIA Warp's graph captures (`.wrp`), read into plain data for the importer |

pub mod archive;
pub mod capture;
pub mod check;
pub mod compare;
pub mod cuda_graph;
pub mod effects;
pub mod fatbin;
pub mod launch_attrs;
mod le;
pub mod library;
pub mod npy;
pub mod placement;
pub mod plan;
pub mod protocol;
pub mod ptx;
pub mod replay;
pub mod report;
pub mod tensor_map;
pub mod wrp;
