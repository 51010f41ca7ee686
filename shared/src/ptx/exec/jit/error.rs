//! Why a kernel, or its code for groups, has no native code.

use crate::ptx::ir::{Sreg, R};

/// Why a kernel, or its code for groups, has no native code: what stands in the way, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JitError {
    /// An instruction native code does not run: it needs lanes in lockstep, or a call.
    #[error("`{what}` at line {line}")]
    Unsupported { what: &'static str, line: u32 },
    /// A kernel with shuffles whose threads may reach a boundary on different paths.
    #[error("a shuffle kernel with a shuffle or barrier under divergent control flow (line {line})")]
    DivergentBoundary { line: u32 },
    /// A special register native code does not compute.
    #[error("special register {0:?}")]
    SpecialRegister(Sreg),
    /// The kernel's shape does not suit code for groups of threads.
    #[error("{what} (line {line})")]
    NoLanes { what: &'static str, line: u32 },
    /// The translator met what the analyses should have ruled out, and built no code.
    #[error("{what} (line {line})")]
    Translate { what: &'static str, line: u32 },
    /// A register that varies by lane, read where the code for the whole group is emitted.
    #[error("register {0} read outside lane code")]
    LaneMissing(R),
    /// The code generator panicked on the code for groups.
    #[error("the code generator failed on the code for groups")]
    GroupPanicked,
    /// Cranelift cannot be set up for this machine.
    #[error("code generator setup: {0}")]
    Setup(String),
    /// Cranelift refused a function.
    #[error("code generator on `{function}`: {message}")]
    Codegen { function: String, message: String },
}
