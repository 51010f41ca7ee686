//! Lowering the syntax tree into the executor's instruction lists: names resolved to registers,
//! frame slots and addresses; opcodes decoded into typed operations; branch targets and
//! reconvergence points computed. Everything that can be rejected is rejected here.
//!
//! [`module`] lowers a whole module: it places the module's variables, lays out each kernel's
//! shared memory ([`shared_layout`]) and lowers every function once per layout it runs under
//! ([`function`]), naming the kernels a refusal stops ([`refusal`]). A function's operands are
//! resolved by [`names`]; [`dispatch`] sends each instruction to its family: [`arithmetic`],
//! [`packed_int`], [`conversion`], [`memory`], [`control`], [`warp`], [`wgmma`] and
//! [`asynchronous`]. A finished body has its warp matrix rows gathered ([`warp_runs`]) and its
//! branches' reconvergence points computed ([`reconvergence`]), and the multiply-adds ptxas would
//! fuse from its plain multiplies and additions found ([`contract`]).

use std::collections::{HashMap, HashSet};

use super::error::PtxError;
use super::ir::*;
use super::memory::Region;
use super::module::{Entry, Module, ParamInfo, PlacedVariable, VariableDecl};
use super::parse::{self, InitElem, Lit, Operand, Stmt, VarDecl};

mod arithmetic;
mod asynchronous;
mod contract;
mod control;
mod conversion;
mod dispatch;
mod function;
mod memory;
mod module;
mod names;
mod packed_int;
mod reconvergence;
mod refusal;
mod shared_layout;
mod warp;
mod warp_runs;
mod wgmma;

use dispatch::Opc;
use function::FnLower;
use memory::{is_tma, TMA_REASON};
use module::float_bits;
pub(crate) use module::lower_module;
use names::{align_up, decl_align, decl_size, decl_ty, sreg_of, Sym};
use reconvergence::{exit_bound, mark_reconvergence};
use shared_layout::{Layout, SharedPlan};

/// Largest static + dynamic shared memory a block may use (bytes), as on sm_90.
pub const MAX_SHARED_BYTES: u64 = 228 * 1024;
/// Largest per-thread local frame (bytes), as the hardware allows.
pub const MAX_LOCAL_BYTES: u64 = 512 * 1024;

/// A lowering step's result: a `PtxError` names the line it refuses.
type Res<T> = Result<T, PtxError>;
