//! Module variables through `recap capture`: a driver-API program sets a `.const` table
//! (cuModuleGetGlobal + cuMemcpyHtoD, as cudaMemcpyToSymbol does) before the range and counts
//! launches in a `.global` variable; the archive holds both as regions named in its
//! `module-vars` section, and replays on every CPU engine with the captured values, checked.

use shared::archive::Archive;

use crate::cpudriver::Program;
use crate::intercept::{capture_ok, replay_check, tmp_archive};

#[test]
fn module_variables_are_captured_and_replayed_with_their_captured_contents() {
    let program = Program::build("module_vars", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let path = tmp_archive(&dir, "module_vars.recap");
    let report = capture_ok(&program, &path, "profiler");
    assert_eq!(report["ops"]["launch"], 3, "{report:#}");
    // The copy into `taps` inside the range and the device copy; the read of `launches` is checked.
    assert_eq!(report["ops"]["upload"], 1, "{report:#}");
    assert_eq!(report["ops"]["copy"], 1, "{report:#}");
    assert!(report["incomplete"].as_array().is_none_or(|a| a.is_empty()), "{report:#}");

    let bytes = std::fs::read(&path).unwrap();
    let a = Archive::open(&bytes).unwrap();
    assert_eq!(a.version(), (1, 2));
    let vars: Vec<(&str, u64)> = a.module_vars().map(|v| (v.name, a.region(v.region).size)).collect();
    assert_eq!(vars, [("taps", 20), ("launches", 4)]);
    let taps = a.module_vars().find(|v| v.name == "taps").unwrap().region;
    let launches = a.module_vars().find(|v| v.name == "launches").unwrap().region;
    let f32s = |b: Vec<u8>| b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
    // Initial: the taps and the count set before the range; expected: the taps set inside it, and
    // the count after two launches of `fir`, whose four blocks count one each.
    assert_eq!(f32s(a.region(taps).initial.unwrap().decode().unwrap()), [0.5, -1.0, 2.0, 0.25, 3.0]);
    assert_eq!(f32s(a.region(taps).expected.unwrap().decode().unwrap()), [1.5, 0.5, -2.0, 4.0, 0.125]);
    assert_eq!(a.region(launches).initial.unwrap().decode().unwrap(), 40u32.to_le_bytes());
    assert_eq!(a.region(launches).expected.unwrap().decode().unwrap(), 48u32.to_le_bytes());
    // `weigh` gets the address cuModuleGetGlobal gave as a parameter: a relocation to the variable.
    let weigh = a.ops().filter_map(|op| match op {
        shared::archive::Op::Launch(l) if a.kernel(l.kernel).name == "weigh" => Some(l),
        _ => None,
    });
    let targets: Vec<_> =
        weigh.flat_map(|l| a.relocs(l.relocs.clone()).map(|r| (r.offset, r.target)).collect::<Vec<_>>()).collect();
    assert!(targets.contains(&(8, taps)), "{targets:?}");

    for engine in ["interp", "jit", "jit-scalar"] {
        let out = replay_check(&path, engine);
        assert!(out.contains("PASS"), "{engine}: {out}");
    }
}
