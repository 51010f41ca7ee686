//! Hostile PTX ends in a clear error, never a panic or a hang.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::run_kernel;
use crate::ptx::*;

const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

fn indexed(op: &str) -> String {
    format!(
        "{HEAD}
.visible .entry k(.param .u64 buf, .param .u32 idx)
{{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [buf];
    ld.param.u32 %r1, [idx];
    mov.u32 %r2, %tid.x;
    setp.eq.u32 %p1, %r2, 5;
    @!%p1 bra END;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    {op}
END:
    ret;
}}"
    )
}

#[test]
fn out_of_bounds_read_and_write_name_kernel_block_thread_and_address() {
    let ptx = indexed("ld.global.u32 %r3, [%rd3];");
    // One block: where blocks running in parallel both fault, the first to stop wins (docs/PTX.md),
    // so which block an engine names could differ from run to run.
    let err = run_kernel(&ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 16]], &4u32.to_le_bytes()).unwrap_err();
    assert!(err.contains("kernel `k`"), "{err}");
    assert!(err.contains("thread [5, 0, 0]"), "{err}");
    assert!(err.contains("out-of-bounds read"), "{err}");
    assert!(err.contains("block [0, 0, 0]"), "{err}");
    let ptx = indexed("st.global.u32 [%rd3+-4], %r1;");
    let err = run_kernel(&ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 16]], &0u32.to_le_bytes()).unwrap_err();
    assert!(err.contains("out-of-bounds write"), "{err}");
    // Far past the end lands in no region at all, and the neighbour is untouched.
    let m = Module::parse(&ptx).unwrap();
    let mut mem = Memory::new();
    let a = mem.add_region(16, 256).unwrap();
    let b = mem.add_region(16, 256).unwrap();
    let mut params = a.to_le_bytes().to_vec();
    params.extend_from_slice(&u32::MAX.to_le_bytes());
    let dims = LaunchDims { grid: [1, 1, 1], block: [8, 1, 1], dynamic_shared: 0 };
    let err = launch(&m, "k", &dims, &params, &mem, &ExecOptions::default()).unwrap_err();
    assert!(matches!(err, ExecError::Memory { .. }), "{err}");
    assert_eq!(mem.read_region(b).unwrap(), vec![0; 16]);
}

#[test]
fn misaligned_and_null_accesses_fail() {
    let ptx = indexed("ld.global.u32 %r3, [%rd3+2];");
    let err = run_kernel(&ptx, "k", [1, 1, 1], [8, 1, 1], &[vec![0; 16]], &0u32.to_le_bytes()).unwrap_err();
    assert!(err.contains("misaligned read"), "{err}");
    let ptx = format!(
        "{HEAD}
.visible .entry k()
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    mov.u64 %rd1, 0;
    ld.u32 %r1, [%rd1];
    ret;
}}"
    );
    let err = run_kernel(&ptx, "k", [1, 1, 1], [1, 1, 1], &[], &[]).unwrap_err();
    assert!(err.contains("out-of-bounds read") && err.contains("0x0"), "{err}");
}

#[test]
fn writes_to_constant_memory_fail() {
    let ptx = format!(
        "{HEAD}
.const .align 4 .u32 c[2] = {{1, 2}};
.visible .entry k()
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    mov.u64 %rd1, c;
    cvta.const.u64 %rd2, %rd1;
    st.u32 [%rd2], 7;
    ret;
}}"
    );
    let err = run_kernel(&ptx, "k", [1, 1, 1], [1, 1, 1], &[], &[]).unwrap_err();
    assert!(err.contains("read-only"), "{err}");
}

fn spin() -> String {
    format!(
        "{HEAD}
.visible .entry k()
{{
LOOP:
    bra.uni LOOP;
}}"
    )
}

#[test]
fn an_infinite_loop_is_stopped_by_the_budget() {
    let m = Module::parse(&spin()).unwrap();
    let mem = Memory::new();
    let dims = LaunchDims { grid: [4, 1, 1], block: [32, 1, 1], dynamic_shared: 0 };
    // Native code runs this block of 32 in groups of threads; the budget holds on every engine.
    for engine in [Engine::Jit, Engine::JitScalar, Engine::Interpreter] {
        let opts = ExecOptions { instruction_budget: Some(5_000_000), engine, ..Default::default() };
        let err = launch(&m, "k", &dims, &[], &mem, &opts).unwrap_err();
        assert!(matches!(err, ExecError::Budget { budget: 5_000_000, .. }), "{engine:?}: {err}");
    }
}

#[test]
fn an_infinite_loop_is_stopped_by_the_cancel_flag() {
    let m = Module::parse(&spin()).unwrap();
    let mem = Memory::new();
    let dims = LaunchDims { grid: [4, 1, 1], block: [32, 1, 1], dynamic_shared: 0 };
    for engine in [Engine::Jit, Engine::JitScalar, Engine::Interpreter] {
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let f = flag.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                f.store(true, std::sync::atomic::Ordering::Relaxed);
            })
        };
        let opts = ExecOptions { cancel: Some(flag), engine, ..Default::default() };
        let err = launch(&m, "k", &dims, &[], &mem, &opts).unwrap_err();
        setter.join().unwrap();
        assert!(matches!(err, ExecError::Cancelled { .. }), "{engine:?}: {err}");
    }
}

