//! The arithmetic of the GPU's own units where it is not IEEE arithmetic, modelled bit for bit:
//! `tensor_core.rs` the inner product of `mma` and `wgmma` per architecture. Each model is fitted
//! to outputs recorded on the hardware (`tests/numerics/`), and `probe.rs` (tests only) replays those records.

pub(crate) mod tensor_core;

#[cfg(test)]
pub(crate) mod probe;

pub use tensor_core::MmaModel;

impl super::Module {
    /// Whether a function of the module runs a tensor-core instruction (`mma`, `wgmma`): where
    /// the model of [`MmaModel`] matters.
    pub fn uses_tensor_cores(&self) -> bool {
        use super::ir::Inst;
        self.funcs.iter().any(|f| f.insts.iter().any(|i| matches!(i.inst, Inst::Mma(_) | Inst::Wgmma(_))))
    }
}
