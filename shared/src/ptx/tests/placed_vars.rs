//! Module variables placed in the caller's memory (`Module::parse_placing`): kernels of every
//! engine read and write them at the caller's addresses, initialisers (those that take another
//! variable's address too) come back to the caller, and what the caller writes there is what
//! kernels see.

use super::*;
use crate::ptx::{MemError, PlaceRefusal, VariableDecl};

const PTX: &str = "
.version 8.0
.target sm_90
.address_size 64
.const .align 4 .f32 taps[3] = {0f3F800000, 0f40000000, 0f40400000};
.global .align 4 .u32 launches;
.global .align 8 .u64 taps_at = generic(taps);
.global .align 4 .u32 kept = 7;
.visible .entry k(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    mov.u64 %rd3, taps;
    add.s64 %rd4, %rd3, %rd2;
    ld.const.f32 %f1, [%rd4];
    ld.global.u64 %rd5, [taps_at];
    ld.f32 %f2, [%rd5+8];
    ld.global.u32 %r2, [kept];
    cvt.rn.f32.u32 %f3, %r2;
    add.f32 %f1, %f1, %f2;
    add.f32 %f1, %f1, %f3;
    add.s64 %rd6, %rd1, %rd2;
    st.global.f32 [%rd6], %f1;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    atom.global.add.u32 %r3, [launches], 1;
DONE:
    ret;
}
";

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

/// Places `taps`, `launches` and `taps_at` in `mem` (leaving `kept` in the module), writes their
/// initialisers and gives the placed variables.
fn load(mem: &mut Memory) -> (Module, Vec<PlacedVariable>) {
    let mut seen = Vec::new();
    let m = Module::parse_placing(PTX, &mut |v| {
        seen.push((v.name.to_string(), v.size, v.align, v.constant, v.initialised));
        if v.name == "kept" {
            return Ok(None);
        }
        mem.add_region(v.size, v.align)
            .map(Some)
            .map_err(|source| PlaceRefusal::NoMemory { variable: v.name.to_string(), source })
    })
    .unwrap();
    assert_eq!(
        seen,
        [
            ("taps".to_string(), 12, 4, true, true),
            ("launches".to_string(), 4, 4, false, false),
            ("taps_at".to_string(), 8, 8, false, true),
            ("kept".to_string(), 4, 4, false, true),
        ]
    );
    let placed = m.placed_variables().to_vec();
    for v in &placed {
        mem.write(v.addr, &v.init).unwrap();
    }
    (m, placed)
}

#[test]
fn placed_variables_live_in_the_callers_memory_on_every_engine() {
    for engine in [Engine::Interpreter, Engine::Jit, Engine::JitScalar] {
        let mut mem = Memory::new();
        let (m, placed) = load(&mut mem);
        let names: Vec<&str> = placed.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["taps", "launches", "taps_at"]);
        let taps = placed[0].addr;
        // The initialiser that takes a placed variable's address holds the caller's address.
        assert_eq!(placed[2].init, taps.to_le_bytes());
        assert_eq!(m.read_variable("kept"), Some(7u32.to_le_bytes().to_vec()));
        assert_eq!(m.read_variable("taps"), None, "a placed variable has no storage in the module");

        // What the caller writes is what kernels read: new taps, as a driver's copy would set them.
        let new_taps: Vec<u8> = [10.0f32, 20.0, 30.0].iter().flat_map(|f| f.to_le_bytes()).collect();
        mem.write(taps, &new_taps).unwrap();
        let out = mem.add_region(12, 256).unwrap();
        let opts = ExecOptions { engine, ..ExecOptions::default() };
        let dims = LaunchDims { grid: [1, 1, 1], block: [3, 1, 1], dynamic_shared: 0 };
        for _ in 0..2 {
            launch(&m, "k", &dims, &out.to_le_bytes(), &mem, &opts).unwrap();
        }
        // tap + taps[2] + kept, read through the module's own pointer to the placed table.
        assert_eq!(floats(&mem.read_region(out).unwrap()), [47.0, 57.0, 67.0], "{engine:?}");
        assert_eq!(mem.read_u32(placed[1].addr).unwrap(), 2, "{engine:?}: one count per launch");
    }
}

#[test]
fn a_refused_placement_refuses_the_module_at_the_variables_line() {
    let mut place = |v: &VariableDecl| match v.name {
        "launches" => {
            Err(PlaceRefusal::NoMemory { variable: v.name.into(), source: MemError::AllocFailed { size: v.size } })
        }
        _ => Ok(None),
    };
    let e = Module::parse_placing(PTX, &mut place).unwrap_err();
    assert_eq!(e.line, 6, "{e}");
    assert!(e.to_string().contains("variable `launches`: cannot allocate a region of 4 bytes"), "{e}");
}