#[test]
fn huge_shared_memory_is_a_clear_error() {
    let ptx = format!("{HEAD}\n.visible .entry k()\n{{\n    .shared .align 4 .b8 big[300000];\n    ret;\n}}");
    let err = Module::parse(&ptx).unwrap_err();
    assert!(
        err.to_string()
            .contains("kernel `k` needs 300000 bytes of static shared memory, which exceeds the 233472 byte limit"),
        "{err}"
    );
    assert_eq!(err.line, 5, "the kernel's line");
    let ptx = format!("{HEAD}\n.extern .shared .align 16 .b8 d[];\n.visible .entry k()\n{{\n    ret;\n}}");
    let m = Module::parse(&ptx).unwrap();
    let dims = LaunchDims { grid: [1, 1, 1], block: [1, 1, 1], dynamic_shared: 1 << 30 };
    let err = launch(&m, "k", &dims, &[], &Memory::new(), &ExecOptions::default()).unwrap_err();
    assert!(matches!(err, ExecError::BadLaunch { .. }), "{err}");
    assert!(err.to_string().contains("shared memory"), "{err}");
    let ptx = format!("{HEAD}\n.visible .entry k()\n{{\n    .local .align 4 .b8 big[100000000];\n    ret;\n}}");
    assert!(Module::parse(&ptx).unwrap_err().to_string().contains("local frame"));
}

#[test]
fn calls_of_undefined_or_bodiless_functions_fail_at_load() {
    let ptx = format!("{HEAD}\n.visible .entry k()\n{{\n    call.uni nowhere, ();\n    ret;\n}}");
    let err = Module::parse(&ptx).unwrap_err();
    assert!(err.to_string().contains("undeclared function `nowhere`"), "{err}");
    assert_eq!(err.line, 7);
    let ptx = format!(
        "{HEAD}\n.extern .func (.param .b32 r) vprintf(.param .b64 f, .param .b64 a);\n.visible .entry k()\n{{\n    .param .b32 r0;\n    .param .b64 a0;\n    .param .b64 a1;\n    call.uni (r0), vprintf, (a0, a1);\n    ret;\n}}"
    );
    let err = Module::parse(&ptx).unwrap_err();
    assert!(err.to_string().contains("`vprintf`, which has no body"), "{err}");
    let ptx = format!(
        "{HEAD}\n.func f()\n{{\n    call.uni f, ();\n    ret;\n}}\n.visible .entry k()\n{{\n    call.uni f, ();\n    ret;\n}}"
    );
    assert!(Module::parse(&ptx).unwrap_err().to_string().contains("recursive"));
}

#[test]
fn unsupported_instructions_are_named_with_their_line() {
    let ptx = format!(
        "{HEAD}\n.visible .entry k()\n{{\n    .reg .f32 %f<4>;\n    .reg .b64 %rd<2>;\n    tex.2d.v4.f32.f32 {{%f0, %f1, %f2, %f3}}, [%rd1, {{%f0, %f1}}];\n    ret;\n}}"
    );
    let err = Module::parse(&ptx).unwrap_err();
    assert_eq!(err.line, 9, "{err}");
    assert!(err.message.contains("tex.2d.v4.f32.f32"), "{err}");
    let ptx = format!(
        "{HEAD}\n.visible .entry k()\n{{\n    .reg .b32 %r<2>;\n    mad.lo.cc.u32 %r1, %r1, 1, 2;\n    ret;\n}}"
    );
    let err = Module::parse(&ptx).unwrap_err();
    assert!(err.message.contains("unsupported instruction `mad.lo.cc.u32`"), "{err}");
}

#[test]
fn malformed_text_and_bad_launches_are_errors() {
    for bad in
        ["", ".version 8.0 .target", "garbage here", ".visible .entry k( {", ".visible .entry k() { bra NOWHERE; }"]
    {
        let _ = Module::parse(bad).map(|m| assert!(m.entries().is_empty(), "{bad}"));
    }
    let err = Module::parse(&format!("{HEAD}\n.visible .entry k() {{ bra NOWHERE; }}")).unwrap_err();
    assert!(err.to_string().contains("undefined label `NOWHERE`"), "{err}");
    let err = Module::parse(&format!("{HEAD}\n.visible .entry k() {{ add.s32 %r1, %r1, 1; }}")).unwrap_err();
    assert!(err.to_string().contains("undeclared"), "{err}");
    let m = Module::parse(&format!("{HEAD}\n.visible .entry k(.param .u64 a) {{ ret; }}")).unwrap();
    let mem = Memory::new();
    let run = |dims: LaunchDims, params: &[u8]| launch(&m, "k", &dims, params, &mem, &ExecOptions::default());
    let one = LaunchDims { grid: [1, 1, 1], block: [1, 1, 1], dynamic_shared: 0 };
    assert!(matches!(run(one, &[0; 4]), Err(ExecError::BadLaunch { .. })), "short parameters");
    assert!(matches!(run(LaunchDims { block: [1025, 1, 1], ..one }, &[0; 8]), Err(ExecError::BadLaunch { .. })));
    assert!(matches!(run(LaunchDims { grid: [0, 1, 1], ..one }, &[0; 8]), Err(ExecError::BadLaunch { .. })));
    assert!(matches!(
        launch(&m, "nope", &one, &[0; 8], &mem, &ExecOptions::default()),
        Err(ExecError::NoSuchKernel(_))
    ));
    assert!(run(one, &[0; 8]).is_ok());
}

#[test]
fn trap_stops_the_launch() {
    let ptx = format!("{HEAD}\n.visible .entry k()\n{{\n    trap;\n}}");
    let err = run_kernel(&ptx, "k", [1, 1, 1], [4, 1, 1], &[], &[]).unwrap_err();
    assert!(err.contains("trap"), "{err}");
}
