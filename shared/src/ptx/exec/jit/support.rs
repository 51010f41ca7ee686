//! Which kernels run as native code: decided when a kernel is first launched, before any of its
//! threads runs. A kernel that needs lanes in lockstep (votes, `redux`, `activemask`,
//! `bar.warp.sync`, a shuffle under a guard or where threads of a warp may be on different
//! paths), named or counted barriers, calls, `%clock`, `cp.async` or a barrier under a guard
//! runs on the interpreter instead.
//!
//! Shuffles are the one warp operation native code runs, because of how it runs threads: one
//! after another up to the next boundary, where the values are exchanged across each warp. That
//! gives the interpreter's values only where every live thread of a warp reaches each shuffle
//! together, in the same order as lanes in lockstep do; [`divergent_boundary`] finds the kernels
//! where that may not hold.

use super::error::JitError;
use crate::ptx::ir::*;

/// Why a function cannot run as native code, if it cannot.
pub(crate) fn unsupported(f: &Function) -> Option<JitError> {
    for ins in &f.insts {
        let why = match &ins.inst {
            Inst::Shfl { .. } if ins.guard.is_some() => "a guarded shfl",
            Inst::Shfl { .. } => continue,
            Inst::Vote { .. } => "vote",
            Inst::Activemask { .. } => "activemask",
            Inst::Redux { .. } => "redux",
            Inst::WarpSync => "bar.warp.sync",
            Inst::Clock { .. } => "clock",
            Inst::Call { .. } => "call",
            Inst::Mma(_) => "mma",
            Inst::Ldmatrix { .. } => "ldmatrix",
            Inst::Stmatrix { .. } => "stmatrix",
            Inst::Movmatrix { .. } => "movmatrix",
            Inst::CpAsync { .. } => "cp.async",
            Inst::Mbar { .. } => "mbarrier",
            Inst::CpBulk { .. } => "cp.async.bulk",
            Inst::Elect { .. } => "elect.sync",
            Inst::Wgmma(_) => "wgmma",
            Inst::Bar { count: None, red: None, d: None, arrive: false } if ins.guard.is_none() => continue,
            Inst::Bar { .. } => "a guarded, named, counted or reducing barrier",
            _ => continue,
        };
        return Some(JitError::Unsupported { what: why, line: ins.line });
    }
    if let Some(line) = divergent_boundary(f) {
        return Some(JitError::DivergentBoundary { line });
    }
    for (_, s) in &f.sregs {
        if matches!(
            s,
            Sreg::LaneMaskEq
                | Sreg::LaneMaskLt
                | Sreg::LaneMaskLe
                | Sreg::LaneMaskGt
                | Sreg::LaneMaskGe
                | Sreg::DynSmemSize
                | Sreg::TotalSmemSize
        ) {
            return Some(JitError::SpecialRegister(*s));
        }
    }
    None
}

/// In a kernel with shuffles: the line of a shuffle or barrier that some path from a conditional
/// branch reaches before the branch's reconvergence point. Elsewhere every live thread of a warp
/// reaches each boundary together, in the same order as lanes in lockstep do, so running threads
/// one after another up to it and exchanging there gives the interpreter's values; threads that
/// have exited take part as the interpreter's inactive lanes do (with their registers at exit).
fn divergent_boundary(f: &Function) -> Option<u32> {
    let n = f.insts.len();
    if !f.insts.iter().any(|i| matches!(i.inst, Inst::Shfl { .. })) {
        return None;
    }
    let succs = |pc: usize| -> Vec<usize> {
        let ins = &f.insts[pc];
        match ins.inst {
            Inst::Bra { target, .. } => {
                let mut v = vec![(target as usize).min(n)];
                if ins.guard.is_some() {
                    v.push(pc + 1);
                }
                v
            }
            Inst::Ret | Inst::Exit | Inst::Trap if ins.guard.is_none() => vec![],
            _ => vec![pc + 1],
        }
    };
    let mut inside = vec![false; n + 1];
    for (pc, ins) in f.insts.iter().enumerate() {
        let Inst::Bra { reconv, .. } = ins.inst else {
            continue;
        };
        if ins.guard.is_none() {
            continue;
        }
        let stop = (reconv as usize).min(n);
        let mut seen = vec![false; n + 1];
        let mut work = succs(pc);
        while let Some(q) = work.pop() {
            if q == stop || q >= n || seen[q] {
                continue;
            }
            seen[q] = true;
            inside[q] = true;
            work.extend(succs(q));
        }
    }
    f.insts
        .iter()
        .enumerate()
        .find(|(pc, i)| inside[*pc] && matches!(i.inst, Inst::Shfl { .. } | Inst::Bar { .. }))
        .map(|(_, i)| i.line)
}
