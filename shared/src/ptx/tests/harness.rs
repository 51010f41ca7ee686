//! A tiny kernel skeleton for per-instruction tests: each thread reads one row of three 64-bit
//! inputs and writes one row of typed outputs, so a test states inputs, PTX and expected results.

use crate::ptx::*;

/// Inputs of one thread: `a`, `b`, `c` as 64-bit words. The preamble exposes them as
/// `%rd1..3` (u64), `%r1..3` (low 32 bits), `%f1..3` (low 32 bits as f32), `%fd1..3` (f64) and
/// `%h1..3` (low 16 bits). The body leaves results in `%r10`, `%f10`, `%rd10`, `%fd10`, `%r11`,
/// `%h10` and `%p1`, all zero (false) unless written.
pub(crate) struct Row {
    /// The raw output row.
    pub bytes: Vec<u8>,
    pub r: u32,
    pub f: f32,
    pub rd: u64,
    pub fd: f64,
    pub r11: u32,
    pub h: u16,
    pub p: bool,
}

pub(crate) fn skeleton(body: &str) -> String {
    format!(
        r#"
.version 8.0
.target sm_90
.address_size 64
.visible .entry t(.param .u64 out, .param .u64 inp)
{{
    .reg .pred %p<8>;
    .reg .b16 %h<16>;
    .reg .b32 %r<32>;
    .reg .f32 %f<32>;
    .reg .b64 %rd<32>;
    .reg .f64 %fd<32>;
    ld.param.u64 %rd20, [out];
    ld.param.u64 %rd21, [inp];
    mov.u32 %r20, %tid.x;
    mul.wide.u32 %rd22, %r20, 24;
    add.s64 %rd23, %rd21, %rd22;
    mul.wide.u32 %rd24, %r20, 40;
    add.s64 %rd25, %rd20, %rd24;
    ld.global.u64 %rd1, [%rd23];
    ld.global.u64 %rd2, [%rd23+8];
    ld.global.u64 %rd3, [%rd23+16];
    cvt.u32.u64 %r1, %rd1;
    cvt.u32.u64 %r2, %rd2;
    cvt.u32.u64 %r3, %rd3;
    mov.b32 %f1, %r1;
    mov.b32 %f2, %r2;
    mov.b32 %f3, %r3;
    mov.b64 %fd1, %rd1;
    mov.b64 %fd2, %rd2;
    mov.b64 %fd3, %rd3;
    cvt.u16.u32 %h1, %r1;
    cvt.u16.u32 %h2, %r2;
    cvt.u16.u32 %h3, %r3;
    mov.u32 %r10, 0;
    mov.u32 %r11, 0;
    mov.f32 %f10, 0f00000000;
    mov.u64 %rd10, 0;
    mov.f64 %fd10, 0d0000000000000000;
    mov.u16 %h10, 0;
    setp.ne.u32 %p1, 0, 0;
{body}
    st.global.u32 [%rd25], %r10;
    st.global.f32 [%rd25+4], %f10;
    st.global.u64 [%rd25+8], %rd10;
    st.global.f64 [%rd25+16], %fd10;
    st.global.u32 [%rd25+24], %r11;
    st.global.u16 [%rd25+28], %h10;
    selp.u32 %r21, 1, 0, %p1;
    st.global.u32 [%rd25+32], %r21;
    ret;
}}
"#
    )
}

/// Runs `body` once per input row (one thread each) and returns the output rows.
pub(crate) fn rows(body: &str, inputs: &[[u64; 3]]) -> Vec<Row> {
    try_rows(body, inputs).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// Runs on every engine: native code, in lanes or one thread at a time, must give the
/// interpreter's bits (or its error).
pub(crate) fn try_rows(body: &str, inputs: &[[u64; 3]]) -> Result<Vec<Row>, String> {
    let interp = try_rows_on(body, inputs, Engine::Interpreter);
    for engine in [Engine::Jit, Engine::JitScalar] {
        let native = try_rows_on(body, inputs, engine);
        match (&interp, &native) {
            (Ok(a), Ok(b)) => {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    assert_eq!(x.bytes, y.bytes, "row {i}: {engine:?} differs from the interpreter\n{body}");
                }
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{engine:?} fails differently from the interpreter\n{body}"),
            _ => panic!(
                "one engine failed: {interp:?} vs {engine:?} {native:?}\n{body}",
                interp = interp.as_ref().err(),
                native = native.as_ref().err()
            ),
        }
    }
    interp
}

fn try_rows_on(body: &str, inputs: &[[u64; 3]], engine: Engine) -> Result<Vec<Row>, String> {
    let text = skeleton(body);
    let m = Module::parse(&text).map_err(|e| e.to_string())?;
    let mut mem = Memory::new();
    let n = inputs.len();
    let inp = mem.add_region(24 * n as u64, 256).unwrap();
    let out = mem.add_region(40 * n as u64, 256).unwrap();
    let bytes: Vec<u8> = inputs.iter().flat_map(|r| r.iter().flat_map(|w| w.to_le_bytes())).collect();
    mem.write(inp, &bytes).unwrap();
    let mut params = out.to_le_bytes().to_vec();
    params.extend_from_slice(&inp.to_le_bytes());
    let dims = LaunchDims { grid: [1, 1, 1], block: [n as u32, 1, 1], dynamic_shared: 0 };
    let opts = ExecOptions { engine, ..ExecOptions::default() };
    launch(&m, "t", &dims, &params, &mem, &opts).map_err(|e| e.to_string())?;
    let o = mem.read_region(out).unwrap();
    Ok(o.chunks(40)
        .map(|c| {
            let u32_at = |k: usize| u32::from_le_bytes(c[k..k + 4].try_into().unwrap());
            let u64_at = |k: usize| u64::from_le_bytes(c[k..k + 8].try_into().unwrap());
            Row {
                bytes: c.to_vec(),
                r: u32_at(0),
                f: f32::from_bits(u32_at(4)),
                rd: u64_at(8),
                fd: f64::from_bits(u64_at(16)),
                r11: u32_at(24),
                h: u16::from_le_bytes([c[28], c[29]]),
                p: u32_at(32) != 0,
            }
        })
        .collect())
}

/// One row from 32-bit inputs.
pub(crate) fn one32(body: &str, a: u32, b: u32, c: u32) -> Row {
    rows(body, &[[a as u64, b as u64, c as u64]]).remove(0)
}

pub(crate) fn onef(body: &str, a: f32, b: f32, c: f32) -> Row {
    one32(body, a.to_bits(), b.to_bits(), c.to_bits())
}

pub(crate) fn oned(body: &str, a: f64, b: f64, c: f64) -> Row {
    rows(body, &[[a.to_bits(), b.to_bits(), c.to_bits()]]).remove(0)
}

pub(crate) fn one64(body: &str, a: u64, b: u64, c: u64) -> Row {
    rows(body, &[[a, b, c]]).remove(0)
}
