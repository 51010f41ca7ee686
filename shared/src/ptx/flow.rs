//! Dataflow over a lowered function, with no engine in it: which registers each instruction reads
//! and writes, where control goes next, and which registers are live where. Lowering uses it to
//! give registers read before any write a defined value; native code uses it to decide what a
//! thread keeps across a barrier.

use crate::ptx::ir::*;

/// Registers an instruction reads and writes (a guarded write does not end a value's life).
pub(crate) fn uses_defs(ins: &Instr) -> (Vec<R>, Vec<R>) {
    let mut u = Vec::new();
    let mut d = Vec::new();
    if let Some((p, _)) = ins.guard {
        u.push(p);
    }
    let addr = |a: &Addr, u: &mut Vec<R>| {
        if let Base::Reg(r) = a.base {
            u.push(r);
        }
    };
    match &ins.inst {
        Inst::Un { d: x, a, .. } | Inst::Cvta { d: x, a, .. } => {
            u.push(*a);
            d.push(*x);
        }
        Inst::Bin { d: x, a, b, .. } => {
            u.extend([*a, *b]);
            d.push(*x);
        }
        Inst::Tern { d: x, a, b, c, .. } => {
            u.extend([*a, *b, *c]);
            d.push(*x);
        }
        Inst::Bfi { d: x, f, b, pos, len, .. } => {
            u.extend([*f, *b, *pos, *len]);
            d.push(*x);
        }
        Inst::Setp { d: x, dn, a, b, comb, .. } => {
            u.extend([*a, *b]);
            if let Some((_, c, _)) = comb {
                u.push(*c);
            }
            d.push(*x);
            d.extend(*dn);
        }
        Inst::Set { d: x, a, b, comb, .. } => {
            u.extend([*a, *b]);
            if let Some((_, c, _)) = comb {
                u.push(*c);
            }
            d.push(*x);
        }
        Inst::FrameAddr { d: x, .. } | Inst::Activemask { d: x } | Inst::Clock { d: x, .. } => d.push(*x),
        Inst::Ld { n, d: ds, addr: a, .. } => {
            addr(a, &mut u);
            d.extend(&ds[..*n as usize]);
        }
        Inst::St { n, a: srcs, addr: a, .. } => {
            addr(a, &mut u);
            u.extend(&srcs[..*n as usize]);
        }
        Inst::Atom { d: x, addr: a, b, c, .. } => {
            addr(a, &mut u);
            u.extend([*b, *c]);
            d.extend(*x);
        }
        Inst::Bar { count, red, d: x, .. } => {
            u.extend(*count);
            if let Some((_, r, _)) = red {
                u.push(*r);
            }
            d.extend(*x);
        }
        Inst::Shfl { d: x, p, a, b, c, .. } => {
            u.extend([*a, *b, *c]);
            d.push(*x);
            d.extend(*p);
        }
        Inst::Vote { d: x, a, .. } | Inst::Redux { d: x, a, .. } => {
            u.push(*a);
            d.push(*x);
        }
        Inst::Mma(m) => {
            u.extend(m.a.iter().chain(&m.b).chain(&m.c));
            d.extend(&m.d);
        }
        Inst::Ldmatrix { n, d: ds, addr: a, .. } => {
            addr(a, &mut u);
            d.extend(&ds[..*n as usize]);
        }
        Inst::Stmatrix { n, a: srcs, addr: a, .. } => {
            addr(a, &mut u);
            u.extend(&srcs[..*n as usize]);
        }
        Inst::Movmatrix { d: x, a } => {
            u.push(*a);
            d.push(*x);
        }
        Inst::CpAsync { src_size, dst, src, .. } => {
            addr(dst, &mut u);
            addr(src, &mut u);
            u.push(*src_size);
        }
        Inst::Mbar { addr: a, d: x, b, .. } => {
            addr(a, &mut u);
            u.push(*b);
            d.extend(*x);
        }
        Inst::CpBulk { dst, src, size, mbar, .. } => {
            addr(dst, &mut u);
            addr(src, &mut u);
            if let Some(m) = mbar {
                addr(m, &mut u);
            }
            u.push(*size);
        }
        Inst::Elect { d: x, p, mask } => {
            u.push(*mask);
            d.extend([*x, *p]);
        }
        Inst::Wgmma(w) => {
            // D is also the accumulator.
            u.extend(w.a.iter().chain(&w.d));
            u.extend([w.b_desc, w.scale_d]);
            d.extend(&w.d);
        }
        Inst::Bra { .. } | Inst::Ret | Inst::Exit | Inst::Trap | Inst::Call { .. } | Inst::Nop | Inst::WarpSync => {}
    }
    if ins.guard.is_some() {
        // A guarded write may not happen: the old value stays live through it.
        u.extend(d.iter().copied());
    }
    (u, d)
}

/// Where a thread goes after instruction `pc`: a branch's target (the end, `insts.len()`, at
/// most) and, unless the branch or the exit is unconditional, the next instruction.
pub(crate) fn successors(f: &Function, pc: usize) -> [Option<usize>; 2] {
    let ins = &f.insts[pc];
    match ins.inst {
        Inst::Bra { target, .. } => [Some((target as usize).min(f.insts.len())), ins.guard.is_some().then_some(pc + 1)],
        Inst::Ret | Inst::Exit | Inst::Trap if ins.guard.is_none() => [None, None],
        _ => [Some(pc + 1), None],
    }
}

/// Registers live before each instruction (bit sets of `words` words per instruction, the last
/// set the end's).
pub(crate) fn live_in(f: &Function) -> (Vec<u64>, usize) {
    let n = f.insts.len();
    let words = (f.nregs as usize).div_ceil(64).max(1);
    let ud: Vec<_> = f.insts.iter().map(uses_defs).collect();
    let mut live = vec![0u64; (n + 1) * words];
    let mut changed = true;
    while changed {
        changed = false;
        for pc in (0..n).rev() {
            let mut out = vec![0u64; words];
            let succ = |s: usize, out: &mut Vec<u64>| {
                let s = s.min(n);
                for w in 0..words {
                    out[w] |= live[s * words + w];
                }
            };
            for s in successors(f, pc).into_iter().flatten() {
                succ(s, &mut out);
            }
            let (u, d) = &ud[pc];
            for &r in d {
                out[r as usize / 64] &= !(1u64 << (r % 64));
            }
            for &r in u {
                out[r as usize / 64] |= 1u64 << (r % 64);
            }
            let cur = &mut live[pc * words..(pc + 1) * words];
            if cur != &out[..] {
                cur.copy_from_slice(&out);
                changed = true;
            }
        }
    }
    (live, words)
}
