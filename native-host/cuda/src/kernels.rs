//! Small kernels recap generates in PTX for what the graph API has no node for.
//!
//! - `recap_set_condition` sets a conditional node's handle from the archive's condition word
//!   (non-zero is true), bounded by an iteration counter. It calls `cudaGraphSetConditional`
//!   declared as an `.extern .func`: the driver resolves it when the module loads, so neither
//!   libcudadevrt nor a CUDA toolkit is needed at run time.
//! - `recap_fill_u64` fills 8-byte patterns whose two halves differ (memset nodes take 1, 2 or 4
//!   byte elements only); `recap_fill_bytes` fills any pattern at any alignment.

/// Entry points of [`CONDITION_MODULE`] and [`FILL_MODULE`].
pub const SET_CONDITION: &str = "recap_set_condition";
pub const FILL_U64: &str = "recap_fill_u64";
pub const FILL_BYTES: &str = "recap_fill_bytes";

/// Threads per block of the fill kernels.
pub const FILL_BLOCK: u32 = 256;

/// Blocks for a grid-stride fill of `n` items: enough to fill the GPU, never more than needed.
pub fn fill_grid(n: u64) -> u32 {
    n.div_ceil(FILL_BLOCK as u64).clamp(1, 4096) as u32
}

/// `recap_set_condition(handle, word, counter, max_iterations, first)`:
/// for a bounded loop, with `first != 0` the counter restarts at 0 (before a loop or an if),
/// otherwise it counts one finished iteration (an unbounded loop never touches it); the handle is
/// set to `word != 0 && (max_iterations == 0 || counter < max_iterations)`.
/// When the limit is what stops the loop (`word != 0`, `counter >= max_iterations`), the u32 after
/// the counter goes up by one: the host reads it to say so, since nothing else would.
/// A module of its own: a driver without conditional nodes cannot resolve the extern.
pub const CONDITION_MODULE: &str = concat!(".version 7.8\n.target sm_60\n", condition_kernel!(""));

/// The same kernel for a WHILE body's tail that depends on the body through programmatic edges
/// (sm_90 and newer): the driver may launch it while the body's last kernels finish, and
/// `griddepcontrol.wait` holds it until their writes are visible, which hides one launch latency
/// per iteration.
pub const CONDITION_MODULE_PROGRAMMATIC: &str =
    concat!(".version 7.8\n.target sm_90\n", condition_kernel!("    griddepcontrol.wait;\n"));

/// The condition kernel's text after the `.target` line, with `$wait` as its first instruction.
macro_rules! condition_kernel {
    ($wait:literal) => {
        concat!(
            r#".address_size 64

.extern .func cudaGraphSetConditional(.param .b64 handle, .param .b32 value);

.visible .entry recap_set_condition(
    .param .u64 handle,
    .param .u64 word,
    .param .u64 counter,
    .param .u32 max_iterations,
    .param .u32 first)
{
    .reg .pred %first, %go, %bounded, %under, %limited;
    .reg .b32 %w, %n, %max, %f, %v, %one;
    .reg .b64 %h, %pw, %pcount;
"#,
            $wait,
            r#"    ld.param.u64 %h, [handle];
    ld.param.u64 %pw, [word];
    ld.param.u64 %pcount, [counter];
    ld.param.u32 %max, [max_iterations];
    ld.param.u32 %f, [first];
    ld.volatile.global.u32 %w, [%pw];
    setp.ne.u32 %go, %w, 0;
    setp.ne.u32 %bounded, %max, 0;
    @!%bounded bra SET;
    setp.ne.u32 %first, %f, 0;
    mov.u32 %n, 0;
    @!%first ld.volatile.global.u32 %n, [%pcount];
    @!%first add.u32 %n, %n, 1;
    st.volatile.global.u32 [%pcount], %n;
    setp.lt.u32 %under, %n, %max;
    and.pred %go, %go, %under;
    setp.ne.u32 %limited, %w, 0;
    @%limited setp.ge.u32 %limited, %n, %max;
    mov.u32 %one, 1;
    @%limited red.global.add.u32 [%pcount+4], %one;
SET:
    selp.u32 %v, 1, 0, %go;
    {
        .param .b64 p0;
        .param .b32 p1;
        st.param.b64 [p0], %h;
        st.param.b32 [p1], %v;
        call.uni cudaGraphSetConditional, (p0, p1);
    }
    ret;
}
"#
        )
    };
}
use condition_kernel;

