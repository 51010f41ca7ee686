//! ptxas's contraction: which float multiplies it fuses with the additions that use them into
//! one multiply-add (`FFMA`, `DFMA`, `HFMA2`), so that a CPU replay can compute what the GPU ran
//! rather than what the PTX says. PTX allows it for `mul`, `add` and `sub` without a rounding
//! modifier; every CUDA module's machine code comes from ptxas (or the driver's JIT, which is
//! ptxas), at its default `-O3` and `--fmad=true`.
//!
//! The rule, read from the SASS of `tests/numerics/contraction/` on an H200 (ptxas of CUDA 13 at
//! `-O1` to `-O3`; `-O0` and `--fmad=false` fuse nothing) and confirmed by its outputs:
//! - a product (`mul` with no rounding modifier and no `.sat`, unguarded) is fused only where
//!   every use of it, through `mov` and `neg` copies, is an unguarded `add` or `sub` with no
//!   rounding modifier, of its format and `.ftz`ness, in the same basic block (a product used in
//!   another block, or also stored, compared or multiplied, stays a multiply); such a product is
//!   fused into every one of those additions (the multiply is repeated where it has several);
//! - an addition of two such products fuses the one with fewer uses, the first operand on a tie;
//!   the other is then needed as a value and no longer fused anywhere after;
//! - `add.sat` fuses (`FFMA.SAT`); `mul.sat`, a mismatch of `.ftz`, `.rn`/`.rz`/… on either, a
//!   guard, or a product added to itself do not; a barrier or a store between them does not stop
//!   it; packed `f16x2`/`bf16x2` products fuse into packed additions (here without negations).
//!
//! A function keeps both forms: [`contractions`] gives the instructions the fused form replaces,
//! and `Module::set_contraction` swaps them in or out. Where a source of the product is
//! overwritten between the multiply and an addition (ptxas sees values, not registers), the
//! multiply's own slot, dead once every use is fused, keeps a copy of that source.

use super::*;
use crate::ptx::flow;

/// A fused form of a float product: its format and `.ftz`, or packed halves of a format.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Scalar(F, bool),
    Packed(F),
}

/// One addition that reads a product: where it is, which of its operands the product is, and
/// whether the copy it reads was negated (`neg` on the way).
struct Use {
    add: usize,
    slot: usize,
    negated: bool,
}

struct Product {
    mul: usize,
    kind: Kind,
    a: R,
    b: R,
    uses: Vec<Use>,
    /// The first instruction after the multiply that overwrites `a` (`b`) in its block.
    a_clobbered: Option<usize>,
    b_clobbered: Option<usize>,
}

fn product_kind(ins: &Instr) -> Option<(Kind, R, R, R)> {
    if !ins.contractable || ins.guard.is_some() {
        return None;
    }
    match ins.inst {
        Inst::Bin { op: BinOp::FMul(f, _, fl), d, a, b } if !fl.sat => Some((Kind::Scalar(f, fl.ftz), d, a, b)),
        Inst::Bin { op: BinOp::H2(H2Op::Mul, f), d, a, b } => Some((Kind::Packed(f), d, a, b)),
        _ => None,
    }
}

/// An addition a product of `kind` may fuse into: its operands and whether it subtracts.
fn addition(ins: &Instr, kind: Kind) -> Option<(R, R, bool)> {
    if !ins.contractable || ins.guard.is_some() {
        return None;
    }
    let Inst::Bin { op, a, b, .. } = ins.inst else { return None };
    match (op, kind) {
        (BinOp::FAdd(f, _, fl), Kind::Scalar(g, ftz)) if f == g && fl.ftz == ftz => Some((a, b, false)),
        (BinOp::FSub(f, _, fl), Kind::Scalar(g, ftz)) if f == g && fl.ftz == ftz => Some((a, b, true)),
        (BinOp::H2(H2Op::Add, f), Kind::Packed(g)) if f == g => Some((a, b, false)),
        _ => None,
    }
}

/// The bits of a register of `kind` that a `mov` must keep for it to copy the value.
fn value_mask(kind: Kind) -> u64 {
    match kind {
        Kind::Scalar(F::F16 | F::BF16, _) => 0xFFFF,
        Kind::Scalar(F::F32, _) | Kind::Packed(_) => 0xFFFF_FFFF,
        Kind::Scalar(F::F64, _) => u64::MAX,
    }
}

/// Follows the product of the multiply at `pc` through its block; `None` where ptxas keeps it a
/// multiply.
fn follow(f: &Function, pc: usize, leader: &[bool], live: &(Vec<u64>, usize)) -> Option<Product> {
    let (kind, d, a, b) = product_kind(&f.insts[pc])?;
    if d == a || d == b {
        return None;
    }
    let mut p = Product { mul: pc, kind, a, b, uses: Vec::new(), a_clobbered: None, b_clobbered: None };
    // The registers holding the product here, and whether each holds it negated.
    let mut copies: Vec<(R, bool)> = vec![(d, false)];
    let mut j = pc + 1;
    while j < f.insts.len() && !leader[j] {
        let ins = &f.insts[j];
        let (uses, defs) = flow::uses_defs(ins);
        let read: Vec<(R, bool)> = copies.iter().copied().filter(|(r, _)| uses.contains(r)).collect();
        let mut copy = None;
        if let Some(&(r, negated)) = read.first() {
            if read.len() > 1 || ins.guard.is_some() {
                return None;
            }
            match ins.inst {
                Inst::Un { op: UnOp::Mov(m), d, .. } if m & value_mask(kind) == value_mask(kind) => {
                    copy = Some((d, negated))
                }
                Inst::Un { op: UnOp::FNeg(g, _), d, .. } if matches!(kind, Kind::Scalar(k, _) if k == g) => {
                    copy = Some((d, !negated))
                }
                _ => {
                    let (x, y, sub) = addition(ins, kind)?;
                    if x == y || (sub && matches!(kind, Kind::Packed(_))) {
                        return None;
                    }
                    p.uses.push(Use { add: j, slot: usize::from(y == r), negated });
                }
            }
        }
        for r in defs {
            copies.retain(|c| c.0 != r);
            if r == a {
                p.a_clobbered.get_or_insert(j);
            }
            if r == b {
                p.b_clobbered.get_or_insert(j);
            }
        }
        copies.extend(copy);
        j += 1;
    }
    // Nothing after the block may read a copy: ptxas fuses within a block only.
    let (live, words) = live;
    let last = j - 1;
    for s in flow::successors(f, last).into_iter().flatten() {
        let s = s.min(f.insts.len());
        if copies.iter().any(|&(r, _)| live[s * words + r as usize / 64] >> (r % 64) & 1 == 1) {
            return None;
        }
    }
    (!p.uses.is_empty()).then_some(p)
}

