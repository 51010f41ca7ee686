//! The arithmetic of the GPU's own units where it is not IEEE arithmetic, modelled bit for bit:
//! `tensor_core.rs` the inner product of `mma` and `wgmma` per architecture, `sfu.rs` the
//! special-function unit (the `.approx` functions and `div.full.f32`). Each model is fitted to
//! outputs recorded on the hardware (`tests/numerics/`), and `probe.rs` (tests only) replays the
//! tensor-core records.

pub(crate) mod sfu;
pub(crate) mod tensor_core;

#[cfg(test)]
pub(crate) mod probe;

pub use sfu::SfuModel;
pub use tensor_core::MmaModel;

impl super::Module {
    /// Whether a function of the module runs a tensor-core instruction (`mma`, `wgmma`): where
    /// the model of [`MmaModel`] matters.
    pub fn uses_tensor_cores(&self) -> bool {
        use super::ir::Inst;
        self.funcs.iter().any(|f| f.insts.iter().any(|i| matches!(i.inst, Inst::Mma(_) | Inst::Wgmma(_))))
    }

    /// Whether a function of the module runs a special function the sm_90 model of [`SfuModel`]
    /// computes differently from IEEE arithmetic (`ex2`, `rcp`, `sqrt`, `rsqrt` `.approx.f32`,
    /// `div.full.f32`).
    pub fn uses_special_functions(&self) -> bool {
        use super::ir::{BinOp, FMode, Inst, UnOp, F};
        self.funcs.iter().any(|f| {
            f.insts.iter().any(|i| {
                matches!(
                    i.inst,
                    Inst::Un {
                        op: UnOp::FEx2(F::F32, _)
                            | UnOp::FRcp(F::F32, FMode::Approx, _)
                            | UnOp::FSqrt(F::F32, FMode::Approx, _)
                            | UnOp::FRsqrt(F::F32, _),
                        ..
                    } | Inst::Bin { op: BinOp::FDiv(F::F32, FMode::Full, false), .. }
                )
            })
        })
    }
}
