//! Which kernels run as native code: decided when a kernel is first launched, before any of its
//! threads runs. A kernel that needs lanes in lockstep (votes, `redux`, `activemask`,
//! `bar.warp.sync`, a shuffle under a guard or where threads of a warp may be on different
//! paths), named or counted barriers, calls, `%clock`, mbarriers, bulk copies, `wgmma` or a
//! barrier under a guard runs on the interpreter instead.
//!
//! Shuffles and the warp matrix instructions (`mma`, `ldmatrix`, `stmatrix`, `movmatrix`) are
//! the warp operations native code runs, because of how it runs threads: one after another up to
//! the next boundary, where the values are exchanged across each warp (a matrix instruction runs
//! there on the interpreter's own code, once per warp, on the registers the threads left in their
//! spill areas). That gives the interpreter's values only where every live thread of a warp
//! reaches each such instruction together, in the same order as lanes in lockstep do;
//! [`divergent_boundary`] finds the kernels where that may not hold.

use super::error::JitError;
use crate::ptx::flow::uses_defs;
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
            i if i.is_warp_matrix() && ins.guard.is_some() => "a guarded warp matrix instruction",
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

/// In a kernel with shuffles or warp matrix instructions: the line of one of those, or of a
/// barrier, that some path from a conditional branch whose condition may differ between the
/// threads of a warp reaches before the branch's reconvergence point. Elsewhere every live thread
/// of a warp reaches each boundary together, in the same order as lanes in lockstep do, so running
/// threads one after another up to it and exchanging there gives the interpreter's values;
/// threads that have exited take part as the interpreter's inactive lanes do (with their registers
/// at exit). A branch on a value every thread of a warp computes alike (a loop counter against a
/// kernel argument, as in a tiled matrix product's loop over K) keeps the warp together.
fn divergent_boundary(f: &Function) -> Option<u32> {
    if !f.insts.iter().any(|i| matches!(i.inst, Inst::Shfl { .. }) || i.inst.is_warp_matrix()) {
        return None;
    }
    let (_, inside) = warp_divergence(f);
    f.insts
        .iter()
        .enumerate()
        .find(|(pc, i)| {
            inside[*pc] && (matches!(i.inst, Inst::Shfl { .. } | Inst::Bar { .. }) || i.inst.is_warp_matrix())
        })
        .map(|(_, i)| i.line)
}

/// Whether some threads of a warp may exit while others go on: an exit under a condition that
/// may differ between them, or in code only some of them run ([`warp_divergence`]). Only then can
/// a warp instruction meet a thread that has exited.
pub(super) fn threads_exit_apart(f: &Function) -> bool {
    let (varying, inside) = warp_divergence(f);
    f.insts.iter().enumerate().any(|(pc, i)| {
        matches!(i.inst, Inst::Ret | Inst::Exit) && (inside[pc] || i.guard.is_some_and(|(p, _)| varying[p as usize]))
    })
}

/// Which registers may differ between the threads of a warp, and which instructions only some of
/// them may run (those some path from a branch on such a register reaches before the branch
/// reconverges).
fn warp_divergence(f: &Function) -> (Vec<bool>, Vec<bool>) {
    let n = f.insts.len();
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
    let mut varying = warp_varying(f);
    let ud: Vec<_> = f.insts.iter().map(uses_defs).collect();
    loop {
        // Code some path from a varying branch reaches before the branch reconverges runs for
        // some threads of a warp only: what it writes varies too.
        let mut inside = vec![false; n + 1];
        for (pc, ins) in f.insts.iter().enumerate() {
            let Inst::Bra { reconv, .. } = ins.inst else {
                continue;
            };
            match ins.guard {
                Some((p, _)) if varying[p as usize] => {}
                _ => continue,
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
        let mut changed = false;
        for (pc, (uses, defs)) in ud.iter().enumerate() {
            if inside[pc] || uses.iter().any(|&u| varying[u as usize]) {
                for &d in defs {
                    changed |= !std::mem::replace(&mut varying[d as usize], true);
                }
            }
        }
        if !changed {
            return (varying, inside);
        }
    }
}

/// Per register: whether its value may differ between the threads of a warp at its sources: the
/// thread's index and lane, what a thread loads or exchanges for itself (memory may change
/// between the threads' loads; a warp instruction gives each lane its own part), the clock. What
/// is computed from those, or written where only some threads run, follows in
/// [`divergent_boundary`].
fn warp_varying(f: &Function) -> Vec<bool> {
    let mut varying = vec![false; f.nregs as usize];
    for &(r, s) in &f.sregs {
        if matches!(
            s,
            Sreg::Tid(_)
                | Sreg::LaneId
                | Sreg::LaneMaskEq
                | Sreg::LaneMaskLt
                | Sreg::LaneMaskLe
                | Sreg::LaneMaskGt
                | Sreg::LaneMaskGe
        ) {
            varying[r as usize] = true;
        }
    }
    for ins in &f.insts {
        let own = match ins.inst {
            Inst::Ld { space, .. } => !matches!(space, Space::KParam | Space::Const),
            Inst::Un { .. } | Inst::Bin { .. } | Inst::Tern { .. } | Inst::Setp { .. } | Inst::Set { .. } => false,
            Inst::Cvta { .. } | Inst::Bra { .. } | Inst::Bar { count: None, d: None, .. } => false,
            _ => true,
        };
        if own {
            for d in uses_defs(ins).1 {
                varying[d as usize] = true;
            }
        }
    }
    varying
}