/// The instructions that the contracted form of `f` puts in place of its literal ones, by index,
/// in increasing order; registers it needs are added to `f`.
pub(super) fn contractions(f: &mut Function) -> Vec<(u32, Inst)> {
    let n = f.insts.len();
    if !f.insts.iter().any(|i| product_kind(i).is_some()) {
        return Vec::new();
    }
    let mut leader = vec![false; n + 1];
    leader[0] = true;
    for (pc, ins) in f.insts.iter().enumerate() {
        if let Inst::Bra { target, .. } = ins.inst {
            leader[(target as usize).min(n)] = true;
        }
        if matches!(ins.inst, Inst::Bra { .. } | Inst::Ret | Inst::Exit | Inst::Trap) {
            leader[pc + 1] = true;
        }
    }
    let live = flow::live_in(f);
    let products: Vec<Product> = (0..n).filter_map(|pc| follow(f, pc, &leader, &live)).collect();

    // Each addition's candidate products, in the order of the additions.
    let mut at_add: Vec<(usize, usize, usize)> = Vec::new(); // (add, product, use)
    for (pi, p) in products.iter().enumerate() {
        at_add.extend((0..p.uses.len()).map(|ui| (p.uses[ui].add, pi, ui)));
    }
    at_add.sort_unstable();
    let mut eligible = vec![true; products.len()];
    let mut needed = vec![false; products.len()];
    let mut fused: Vec<(usize, usize)> = Vec::new(); // (product, use)
    let mut i = 0;
    while i < at_add.len() {
        let add = at_add[i].0;
        let mut here: Vec<(usize, usize)> = Vec::new();
        while i < at_add.len() && at_add[i].0 == add {
            here.push((at_add[i].1, at_add[i].2));
            i += 1;
        }
        let chosen = here
            .iter()
            .filter(|(pi, _)| eligible[*pi])
            .min_by_key(|(pi, ui)| (products[*pi].uses.len(), products[*pi].uses[*ui].slot))
            .copied();
        let Some((pi, ui)) = chosen else { continue };
        fused.push((pi, ui));
        for &(qi, _) in &here {
            if qi != pi {
                eligible[qi] = false;
                needed[qi] = true;
            }
        }
    }

    let mut out: Vec<(u32, Inst)> = Vec::new();
    for (pi, p) in products.iter().enumerate() {
        let mine: Vec<usize> = fused.iter().filter(|(q, _)| *q == pi).map(|&(_, ui)| ui).collect();
        if mine.is_empty() {
            continue;
        }
        let after = |c: Option<usize>, ui: usize| c.is_some_and(|c| c < p.uses[ui].add);
        let save_a = mine.iter().any(|&ui| after(p.a_clobbered, ui));
        let save_b = mine.iter().any(|&ui| after(p.b_clobbered, ui));
        let dead = !needed[pi] && mine.len() == p.uses.len();
        let (mut a, mut b) = (p.a, p.b);
        let mut keep: Vec<usize> = mine.clone();
        if save_a || save_b {
            if dead && !(save_a && save_b) {
                let s = f.nregs;
                f.nregs += 1;
                let src = if save_a { p.a } else { p.b };
                out.push((p.mul as u32, Inst::Un { op: UnOp::Mov(value_mask(p.kind)), d: s, a: src }));
                if save_a {
                    a = s;
                } else {
                    b = s;
                }
            } else {
                // No slot to keep the old source in: those additions stay as they are.
                keep.retain(|&ui| !after(p.a_clobbered, ui) && !after(p.b_clobbered, ui));
            }
        }
        for ui in keep {
            let u = &p.uses[ui];
            let Inst::Bin { op, d, a: x, b: y } = f.insts[u.add].inst else { continue };
            let other = if u.slot == 0 { y } else { x };
            let sub = matches!(op, BinOp::FSub(..));
            let (neg_product, neg_addend) = match (sub, u.slot) {
                (false, _) => (u.negated, false),
                (true, 0) => (u.negated, true),
                (true, _) => (!u.negated, false),
            };
            let op = match (op, p.kind) {
                (BinOp::FAdd(_, _, fl) | BinOp::FSub(_, _, fl), Kind::Scalar(f, _)) => {
                    if neg_product || neg_addend {
                        TernOp::FmaNeg(f, fl, neg_product, neg_addend)
                    } else {
                        TernOp::Fma(f, Rnd::Rn, fl)
                    }
                }
                (_, Kind::Packed(f)) if !neg_product && !neg_addend => TernOp::FmaH2(f),
                _ => continue,
            };
            out.push((u.add as u32, Inst::Tern { op, d, a, b, c: other }));
        }
    }
    out.sort_unstable_by_key(|x| x.0);
    out
}