/// The fill kernels.
pub const FILL_MODULE: &str = r#".version 7.8
.target sm_60
.address_size 64

.visible .entry recap_fill_u64(.param .u64 dst, .param .u64 count, .param .u64 pattern)
{
    .reg .pred %more;
    .reg .b32 %t, %b, %nb, %nt;
    .reg .b64 %i, %n, %p, %d, %a, %stride, %x;
    ld.param.u64 %d, [dst];
    ld.param.u64 %n, [count];
    ld.param.u64 %p, [pattern];
    mov.u32 %t, %tid.x;
    mov.u32 %b, %ctaid.x;
    mov.u32 %nb, %nctaid.x;
    mov.u32 %nt, %ntid.x;
    mul.wide.u32 %i, %b, %nt;
    cvt.u64.u32 %x, %t;
    add.u64 %i, %i, %x;
    mul.wide.u32 %stride, %nb, %nt;
LOOP:
    setp.lt.u64 %more, %i, %n;
    @!%more bra DONE;
    shl.b64 %a, %i, 3;
    add.u64 %a, %a, %d;
    st.global.u64 [%a], %p;
    add.u64 %i, %i, %stride;
    bra LOOP;
DONE:
    ret;
}

.visible .entry recap_fill_bytes(.param .u64 dst, .param .u64 len, .param .u64 pattern, .param .u32 width)
{
    .reg .pred %more;
    .reg .b32 %t, %b, %nb, %nt, %w, %sh;
    .reg .b64 %i, %n, %p, %d, %a, %stride, %x, %k, %ww, %v;
    .reg .b16 %byte;
    ld.param.u64 %d, [dst];
    ld.param.u64 %n, [len];
    ld.param.u64 %p, [pattern];
    ld.param.u32 %w, [width];
    cvt.u64.u32 %ww, %w;
    mov.u32 %t, %tid.x;
    mov.u32 %b, %ctaid.x;
    mov.u32 %nb, %nctaid.x;
    mov.u32 %nt, %ntid.x;
    mul.wide.u32 %i, %b, %nt;
    cvt.u64.u32 %x, %t;
    add.u64 %i, %i, %x;
    mul.wide.u32 %stride, %nb, %nt;
LOOP:
    setp.lt.u64 %more, %i, %n;
    @!%more bra DONE;
    rem.u64 %k, %i, %ww;
    cvt.u32.u64 %sh, %k;
    shl.b32 %sh, %sh, 3;
    shr.b64 %v, %p, %sh;
    cvt.u16.u64 %byte, %v;
    add.u64 %a, %d, %i;
    st.global.u8 [%a], %byte;
    add.u64 %i, %i, %stride;
    bra LOOP;
DONE:
    ret;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_modules_differ_only_in_target_and_wait() {
        for (text, target, waits) in
            [(CONDITION_MODULE, "sm_60", false), (CONDITION_MODULE_PROGRAMMATIC, "sm_90", true)]
        {
            assert!(text.contains(&format!(".target {target}\n")), "{text}");
            assert_eq!(text.contains("griddepcontrol.wait;"), waits, "{text}");
            assert!(text.contains(".visible .entry recap_set_condition("), "{text}");
        }
        let plain = CONDITION_MODULE.replace("sm_60", "sm_90");
        let waiting = CONDITION_MODULE_PROGRAMMATIC.replace("    griddepcontrol.wait;\n", "");
        assert_eq!(plain, waiting);
    }
}
