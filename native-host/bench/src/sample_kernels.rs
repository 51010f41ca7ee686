//! Small hand-written PTX kernels that `recap bench cuda` and the GPU tests build archives from, so
//! that neither needs a CUDA toolkit. `inc` does what the floor benchmark's kernel does
//! (`x[i] += 1` over `n` floats), so a chain of it is the floor's chain.

use std::io::{Seek, Write};

use shared::archive::{ArchiveWriter, KernelId, ParamDecl, ParamKind, WriteError};

/// - `inc(float* x, u32 n)`: `x[i] += 1` for `i < n`;
/// - `count_down(u32* counter, u32* acc)`: thread 0 does `counter -= 1; acc += 1`;
/// - `slow_count_down(u32* counter, u32* acc, u64 ns)`: the same after spinning `ns` nanoseconds;
/// - `stamp_spin(u64* out, u64 ns)`: thread 0 spins `ns` nanoseconds and stores its start and end
///   `%globaltimer` in `out[0..2]`;
/// - `add_u32(u32* x, u32 n, u32 v)`: `x[i] += v` for `i < n`;
/// - `poke(u64 addr, u32 v)`: stores `v` at a raw address (to make a fault on purpose).
pub const PTX: &str = r#".version 7.8
.target sm_60
.address_size 64

.visible .entry inc(.param .u64 x, .param .u32 n)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .f32 %f;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    ld.param.u32 %r5, [n];
    setp.ge.u32 %p, %r4, %r5;
    @%p bra DONE;
    ld.param.u64 %rd1, [x];
    mul.wide.u32 %rd2, %r4, 4;
    add.u64 %rd3, %rd1, %rd2;
    ld.global.f32 %f, [%rd3];
    add.f32 %f, %f, 0f3F800000;
    st.global.f32 [%rd3], %f;
DONE:
    ret;
}

.visible .entry count_down(.param .u64 counter, .param .u64 acc)
{
    .reg .pred %p;
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p, %r1, 0;
    @%p bra DONE;
    ld.param.u64 %rd1, [counter];
    ld.param.u64 %rd2, [acc];
    ld.global.u32 %r2, [%rd1];
    sub.u32 %r2, %r2, 1;
    st.global.u32 [%rd1], %r2;
    ld.global.u32 %r3, [%rd2];
    add.u32 %r3, %r3, 1;
    st.global.u32 [%rd2], %r3;
DONE:
    ret;
}

.visible .entry slow_count_down(.param .u64 counter, .param .u64 acc, .param .u64 ns)
{
    .reg .pred %p, %q;
    .reg .b32 %r<4>;
    .reg .b64 %rd<7>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p, %r1, 0;
    @%p bra DONE;
    ld.param.u64 %rd1, [counter];
    ld.param.u64 %rd2, [acc];
    ld.param.u64 %rd6, [ns];
    mov.u64 %rd3, %globaltimer;
SPIN:
    mov.u64 %rd4, %globaltimer;
    sub.u64 %rd5, %rd4, %rd3;
    setp.lt.u64 %q, %rd5, %rd6;
    @%q bra SPIN;
    ld.global.u32 %r2, [%rd1];
    sub.u32 %r2, %r2, 1;
    st.global.u32 [%rd1], %r2;
    ld.global.u32 %r3, [%rd2];
    add.u32 %r3, %r3, 1;
    st.global.u32 [%rd2], %r3;
DONE:
    ret;
}

.visible .entry stamp_spin(.param .u64 out, .param .u64 ns)
{
    .reg .pred %p, %q;
    .reg .b32 %r1;
    .reg .b64 %rd<6>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p, %r1, 0;
    @%p bra DONE;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [ns];
    mov.u64 %rd3, %globaltimer;
SPIN:
    mov.u64 %rd4, %globaltimer;
    sub.u64 %rd5, %rd4, %rd3;
    setp.lt.u64 %q, %rd5, %rd2;
    @%q bra SPIN;
    st.global.u64 [%rd1], %rd3;
    st.global.u64 [%rd1+8], %rd4;
DONE:
    ret;
}

.visible .entry add_u32(.param .u64 x, .param .u32 n, .param .u32 v)
{
    .reg .pred %p;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    ld.param.u32 %r5, [n];
    setp.ge.u32 %p, %r4, %r5;
    @%p bra DONE;
    ld.param.u64 %rd1, [x];
    mul.wide.u32 %rd2, %r4, 4;
    add.u64 %rd3, %rd1, %rd2;
    ld.global.u32 %r6, [%rd3];
    ld.param.u32 %r7, [v];
    add.u32 %r6, %r6, %r7;
    st.global.u32 [%rd3], %r6;
DONE:
    ret;
}

.visible .entry poke(.param .u64 addr, .param .u32 v)
{
    .reg .b32 %r1;
    .reg .b64 %rd1;
    ld.param.u64 %rd1, [addr];
    ld.param.u32 %r1, [v];
    st.global.u32 [%rd1], %r1;
    ret;
}
"#;

/// The kernels of [`PTX`] in one archive.
#[derive(Clone, Copy, Debug)]
pub struct SampleKernels {
    pub inc: KernelId,
    pub count_down: KernelId,
    pub slow_count_down: KernelId,
    pub stamp_spin: KernelId,
    pub add_u32: KernelId,
    pub poke: KernelId,
}

fn pointer(name: &str, offset: u32) -> ParamDecl {
    ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Pointer }
}

fn value(name: &str, offset: u32, size: u32) -> ParamDecl {
    ParamDecl { name: name.into(), offset, size, align: size, kind: ParamKind::Value }
}

impl SampleKernels {
    /// Adds [`PTX`] as module `name` with its kernels and their parameter layouts.
    pub fn add<W: Write + Seek>(w: &mut ArchiveWriter<W>, name: &str) -> Result<Self, WriteError> {
        let m = w.add_module(name, PTX)?;
        Ok(SampleKernels {
            inc: w.add_kernel(m, "inc", vec![pointer("x", 0), value("n", 8, 4)])?,
            count_down: w.add_kernel(m, "count_down", vec![pointer("counter", 0), pointer("acc", 8)])?,
            slow_count_down: w.add_kernel(
                m,
                "slow_count_down",
                vec![pointer("counter", 0), pointer("acc", 8), value("ns", 16, 8)],
            )?,
            stamp_spin: w.add_kernel(m, "stamp_spin", vec![pointer("out", 0), value("ns", 8, 8)])?,
            add_u32: w.add_kernel(m, "add_u32", vec![pointer("x", 0), value("n", 8, 4), value("v", 12, 4)])?,
            poke: w.add_kernel(m, "poke", vec![value("addr", 0, 8), value("v", 8, 4)])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_kernel_parses_with_the_declared_parameter_layout() {
        let module = shared::ptx::Module::parse(PTX).expect("sample PTX parses");
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
        SampleKernels::add(&mut w, "samples").unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let archive = shared::archive::Archive::open(&bytes).unwrap();
        assert_eq!(archive.kernel_count(), 6);
        for k in archive.kernels() {
            let entry = module.entry(k.name).unwrap_or_else(|| panic!("no entry {}", k.name));
            let declared: Vec<(u32, u32)> = k.params.iter().map(|p| (p.offset, p.size)).collect();
            let parsed: Vec<(u32, u32)> = entry.params().iter().map(|p| (p.offset, p.size)).collect();
            assert_eq!(declared, parsed, "{}", k.name);
        }
    }
}
