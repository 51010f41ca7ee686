//! recap's native side: the CLI, the host, the CPU and CUDA backends and the capture API.

pub mod import;
pub mod cuda;
pub mod mapped;
