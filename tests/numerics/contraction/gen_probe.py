#!/usr/bin/env python3
"""Writes probe.ptx: one kernel per shape of a PTX multiply feeding an add, the shapes whose
contraction by ptxas recap's CPU engines model (shared/src/ptx/lower/contract.rs).

Every kernel reads a[i], b[i], c[i], d[i] and writes out[2i], out[2i+1] (0 where a shape has one
result). run_probe.sh compiles them with ptxas, disassembles them and runs them on the GPU.
"""

F32 = dict(t="f32", r="%f", size=4, zero="0f00000000", one="0f3F800000", imm="0f3FB504F3")
F64 = dict(t="f64", r="%fd", size=8, zero="0d0000000000000000", one="0d3FF0000000000000",
           imm="0d3FF6A09E667F3BCD")

# name -> (format, body). In the body, A B C D are the inputs, X Y the outputs, T U V W scratch
# registers of the kernel's float type, P a predicate, N the element count (u32).
SHAPES = [
    ("add_mul", F32, "mul.f32 T, A, B; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("add_x_mul", F32, "mul.f32 T, A, B; add.f32 X, C, T; mov.f32 Y, ZERO;"),
    ("sub_mul_x", F32, "mul.f32 T, A, B; sub.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("sub_x_mul", F32, "mul.f32 T, A, B; sub.f32 X, C, T; mov.f32 Y, ZERO;"),
    ("mul_also_stored", F32, "mul.f32 T, A, B; add.f32 X, T, C; mov.f32 Y, T;"),
    ("mul_two_adds", F32, "mul.f32 T, A, B; add.f32 X, T, C; add.f32 Y, T, D;"),
    ("mul_add_and_sub", F32, "mul.f32 T, A, B; add.f32 X, T, C; sub.f32 Y, D, T;"),
    ("mul_add_and_mul", F32, "mul.f32 T, A, B; add.f32 X, T, C; mul.f32 Y, T, D;"),
    ("mul_add_and_setp", F32, "mul.f32 T, A, B; add.f32 X, T, C; setp.gt.f32 P, T, D; selp.f32 Y, ONE, ZERO, P;"),
    ("rn_mul", F32, "mul.rn.f32 T, A, B; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("rn_add", F32, "mul.f32 T, A, B; add.rn.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("rn_sub", F32, "mul.f32 T, A, B; sub.rn.f32 X, C, T; mov.f32 Y, ZERO;"),
    ("rz_add", F32, "mul.f32 T, A, B; add.rz.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("ftz_both", F32, "mul.ftz.f32 T, A, B; add.ftz.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("ftz_mul", F32, "mul.ftz.f32 T, A, B; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("ftz_add", F32, "mul.f32 T, A, B; add.ftz.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("sat_add", F32, "mul.f32 T, A, B; add.sat.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("sat_mul", F32, "mul.sat.f32 T, A, B; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("neg_product", F32, "mul.f32 T, A, B; neg.f32 U, T; add.f32 X, U, C; mov.f32 Y, ZERO;"),
    ("neg_operand", F32, "neg.f32 U, A; mul.f32 T, U, B; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("via_mov", F32, "mul.f32 T, A, B; mov.f32 U, T; add.f32 X, U, C; mov.f32 Y, ZERO;"),
    ("two_products_add", F32, "mul.f32 T, A, B; mul.f32 U, C, D; add.f32 X, T, U; mov.f32 Y, ZERO;"),
    ("two_products_sub", F32, "mul.f32 T, A, B; mul.f32 U, C, D; sub.f32 X, T, U; mov.f32 Y, ZERO;"),
    ("two_products_rev", F32, "mul.f32 U, C, D; mul.f32 T, A, B; add.f32 X, T, U; mov.f32 Y, ZERO;"),
    ("complex_mul", F32, "mul.f32 T, A, C; mul.f32 U, B, D; sub.f32 X, T, U; mul.f32 V, A, D; mul.f32 W, B, C; add.f32 Y, V, W;"),
    ("imm_mul", F32, "mul.f32 T, A, IMM; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("chain", F32, "mul.f32 T, A, B; add.f32 U, T, C; mul.f32 V, U, D; add.f32 X, V, A; mov.f32 Y, ZERO;"),
    ("add_then_add", F32, "mul.f32 T, A, B; add.f32 U, T, C; add.f32 X, U, D; mov.f32 Y, ZERO;"),
    ("add_used_twice", F32, "mul.f32 T, A, B; add.f32 X, T, C; mul.f32 Y, X, D;"),
    ("mul_of_sum", F32, "add.f32 T, A, B; mul.f32 U, T, C; add.f32 X, U, D; mov.f32 Y, ZERO;"),
    ("uniform_block", F32,
     "mul.f32 T, A, B; setp.eq.u32 P, N, 77777; @P bra $L_skip; add.f32 X, T, C; mov.f32 Y, ZERO; bra $L_join;"
     " $L_skip: mov.f32 X, ZERO; mov.f32 Y, ZERO; $L_join:"),
    ("divergent_block", F32,
     "mul.f32 T, A, B; setp.gt.f32 P, C, ZERO; @P bra $L_pos; add.f32 X, T, D; bra $L_join;"
     " $L_pos: add.f32 X, T, C; $L_join: mov.f32 Y, ZERO;"),
    ("loop_acc", F32,
     "mov.f32 X, C; mov.u32 %r9, 0; $L_top: mul.f32 T, A, B; add.f32 X, X, T; mov.f32 A, X; add.u32 %r9, %r9, 1;"
     " setp.lt.u32 P, %r9, 3; @P bra $L_top; mov.f32 Y, ZERO;"),
    ("mul_before_loop", F32,
     "mul.f32 T, A, B; mov.f32 X, C; mov.u32 %r9, 0; $L_top: add.f32 X, X, T; add.u32 %r9, %r9, 1;"
     " setp.lt.u32 P, %r9, 2; @P bra $L_top; mov.f32 Y, ZERO;"),
    ("loop_runtime_trip", F32,
     "mul.f32 T, A, B; mov.f32 X, C; shr.u32 %r9, N, 7; $L_top: add.f32 X, X, T; sub.u32 %r9, %r9, 1;"
     " setp.ne.u32 P, %r9, 0; @P bra $L_top; mov.f32 Y, ZERO;"),
    ("uses_here_and_later", F32,
     "mul.f32 T, A, B; add.f32 X, T, C; setp.eq.u32 P, N, 77777; @P bra $L_skip; add.f32 Y, T, D; bra $L_join;"
     " $L_skip: mov.f32 Y, ZERO; $L_join:"),
    ("guarded_same", F32,
     "mov.f32 X, ZERO; setp.gt.f32 P, D, ZERO; @P mul.f32 T, A, B; @P add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("across_barrier", F32, "mul.f32 T, A, B; bar.sync 0; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("across_store", F32,
     "mul.f32 T, A, B; st.global.f32 [%rd12], C; add.f32 X, T, C; mov.f32 Y, ZERO;"),
    ("product_twice", F32, "mul.f32 T, A, B; add.f32 X, T, T; mov.f32 Y, ZERO;"),
    ("first_kept_second_free", F32,
     "mul.f32 T, A, B; mul.f32 U, C, D; add.f32 X, T, U; mov.f32 Y, T;"),
    ("second_also_alone", F32,
     "mul.f32 T, A, B; mul.f32 U, C, D; add.f32 X, T, U; add.f32 Y, U, A;"),
    ("first_also_alone", F32,
     "mul.f32 T, A, B; mul.f32 U, C, D; add.f32 X, T, U; add.f32 Y, T, D;"),
    ("sub_sub", F32, "mul.f32 T, A, B; sub.f32 U, C, T; sub.f32 X, U, D; neg.f32 Y, T;"),
    ("neg_then_sub", F32, "mul.f32 T, A, B; neg.f32 U, T; sub.f32 X, U, C; mov.f32 Y, ZERO;"),
    ("mov_two_adds", F32, "mul.f32 T, A, B; mov.f32 U, T; add.f32 X, U, C; add.f32 Y, T, D;"),
    ("source_redefined", F32, "mul.f32 T, A, B; add.f32 A, A, D; add.f32 X, T, C; mov.f32 Y, A;"),
    ("add_mul_f16x2", F32,
     "cvt.rn.f16x2.f32 %r9, A, B; cvt.rn.f16x2.f32 %r10, C, D; mul.f16x2 %r11, %r9, %r10;"
     " add.f16x2 %r8, %r11, %r9; mov.b32 {%h1, %h2}, %r8; cvt.f32.f16 X, %h1; cvt.f32.f16 Y, %h2;"),
    ("add_mul_f64", F64, "mul.f64 T, A, B; add.f64 X, T, C; mov.f64 Y, ZERO;"),
    ("sub_x_mul_f64", F64, "mul.f64 T, A, B; sub.f64 X, C, T; mov.f64 Y, ZERO;"),
    ("mul_two_adds_f64", F64, "mul.f64 T, A, B; add.f64 X, T, C; add.f64 Y, T, D;"),
    ("rn_add_f64", F64, "mul.f64 T, A, B; add.rn.f64 X, T, C; mov.f64 Y, ZERO;"),
    ("two_products_sub_f64", F64, "mul.f64 T, A, B; mul.f64 U, C, D; sub.f64 X, T, U; mov.f64 Y, ZERO;"),
    ("complex_mul_f64", F64, "mul.f64 T, A, C; mul.f64 U, B, D; sub.f64 X, T, U; mul.f64 V, A, D; mul.f64 W, B, C; add.f64 Y, V, W;"),
    ("add_mul_f16", F32,
     "cvt.rn.f16.f32 %h1, A; cvt.rn.f16.f32 %h2, B; cvt.rn.f16.f32 %h3, C; mul.f16 %h4, %h1, %h2;"
     " add.f16 %h5, %h4, %h3; cvt.f32.f16 X, %h5; mov.f32 Y, ZERO;"),
]


def kernel(name, fmt, body):
    r, t, size = fmt["r"], fmt["t"], fmt["size"]
    regs = dict(A=f"{r}1", B=f"{r}2", C=f"{r}3", D=f"{r}4", X=f"{r}10", Y=f"{r}11", T=f"{r}20",
                U=f"{r}21", V=f"{r}22", W=f"{r}23", P="%p2", N="%r1", ZERO=fmt["zero"],
                ONE=fmt["one"], IMM=fmt["imm"])
    regs["@P"] = "@%p2"
    stmts = []
    for s in body.split(";"):
        s = s.strip()
        if not s:
            continue
        words = s.replace(",", " , ").split()
        s = " ".join(regs.get(w, w) for w in words).replace(" , ", ", ")
        # a label and the instruction after it
        stmts.append(s.replace(": ", ":\n\t") + (";" if not s.endswith(":") else ""))
    lines = [
        f".visible .entry {name}(",
        "\t.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd, .param .u64 po, .param .u32 pn)",
        "{",
        "\t.reg .pred %p<4>;", "\t.reg .b32 %r<12>;", "\t.reg .f32 %f<32>;", "\t.reg .f64 %fd<32>;",
        "\t.reg .b16 %h<8>;", "\t.reg .b64 %rd<24>;",
        "\tld.param.u32 %r1, [pn];",
        "\tmov.u32 %r2, %ctaid.x;", "\tmov.u32 %r3, %ntid.x;", "\tmov.u32 %r4, %tid.x;",
        "\tmad.lo.s32 %r5, %r2, %r3, %r4;",
        "\tsetp.ge.u32 %p1, %r5, %r1;", "\t@%p1 bra $L_done;",
        f"\tmul.wide.u32 %rd1, %r5, {size};",
    ]
    for k, (p, reg) in enumerate(zip("abcd", "ABCD")):
        lines += [f"\tld.param.u64 %rd{10 + k}, [p{p}];", f"\tcvta.to.global.u64 %rd{10 + k}, %rd{10 + k};",
                  f"\tadd.s64 %rd{10 + k}, %rd{10 + k}, %rd1;", f"\tld.global.{t} {regs[reg]}, [%rd{10 + k}];"]
    lines += ["\t" + s for s in stmts]
    lines += ["\tld.param.u64 %rd20, [po];", "\tcvta.to.global.u64 %rd20, %rd20;",
              f"\tmul.wide.u32 %rd2, %r5, {2 * size};", "\tadd.s64 %rd20, %rd20, %rd2;",
              f"\tst.global.{t} [%rd20], {regs['X']};", f"\tst.global.{t} [%rd20+{size}], {regs['Y']};",
              "$L_done:", "\tret;", "}", ""]
    return "\n".join(lines)


def main():
    out = ["// Generated by gen_probe.py: shapes of a multiply feeding an add, for ptxas's contraction.",
           ".version 8.0", ".target sm_90", ".address_size 64", ""]
    for name, fmt, body in SHAPES:
        out.append(kernel(name, fmt, body))
    with open("probe.ptx", "w") as f:
        f.write("\n".join(out))
    with open("kernels.txt", "w") as f:
        f.write("".join(f"{n} {fmt['t']}\n" for n, fmt, _ in SHAPES))


if __name__ == "__main__":
    main()
