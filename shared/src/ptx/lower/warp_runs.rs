//! Gathering a tile's warp matrix instructions, and the barriers around them, into one run.
//!
//! Compilers interleave a tile's `ldmatrix`es with the address arithmetic of the next one, and
//! put the loop's own arithmetic between its barriers and its `mma`s: Triton's K step is
//! `bar.sync, add ×3, ldmatrix ×4, add, ldmatrix ×4, add, ldmatrix.trans ×2, ..., mma ×64, add,
//! setp, selp, ..., bar.sync`. Native code runs a row of consecutive warp matrix instructions,
//! with the plain barriers right before and after it, as one boundary (every thread stops there
//! once, and the warp's registers are gathered once), so each `add` in the row splits it and
//! costs the block another pass of its threads. Here the register-only instructions of such a
//! stretch move above it, keeping their order, wherever that changes nothing a thread computes:
//! an instruction moves only past warp matrix instructions that neither write a register it
//! reads nor read or write a register it writes, and past plain barriers, which touch no
//! register. A moved instruction touches no memory and cannot fail, so even a faulting
//! `ldmatrix` leaves the same state behind as before (registers are not part of a fault's
//! report).
//!
//! Nothing moves across a branch target, so every target still starts the same instructions.

use std::collections::HashSet;

use crate::ptx::flow::uses_defs;
use crate::ptx::ir::{Inst, Instr, R};

/// Reorders `insts` (branch targets resolved, nothing computed from positions yet) so that each
/// stretch of warp matrix instructions and plain barriers with register-only instructions
/// between them becomes those instructions followed by the uninterrupted stretch.
pub(super) fn gather_warp_matrix_rows(insts: &mut [Instr]) {
    let mut target = vec![false; insts.len() + 1];
    for ins in insts.iter() {
        if let Inst::Bra { target: t, .. } = ins.inst {
            target[(t as usize).min(insts.len())] = true;
        }
    }
    let mut at = 0;
    while at < insts.len() {
        if !insts[at].joins_warp_run() {
            at += 1;
            continue;
        }
        let start = at;
        let (mut read, mut written) = (HashSet::<R>::new(), HashSet::<R>::new());
        let mut moved = Vec::new();
        let (mut last, mut warp) = (start, false);
        let mut pc = start;
        while pc < insts.len() && (pc == start || !target[pc]) {
            let ins = &insts[pc];
            let (uses, defs) = uses_defs(ins);
            if ins.joins_warp_run() {
                read.extend(uses);
                written.extend(defs);
                warp |= ins.inst.is_warp_matrix();
                last = pc;
            } else if ins.inst.is_register_only()
                && !uses.iter().any(|r| written.contains(r))
                && !defs.iter().any(|r| read.contains(r) || written.contains(r))
            {
                moved.push(pc);
            } else {
                break;
            }
            pc += 1;
        }
        // Register-only instructions after the stretch's last instruction stay where they are:
        // they already follow it. A stretch of barriers alone is left as it is.
        moved.retain(|&m| m < last);
        if warp && !moved.is_empty() {
            let row: Vec<Instr> = insts[start..=last].to_vec();
            let (front, back): (Vec<_>, Vec<_>) =
                row.into_iter().enumerate().partition(|(i, _)| moved.contains(&(start + i)));
            for (slot, (_, ins)) in front.into_iter().chain(back).enumerate() {
                insts[start + slot] = ins;
            }
        }
        at = last + 1;
    }
}

#[cfg(test)]
mod tests {
    use crate::ptx::ir::Inst;
    use crate::ptx::Module;

