//! Control-flow facts of a finished instruction list: where the lanes that diverge at a branch
//! meet again (the branch's immediate post-dominator), and which instructions reach the
//! function's end with no barrier or call on the way.

use super::*;

/// Sets every branch's reconvergence point in `insts`, whose targets are final.
pub(super) fn mark_reconvergence(insts: &mut [Instr]) {
    for (i, r) in reconvergence(insts).into_iter().enumerate() {
        if let Inst::Bra { reconv, .. } = &mut insts[i].inst {
            *reconv = r;
        }
    }
}

/// The immediate post-dominator of every branch, as an instruction index (`insts.len()` when the
/// paths meet only at the function's end): where lanes that diverge at the branch meet again.
fn reconvergence(insts: &[Instr]) -> Vec<u32> {
    let n = insts.len();
    let mut out = vec![n as u32; n];
    // Basic blocks.
    let mut leader = vec![false; n + 1];
    leader[0] = true;
    for (i, ins) in insts.iter().enumerate() {
        match &ins.inst {
            Inst::Bra { target, .. } => {
                leader[*target as usize] = true;
                leader[i + 1] = true;
            }
            Inst::Ret | Inst::Exit | Inst::Trap => leader[i + 1] = true,
            _ => {}
        }
    }
    let starts: Vec<usize> = (0..n).filter(|&i| leader[i]).collect();
    let nb = starts.len();
    let mut block_of = vec![0usize; n + 1];
    for (b, &s) in starts.iter().enumerate() {
        let e = starts.get(b + 1).copied().unwrap_or(n);
        for x in block_of.iter_mut().take(e).skip(s) {
            *x = b;
        }
    }
    let exit = nb;
    block_of[n] = exit;
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); nb];
    for (b, out) in succ.iter_mut().enumerate() {
        let last = starts.get(b + 1).copied().unwrap_or(n) - 1;
        let ins = &insts[last];
        match &ins.inst {
            Inst::Bra { target, .. } => {
                out.push(block_of[*target as usize]);
                if ins.guard.is_some() {
                    out.push(block_of[last + 1]);
                }
            }
            Inst::Ret | Inst::Exit | Inst::Trap => {
                out.push(exit);
                if ins.guard.is_some() {
                    out.push(block_of[last + 1]);
                }
            }
            _ => out.push(block_of[last + 1]),
        }
    }
    // Post-dominators: dominators of the reverse graph rooted at the exit (Cooper, Harvey, Kennedy).
    let mut preds_rev: Vec<Vec<usize>> = vec![Vec::new(); nb + 1]; // reverse-graph successors = CFG preds
    for (b, out) in succ.iter().enumerate() {
        for &s in out {
            preds_rev[s].push(b);
        }
    }
    let mut order = Vec::with_capacity(nb + 1);
    let mut seen = vec![false; nb + 1];
    let mut stack = vec![(exit, 0usize)];
    seen[exit] = true;
    while let Some((v, i)) = stack.pop() {
        if i < preds_rev[v].len() {
            stack.push((v, i + 1));
            let w = preds_rev[v][i];
            if !seen[w] {
                seen[w] = true;
                stack.push((w, 0));
            }
        } else {
            order.push(v);
        }
    }
    let mut po = vec![usize::MAX; nb + 1];
    for (k, &v) in order.iter().enumerate() {
        po[v] = k;
    }
    const UNDEF: usize = usize::MAX;
    let mut idom = vec![UNDEF; nb + 1];
    idom[exit] = exit;
    let rpo: Vec<usize> = order.iter().rev().copied().collect();
    let mut changed = true;
    while changed {
        changed = false;
        for &b in &rpo {
            if b == exit {
                continue;
            }
            let mut new = UNDEF;
            for &s in &succ[b] {
                if idom[s] == UNDEF {
                    continue;
                }
                new = if new == UNDEF {
                    s
                } else {
                    let (mut x, mut y) = (s, new);
                    while x != y {
                        while po[x] < po[y] {
                            x = idom[x];
                        }
                        while po[y] < po[x] {
                            y = idom[y];
                        }
                    }
                    x
                };
            }
            if new != UNDEF && idom[b] != new {
                idom[b] = new;
                changed = true;
            }
        }
    }
    for (i, ins) in insts.iter().enumerate() {
        if let Inst::Bra { .. } = ins.inst {
            let b = block_of[i];
            let p = idom[b];
            out[i] = if p == UNDEF || p == exit { n as u32 } else { starts[p] as u32 };
        }
    }
    out
}

/// For each instruction, whether every path from it reaches the function's end (`ret`, `exit`,
/// `trap`) without a barrier or a call on the way.
pub(super) fn exit_bound(insts: &[Instr]) -> Vec<bool> {
    let n = insts.len();
    let mut eb = vec![true; n + 1];
    let mut changed = true;
    while changed {
        changed = false;
        for i in (0..n).rev() {
            let ins = &insts[i];
            let v = match &ins.inst {
                Inst::Ret | Inst::Exit | Inst::Trap if ins.guard.is_none() => true,
                Inst::Ret | Inst::Exit | Inst::Trap => eb[i + 1],
                Inst::Bar { .. } | Inst::Call { .. } => false,
                Inst::Bra { target, .. } if ins.guard.is_none() => eb[*target as usize],
                Inst::Bra { target, .. } => eb[*target as usize] && eb[i + 1],
                _ => eb[i + 1],
            };
            if v != eb[i] {
                eb[i] = v;
                changed = true;
            }
        }
    }
    eb.truncate(n);
    eb
}
