//! Static shared memory laid out per kernel: a block holds the variables its kernel reaches (its
//! own, and those of the functions it calls, transitively), and the size limit is per kernel.

use super::run_kernel;
use crate::ptx::*;

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// A kernel of 128 threads: thread `t` writes `t * mul + add` at both ends of `var` (its word `t`
/// from the bottom and from the top), waits at a barrier, then reads back its neighbour's two
/// words into `out[2t]` and `out[2t + 1]`.
fn both_ends(name: &str, var: &str, bytes: u32, mul: u32, add: u32) -> String {
    let top = bytes - 4;
    format!(
        "
.visible .entry {name}(.param .u64 out)
{{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mad.lo.u32 %r2, %r1, {mul}, {add};
    mov.u32 %r3, {var};
    shl.b32 %r4, %r1, 2;
    add.u32 %r5, %r3, %r4;
    st.shared.u32 [%r5], %r2;
    mov.u32 %r6, {top};
    sub.u32 %r6, %r6, %r4;
    add.u32 %r6, %r3, %r6;
    st.shared.u32 [%r6], %r2;
    bar.sync 0;
    add.u32 %r7, %r1, 1;
    and.b32 %r7, %r7, 127;
    shl.b32 %r8, %r7, 2;
    add.u32 %r9, %r3, %r8;
    ld.shared.u32 %r10, [%r9];
    mov.u32 %r6, {top};
    sub.u32 %r6, %r6, %r8;
    add.u32 %r6, %r3, %r6;
    ld.shared.u32 %r11, [%r6];
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {{%r10, %r11}};
    ret;
}}"
    )
}

#[test]
fn two_kernels_of_150_kib_each_load_and_each_runs() {
    const BYTES: u32 = 150 * 1024;
    let ptx = format!(
        "{HEAD}.shared .align 4 .b8 sa[{BYTES}];\n.shared .align 4 .b8 sb[{BYTES}];\n{}\n{}",
        both_ends("ka", "sa", BYTES, 3, 1),
        both_ends("kb", "sb", BYTES, 5, 2)
    );
    let m = Module::parse(&ptx).unwrap();
    for k in ["ka", "kb"] {
        assert_eq!(m.entry(k).unwrap().static_shared_bytes(), BYTES, "{k}");
    }
    for (k, mul, add) in [("ka", 3, 1), ("kb", 5, 2)] {
        let out = run_kernel(&ptx, k, [2, 1, 1], [128, 1, 1], &[vec![0; 128 * 8]], &[]).unwrap();
        let w = words(&out[0]);
        for t in 0..128u32 {
            let want = ((t + 1) % 128) * mul + add;
            assert_eq!([w[2 * t as usize], w[2 * t as usize + 1]], [want, want], "{k} thread {t}");
        }
    }
}

/// A call of `func` with one `.b32` argument, its result into `result`.
fn call(func: &str, arg: &str, result: &str) -> String {
    format!(
        "    {{
    .param .b32 p0;
    .param .b32 r0;
    st.param.b32 [p0], {arg};
    call.uni (r0), {func}, (p0);
    ld.param.b32 {result}, [r0];
    }}
"
    )
}

/// `outer` calls `put`, which alone names `big`: thread `t` stores `t + 1000` at its word from the
/// top of `big` and returns what it reads back there.
fn put() -> String {
    format!(
        "
.func (.param .b32 rv) put(.param .b32 t)
{{
    .reg .b32 %r<8>;
    ld.param.b32 %r1, [t];
    mov.u32 %r2, big;
    shl.b32 %r3, %r1, 2;
    add.u32 %r5, %r1, 1000;
    add.u32 %r4, %r2, %r3;
    st.shared.u32 [%r4], %r5;
    mov.u32 %r6, 163836;
    sub.u32 %r6, %r6, %r3;
    add.u32 %r6, %r2, %r6;
    st.shared.u32 [%r6], %r5;
    ld.shared.u32 %r7, [%r6];
    st.param.b32 [rv], %r7;
    ret;
}}
.func (.param .b32 rv) outer(.param .b32 t)
{{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [t];
{}    st.param.b32 [rv], %r2;
    ret;
}}
",
        call("put", "%r1", "%r2")
    )
}

/// `with_lo` fills its own `lo`, calls `outer`, and reports what the call returned and what `lo`
/// holds after it; `only_big` names no shared variable itself.
fn callers() -> String {
    format!(
        "
.visible .entry with_lo(.param .u64 out)
{{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, lo;
    shl.b32 %r3, %r1, 2;
    add.u32 %r3, %r2, %r3;
    add.u32 %r4, %r1, 500;
    st.shared.u32 [%r3], %r4;
{}    bar.sync 0;
    ld.shared.u32 %r6, [%r3];
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.v2.u32 [%rd3], {{%r5, %r6}};
    ret;
}}
.visible .entry only_big(.param .u64 out)
{{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
{}    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r2;
    ret;
}}
",
        call("outer", "%r1", "%r5"),
        call("outer", "%r1", "%r2")
    )
}