    /// A tile's row with address arithmetic between its `ldmatrix`es: what moves above the row
    /// and what must stay, and the same results as before from every engine.
    #[test]
    fn register_only_instructions_move_above_a_row_only_past_what_they_do_not_touch() {
        let ptx = "
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<40>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 tile[1024];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, tile;
    mov.u32 %r2, %tid.x;
    shl.b32 %r3, %r2, 4;
    add.u32 %r4, %r1, %r3;
    mul.lo.u32 %r30, %r2, 0x00030001;
    st.shared.v4.u32 [%r4], {%r30, %r2, %r30, %r2};
    st.shared.v4.u32 [%r4+512], {%r2, %r30, %r2, %r30};
    bar.sync 0;
    mov.f32 %f4, 0f3F800000;
    mov.f32 %f5, 0f40000000;
    mov.f32 %f6, 0f40400000;
    mov.f32 %f7, 0f40800000;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r10, %r11, %r12, %r13}, [%r4];
    add.u32 %r5, %r4, 512;
    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r14, %r15}, [%r5];
    add.u32 %r16, %r10, 1;
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, {%r10, %r11, %r12, %r13}, {%r14, %r15}, {%f4, %f5, %f6, %f7};
    ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r20, %r21}, [%r4];
    add.u32 %r4, %r4, 16;
    ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%r22, %r23}, [%r4];
    mul.wide.u32 %rd2, %r2, 32;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.f32 [%rd3], {%f0, %f1, %f2, %f3};
    st.global.v4.u32 [%rd3+16], {%r16, %r20, %r22, %r23};
    ret;
}";
        let m = Module::parse(ptx).unwrap();
        let f = &m.funcs[m.entry("k").unwrap().func as usize];
        let lines: Vec<u32> = f.insts.iter().map(|i| i.line).collect();
        let at = |line: u32| lines.iter().position(|&l| l == line).unwrap();
        let line_of = |text: &str| ptx.lines().position(|l| l.trim() == text).unwrap() as u32 + 1;
        let (ld_a, add_b, ld_b) = (
            line_of("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r10, %r11, %r12, %r13}, [%r4];"),
            line_of("add.u32 %r5, %r4, 512;"),
            line_of("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r14, %r15}, [%r5];"),
        );
        // The address of B's fragment moves above A's `ldmatrix` (and the barrier before it),
        // which now meets B's.
        assert!(at(add_b) < at(ld_a) && at(ld_a) + 1 == at(ld_b), "{lines:?}");
        assert!(f.insts[at(ld_a) - 1].inst.is_plain_barrier(), "{lines:?}");
        // An instruction reading a fragment the row wrote stays after it, and ends the row.
        let reads_fragment = line_of("add.u32 %r16, %r10, 1;");
        assert_eq!(at(reads_fragment), at(ld_b) + 1);
        assert!(matches!(f.insts[at(reads_fragment) + 1].inst, Inst::Mma(_)));
        // An instruction writing an address an `ldmatrix` before it read stays where it is.
        let bumps = line_of("add.u32 %r4, %r4, 16;");
        assert!(matches!(f.insts[at(bumps) - 1].inst, Inst::Ldmatrix { .. }));
        assert!(matches!(f.insts[at(bumps) + 1].inst, Inst::Ldmatrix { .. }));
        // Every engine gives the interpreter's results (`run_kernel` compares them).
        crate::ptx::tests::run_kernel(ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 32 * 32]], &[]).unwrap();
    }

    /// A K step as Triton's loop has it: a barrier, the next tile's addresses, the row, the loop's
    /// own arithmetic, a barrier, then the copies of the next stage. The arithmetic on both sides
    /// moves above the first barrier, which then meets the row, and the row meets the second
    /// barrier; the copies after it stay.
    #[test]
    fn arithmetic_between_barriers_and_a_row_moves_above_the_first_barrier() {
        let ptx = "
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<40>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 tile[2048];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, tile;
    mov.u32 %r2, %tid.x;
    shl.b32 %r3, %r2, 4;
    add.u32 %r4, %r1, %r3;
    mul.lo.u32 %r30, %r2, 0x00030001;
    st.shared.v4.u32 [%r4], {%r30, %r2, %r30, %r2};
    st.shared.v4.u32 [%r4+512], {%r2, %r30, %r2, %r30};
    mov.f32 %f4, 0f3F800000;
    mov.f32 %f5, 0f40000000;
    mov.f32 %f6, 0f40400000;
    mov.f32 %f7, 0f40800000;
    bar.sync 0;
    add.u32 %r5, %r4, 512;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r10, %r11, %r12, %r13}, [%r4];
    ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r14, %r15}, [%r5];
    mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3}, {%r10, %r11, %r12, %r13}, {%r14, %r15}, {%f4, %f5, %f6, %f7};
    add.u32 %r6, %r4, 1024;
    bar.sync 0;
    st.shared.v4.u32 [%r6], {%r30, %r30, %r30, %r30};
    mul.wide.u32 %rd2, %r2, 16;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.f32 [%rd3], {%f0, %f1, %f2, %f3};
    ret;
}";
        let m = Module::parse(ptx).unwrap();
        let f = &m.funcs[m.entry("k").unwrap().func as usize];
        let line_of = |text: &str| ptx.lines().position(|l| l.trim() == text).unwrap() as u32 + 1;
        let at = |text: &str| f.insts.iter().position(|i| i.line == line_of(text)).unwrap();
        let first = f.insts.iter().position(|i| i.inst.is_plain_barrier()).unwrap();
        // The two additions now come right before the first barrier, in their order.
        assert_eq!((at("add.u32 %r5, %r4, 512;"), at("add.u32 %r6, %r4, 1024;")), (first - 2, first - 1));
        // Barrier, two `ldmatrix`es, the `mma` and the second barrier are one stretch.
        let stretch: Vec<bool> = f.insts[first..first + 5].iter().map(|i| i.joins_warp_run()).collect();
        assert_eq!(stretch, [true; 5]);
        assert!(f.insts[first + 4].inst.is_plain_barrier());
        assert!(matches!(f.insts[first + 5].inst, Inst::St { .. }));
        crate::ptx::tests::run_kernel(ptx, "k", [1, 1, 1], [32, 1, 1], &[vec![0; 32 * 16]], &[]).unwrap();
    }
}