#[test]
fn a_function_touching_shared_memory_counts_for_the_kernels_calling_it() {
    // `lo` comes first, so `big` lies after it in `with_lo`'s block and at 0 in `only_big`'s: each
    // kernel gets a copy of `put` for its own block.
    let ptx = format!(
        "{HEAD}.shared .align 4 .b8 lo[1024];\n.shared .align 4 .b8 big[163840];\n.shared .align 4 .b8 huge[81920];\n{}{}",
        put(),
        callers()
    );
    let m = Module::parse(&ptx).unwrap();
    assert_eq!(m.entry("with_lo").unwrap().static_shared_bytes(), 1024 + 163840);
    assert_eq!(m.entry("only_big").unwrap().static_shared_bytes(), 163840);

    let out = run_kernel(&ptx, "with_lo", [1, 1, 1], [128, 1, 1], &[vec![0; 128 * 8]], &[]).unwrap();
    let w = words(&out[0]);
    for t in 0..128u32 {
        // `put` wrote `big` without touching `lo`.
        assert_eq!([w[2 * t as usize], w[2 * t as usize + 1]], [t + 1000, t + 500], "thread {t}");
    }
    let out = run_kernel(&ptx, "only_big", [1, 1, 1], [128, 1, 1], &[vec![0; 128 * 4]], &[]).unwrap();
    assert_eq!(words(&out[0]), (0..128u32).map(|t| t + 1000).collect::<Vec<_>>());

    // A kernel with 80 KiB of its own that calls `outer` needs 240 KiB: refused, named.
    let both = format!(
        "
.visible .entry both()
{{
    .reg .b32 %r<4>;
    mov.u32 %r1, huge;
{}    ret;
}}
",
        call("outer", "%r1", "%r2")
    );
    let ptx = format!("{ptx}{both}");
    let line = ptx.lines().position(|l| l.contains(".entry both")).unwrap() + 1;
    let e = Module::parse(&ptx).unwrap_err();
    assert_eq!(e.line as usize, line, "{e}");
    assert!(
        e.message.contains("kernel `both` needs 245760 bytes of static shared memory")
            && e.message.contains("233472 byte limit"),
        "{e}"
    );
}

#[test]
fn one_kernel_over_the_limit_is_refused_by_name() {
    let ptx = format!(
        "{HEAD}.shared .align 4 .b8 s1[122880];\n.shared .align 4 .b8 s2[122880];\n.shared .align 4 .b8 small[4096];\n{}\n{}",
        both_ends("fits", "small", 4096, 1, 0),
        "
.visible .entry too_big(.param .u64 out)
{
    .reg .b32 %r<3>;
    mov.u32 %r1, s1;
    mov.u32 %r2, s2;
    ret;
}"
    );
    let e = Module::parse(&ptx).unwrap_err();
    assert!(e.message.contains("kernel `too_big` needs 245760 bytes of static shared memory"), "{e}");
    // Without it the module loads, and the other kernel's block is its own array.
    let fits = ptx.split(".visible .entry too_big").next().unwrap();
    assert_eq!(Module::parse(fits).unwrap().entry("fits").unwrap().static_shared_bytes(), 4096);
}

#[test]
fn dynamic_shared_memory_follows_each_kernels_own_variables() {
    // `first` has 64 bytes of its own, `second` 200 KiB: dynamic memory starts after each one's.
    // Each kernel stores how far `dyn` lies past its own variable.
    let distance = |name: &str, var: &str| {
        format!(
            "
.visible .entry {name}(.param .u64 out)
{{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, {var};
    mov.u32 %r2, dyn;
    sub.u32 %r3, %r2, %r1;
    st.global.u32 [%rd1], %r3;
    ret;
}}"
        )
    };
    let ptx = format!(
        "{HEAD}.shared .align 4 .b8 a[64];\n.shared .align 4 .b8 b[204800];\n.extern .shared .align 16 .b8 dyn[];\n{}{}",
        distance("first", "a"),
        distance("second", "b")
    );
    let m = Module::parse(&ptx).unwrap();
    assert_eq!(m.entry("first").unwrap().static_shared_bytes(), 64);
    assert_eq!(m.entry("second").unwrap().static_shared_bytes(), 204800);
    for (k, want) in [("first", 64), ("second", 204800)] {
        let out = run_kernel(&ptx, k, [1, 1, 1], [1, 1, 1], &[vec![0; 4]], &[]).unwrap();
        assert_eq!(words(&out[0]), [want], "{k}");
    }
}
