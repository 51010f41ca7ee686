//! Op-kind tests over hand-built archives.

use std::io::Cursor;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::*;
use crate::archive::*;

/// Decrements the u32 at `p[0]` and increments the one at `p[4]`, from one thread.
const COUNTDOWN: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry countdown(
	.param .u64 countdown_param_0
)
{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<3>;

	ld.param.u64 	%rd1, [countdown_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.global.u32 	%r1, [%rd2];
	add.s32 	%r2, %r1, -1;
	st.global.u32 	[%rd2], %r2;
	ld.global.u32 	%r3, [%rd2+4];
	add.s32 	%r3, %r3, 1;
	st.global.u32 	[%rd2+4], %r3;
	ret;
}
"#;

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn words(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn writer() -> ArchiveWriter<Cursor<Vec<u8>>> {
    ArchiveWriter::new(Cursor::new(Vec::new())).unwrap()
}

fn finish(w: ArchiveWriter<Cursor<Vec<u8>>>) -> Vec<u8> {
    w.finish().unwrap().into_inner()
}

fn region(w: &mut ArchiveWriter<Cursor<Vec<u8>>>, name: &str, init: &[u32]) -> RegionId {
    let r = w.add_region(RegionDecl::new(name, init.len() as u64 * 4, DType::U32)).unwrap();
    w.set_initial_bytes(r, &u32s(init)).unwrap();
    r
}

fn scratch(w: &mut ArchiveWriter<Cursor<Vec<u8>>>, name: &str, size: u64) -> RegionId {
    w.add_region(RegionDecl { scratch: true, ..RegionDecl::new(name, size, DType::U32) }).unwrap()
}

fn countdown_kernel(w: &mut ArchiveWriter<Cursor<Vec<u8>>>) -> KernelId {
    let m = w.add_module("countdown", COUNTDOWN).unwrap();
    let p = ParamDecl { name: "countdown_param_0".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
    w.add_kernel(m, "countdown", vec![p]).unwrap()
}

fn launch_on(kernel: KernelId, target: RegionId) -> LaunchDecl {
    LaunchDecl {
        kernel,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_bytes: 0,
        params: vec![0; 8],
        relocs: vec![Reloc { offset: 0, target, target_offset: 0 }],
    }
}

fn run_once(bytes: &[u8]) -> Result<(CpuReplay<'_>, IterationStats), ReplayError> {
    let archive = Archive::open(bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default())?;
    let stats = replay.run_iteration(&mut NoObserver)?;
    Ok((replay, stats))
}

/// Records every event as `start kind name` / `end kind name`.
#[derive(Default)]
struct Log(Vec<String>);

impl ReplayObserver for Log {
    fn op_started(&mut self, e: &OpEvent) {
        self.0.push(format!("start {} {} {}", e.op, e.kind, e.name.unwrap_or("-")));
    }
    fn op_finished(&mut self, e: &OpEvent) {
        self.0.push(format!("end {} {} {}", e.op, e.kind, e.name.unwrap_or("-")));
    }
}

#[test]
fn copy_moves_bytes_between_and_within_regions() {
    let mut w = writer();
    let a = region(&mut w, "a", &[1, 2, 3, 4]);
    let b = region(&mut w, "b", &[0; 4]);
    w.copy(CopyOp { src: a, src_offset: 4, dst: b, dst_offset: 0, len: 8 }).unwrap();
    w.copy(CopyOp { src: a, src_offset: 0, dst: a, dst_offset: 8, len: 8 }).unwrap();
    let bytes = finish(w);
    let (r, stats) = run_once(&bytes).unwrap();
    assert_eq!(words(&r.read_region(b).unwrap()), [2, 3, 0, 0]);
    assert_eq!(words(&r.read_region(a).unwrap()), [1, 2, 1, 2]);
    assert_eq!((stats.ops, stats.launches), (2, 0));
}

#[test]
fn memset_repeats_patterns_of_every_width() {
    let mut w = writer();
    let r = region(&mut w, "r", &[0; 2048]);
    w.memset(MemsetOp { region: r, offset: 0, len: 3, width: 1, pattern: 0xab }).unwrap();
    w.memset(MemsetOp { region: r, offset: 4, len: 4, width: 2, pattern: 0x1234 }).unwrap();
    w.memset(MemsetOp { region: r, offset: 8, len: 8, width: 4, pattern: 0xdead_beef }).unwrap();
    // Longer than one internal block, at an offset that is not block-aligned.
    w.memset(MemsetOp { region: r, offset: 16, len: 8 * 1000, width: 8, pattern: 0x0102_0304_0506_0708 }).unwrap();
    let bytes = finish(w);
    let (replay, _) = run_once(&bytes).unwrap();
    let got = replay.read_region(r).unwrap();
    assert_eq!(&got[..4], &[0xab, 0xab, 0xab, 0]);
    assert_eq!(&got[4..8], &[0x34, 0x12, 0x34, 0x12]);
    assert_eq!(words(&got[8..16]), [0xdead_beef, 0xdead_beef]);
    for i in 0..1000 {
        let at = 16 + 8 * i;
        assert_eq!(u64::from_le_bytes(got[at..at + 8].try_into().unwrap()), 0x0102_0304_0506_0708, "element {i}");
    }
    assert!(got[16 + 8000..].iter().all(|&b| b == 0));
}

#[test]
fn alloc_maps_zeroed_scratch_and_free_unmaps_it() {
    let mut w = writer();
    let out = region(&mut w, "out", &[0; 4]);
    let s = scratch(&mut w, "tmp", 16);
    w.alloc(s).unwrap();
    w.memset(MemsetOp { region: s, offset: 4, len: 4, width: 4, pattern: 7 }).unwrap();
    w.copy(CopyOp { src: s, src_offset: 0, dst: out, dst_offset: 0, len: 16 }).unwrap();
    w.free(s).unwrap();
    // Allocated again: contents start from zero, not from the last use.
    w.alloc(s).unwrap();
    w.copy(CopyOp { src: s, src_offset: 4, dst: out, dst_offset: 8, len: 4 }).unwrap();
    w.free(s).unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    assert!(replay.read_region(s).is_err(), "scratch is unmapped before its alloc");
    replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!(words(&replay.read_region(out).unwrap()), [0, 7, 0, 0]);
    // A second iteration allocates again: the engine does not leak the mapping.
    replay.run_iteration(&mut NoObserver).unwrap();
}

#[test]
fn use_after_free_names_the_op() {
    let mut w = writer();
    let s = scratch(&mut w, "tmp", 16);
    w.alloc(s).unwrap();
    w.free(s).unwrap();
    w.memset(MemsetOp { region: s, offset: 0, len: 4, width: 4, pattern: 1 }).unwrap();
    let bytes = finish(w);
    let err = run_once(&bytes).err().expect("use after free must fail");
    assert!(matches!(err, ReplayError::NotAllocated { op: 2, kind: "memset", .. }), "{err:?}");
    assert_eq!(err.to_string(), "op 2 (memset) uses scratch region tmp while it is not allocated");
}

#[test]
fn double_alloc_and_free_of_unallocated_scratch_fail() {
    let mut w = writer();
    let s = scratch(&mut w, "tmp", 16);
    w.alloc(s).unwrap();
    w.alloc(s).unwrap();
    let bytes = finish(w);
    let err = run_once(&bytes).err().unwrap();
    assert!(matches!(err, ReplayError::DoubleAlloc { op: 1, .. }), "{err}");

    let mut w = writer();
    let s = scratch(&mut w, "tmp", 16);
    w.free(s).unwrap();
    let bytes = finish(w);
    let err = run_once(&bytes).err().unwrap();
    assert!(matches!(err, ReplayError::NotAllocated { op: 0, kind: "free", .. }), "{err}");
}

#[test]
fn if_runs_its_body_only_when_the_word_is_nonzero() {
    let mut w = writer();
    let flags = region(&mut w, "flags", &[0, 1]);
    let out = region(&mut w, "out", &[0; 2]);
    w.begin_if(Condition { region: flags, offset: 0, max_iterations: 0 }).unwrap();
    w.memset(MemsetOp { region: out, offset: 0, len: 4, width: 4, pattern: 11 }).unwrap();
    w.end_body().unwrap();
    w.begin_if(Condition { region: flags, offset: 4, max_iterations: 0 }).unwrap();
    w.memset(MemsetOp { region: out, offset: 4, len: 4, width: 4, pattern: 22 }).unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let (r, stats) = run_once(&bytes).unwrap();
    assert_eq!(words(&r.read_region(out).unwrap()), [0, 22]);
    assert_eq!(stats.ops, 3);
}

#[test]
fn nested_bodies_ending_together_close_in_order() {
    // if (a) { memset; if (b) { memset } }  followed by a top-level memset.
    let mut w = writer();
    let flags = region(&mut w, "flags", &[1, 1]);
    let out = region(&mut w, "out", &[0; 3]);
    w.begin_if(Condition { region: flags, offset: 0, max_iterations: 0 }).unwrap();
    w.memset(MemsetOp { region: out, offset: 0, len: 4, width: 4, pattern: 1 }).unwrap();
    w.begin_if(Condition { region: flags, offset: 4, max_iterations: 0 }).unwrap();
    w.memset(MemsetOp { region: out, offset: 4, len: 4, width: 4, pattern: 2 }).unwrap();
    w.end_body().unwrap();
    w.end_body().unwrap();
    w.memset(MemsetOp { region: out, offset: 8, len: 4, width: 4, pattern: 3 }).unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let mut log = Log::default();
    replay.run_iteration(&mut log).unwrap();
    assert_eq!(words(&replay.read_region(out).unwrap()), [1, 2, 3]);
    assert_eq!(
        log.0,
        [
            "start 0 if -",
            "start 1 memset -",
            "end 1 memset -",
            "start 2 if -",
            "start 3 memset -",
            "end 3 memset -",
            "end 2 if -",
            "end 0 if -",
            "start 4 memset -",
            "end 4 memset -",
        ]
    );
}

#[test]
fn markers_reach_the_observer_by_name() {
    let mut w = writer();
    let out = region(&mut w, "out", &[0]);
    w.marker("step begin").unwrap();
    w.memset(MemsetOp { region: out, offset: 0, len: 4, width: 4, pattern: 5 }).unwrap();
    w.marker("step end").unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let mut log = Log::default();
    replay.run_iteration(&mut log).unwrap();
    assert_eq!(log.0[0], "start 0 marker step begin");
    assert_eq!(log.0[5], "end 2 marker step end");
}

#[test]
fn a_while_whose_word_never_clears_stops_at_its_limit() {
    let mut w = writer();
    let flag = region(&mut w, "flag", &[1]);
    let out = region(&mut w, "out", &[0]);
    w.begin_while(Condition { region: flag, offset: 0, max_iterations: 10 }).unwrap();
    w.memset(MemsetOp { region: out, offset: 0, len: 4, width: 4, pattern: 9 }).unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let err = run_once(&bytes).err().unwrap();
    assert!(matches!(err, ReplayError::LoopLimit { op: 0, limit: 10 }), "{err}");
}

#[test]
fn an_unbounded_while_is_stopped_by_the_cancel_flag() {
    let mut w = writer();
    let flag = region(&mut w, "flag", &[1]);
    w.begin_while(Condition { region: flag, offset: 0, max_iterations: 0 }).unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let options = ReplayOptions { cancel: Some(cancel.clone()), ..ReplayOptions::default() };
    let mut replay = CpuReplay::new(&archive, options).unwrap();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        cancel.store(true, Ordering::Relaxed);
    });
    let err = replay.run_iteration(&mut NoObserver).err().unwrap();
    setter.join().unwrap();
    assert!(matches!(err, ReplayError::Cancelled { op: 0, kind: "while" }), "{err}");
}

#[test]
fn bindings_write_inputs_and_read_outputs() {
    let mut w = writer();
    let input = region(&mut w, "input", &[0; 4]);
    let output = region(&mut w, "output", &[0; 4]);
    w.copy(CopyOp { src: input, src_offset: 0, dst: output, dst_offset: 0, len: 16 }).unwrap();
    w.add_binding("x", input, Direction::In).unwrap();
    w.add_binding("y", output, Direction::Out).unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let x = archive.binding("x").unwrap().region;
    let y = archive.binding("y").unwrap().region;
    replay.write_region(x, &u32s(&[5, 6, 7, 8])).unwrap();
    replay.run_iteration(&mut NoObserver).unwrap();
    assert_eq!(words(&replay.read_region(y).unwrap()), [5, 6, 7, 8]);
    let err = replay.write_region(x, &[0; 3]).err().unwrap();
    assert_eq!(err.to_string(), "region input: is 16 bytes but 3 were given");
    assert!(replay.read_region(99).is_err());
    // reset() brings back the archive's initial state.
    replay.restore_initial().unwrap();
    assert_eq!(words(&replay.read_region(x).unwrap()), [0; 4]);
    assert_eq!(words(&replay.read_region(y).unwrap()), [0; 4]);
}

#[test]
fn regions_without_initial_data_start_zeroed_and_large_ones_stream_in() {
    let mut w = writer();
    let blank = w.add_region(RegionDecl::new("blank", 64, DType::U8)).unwrap();
    // Several upload chunks, not a multiple of the chunk size.
    let big: Vec<u32> = (0..100_000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let big_region = region(&mut w, "big", &big);
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    assert!(replay.read_region(blank).unwrap().iter().all(|&b| b == 0));
    assert_eq!(words(&replay.read_region(big_region).unwrap()), big);
}

#[test]
fn region_relocations_hold_target_addresses() {
    let mut w = writer();
    let table = w.add_region(RegionDecl::new("table", 16, DType::U64)).unwrap();
    let a = region(&mut w, "a", &[0; 4]);
    let s = scratch(&mut w, "s", 8);
    w.add_region_reloc(table, Reloc { offset: 0, target: a, target_offset: 12 }).unwrap();
    w.add_region_reloc(table, Reloc { offset: 8, target: s, target_offset: 0 }).unwrap();
    w.alloc(s).unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let t = replay.read_region(table).unwrap();
    let ptr = u64::from_le_bytes(t[..8].try_into().unwrap());
    // The pointer reaches a's last word through the device memory itself.
    replay.write_region(a, &u32s(&[0, 0, 0, 0xfeed])).unwrap();
    assert_eq!(replay.memory().read_u32(ptr).unwrap(), 0xfeed);
    assert_eq!(u64::from_le_bytes(t[8..].try_into().unwrap()), 0, "scratch pointer waits for its alloc");
    replay.run_iteration(&mut NoObserver).unwrap();
    let t = replay.read_region(table).unwrap();
    let sptr = u64::from_le_bytes(t[8..].try_into().unwrap());
    assert_eq!(replay.memory().read_u32(sptr).unwrap(), 0);
}

#[test]
fn check_judges_regions_with_an_expected_state() {
    let mut w = writer();
    let a = region(&mut w, "a", &[1, 2]);
    let b = region(&mut w, "b", &[0, 0]);
    let _unjudged = region(&mut w, "c", &[0]);
    w.set_expected_bytes(a, &u32s(&[1, 2]), Tolerance::Exact).unwrap();
    w.set_expected_bytes(b, &u32s(&[1, 2]), Tolerance::Exact).unwrap();
    w.copy(CopyOp { src: a, src_offset: 0, dst: b, dst_offset: 0, len: 4 }).unwrap();
    let bytes = finish(w);
    let (mut replay, _) = run_once(&bytes).unwrap();
    let archive = replay.archive().clone();
    let verdict = check_state(&mut replay, &archive, &Default::default(), &[]).unwrap();
    let checks = verdict.regions;
    assert_eq!(checks.len(), 2);
    assert!(checks[0].passed);
    assert!(!checks[1].passed);
    let first = checks[1].first_mismatch().unwrap();
    assert_eq!((first.index, first.got_value, first.want_value), (1, Some(0.0), Some(2.0)));
    assert_eq!(verdict.state, crate::check::CheckState::Failed);
}

#[test]
fn load_errors_name_the_module_and_the_kernel() {
    let mut w = writer();
    let m = w
        .add_module(
            "broken",
            ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry k()\n{\n\tbogus.op %r1;\n\tret;\n}\n",
        )
        .unwrap();
    w.add_kernel(m, "k", vec![]).unwrap();
    let bytes = finish(w);
    let err = run_once(&bytes).err().unwrap();
    let text = err.to_string();
    assert!(matches!(err, ReplayError::Load { .. }), "{text}");
    assert!(text.starts_with("module broken:") && text.contains('6'), "{text}");

    let mut w = writer();
    let m = w.add_module("countdown", COUNTDOWN).unwrap();
    w.add_kernel(m, "no_such_entry", vec![]).unwrap();
    let bytes = finish(w);
    let err = run_once(&bytes).err().unwrap();
    assert_eq!(err.to_string(), "kernel no_such_entry: module countdown has no entry named no_such_entry");
}

#[test]
fn a_kernel_counts_down_the_word_a_while_loop_tests() {
    let mut w = writer();
    let k = countdown_kernel(&mut w);
    let counter = region(&mut w, "counter", &[5, 0]);
    w.begin_while(Condition { region: counter, offset: 0, max_iterations: 100 }).unwrap();
    w.launch(launch_on(k, counter)).unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let (replay, stats) = run_once(&bytes).unwrap();
    assert_eq!(words(&replay.read_region(counter).unwrap()), [0, 5]);
    assert_eq!((stats.launches, stats.loop_iterations), (5, 5));
    assert!(stats.instructions > 0);
}

#[test]
fn a_while_whose_word_starts_at_zero_runs_nothing() {
    let mut w = writer();
    let k = countdown_kernel(&mut w);
    let counter = region(&mut w, "counter", &[0, 0]);
    w.begin_while(Condition { region: counter, offset: 0, max_iterations: 0 }).unwrap();
    w.launch(launch_on(k, counter)).unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let (replay, stats) = run_once(&bytes).unwrap();
    assert_eq!(words(&replay.read_region(counter).unwrap()), [0, 0]);
    assert_eq!(stats.launches, 0);
}

#[test]
fn launches_reach_scratch_through_per_launch_relocations() {
    let mut w = writer();
    let k = countdown_kernel(&mut w);
    let out = region(&mut w, "out", &[0, 0]);
    let s = scratch(&mut w, "s", 8);
    w.alloc(s).unwrap();
    w.launch(launch_on(k, s)).unwrap();
    w.launch(launch_on(k, s)).unwrap();
    w.copy(CopyOp { src: s, src_offset: 0, dst: out, dst_offset: 0, len: 8 }).unwrap();
    w.free(s).unwrap();
    w.launch(launch_on(k, s)).unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let err = replay.run_iteration(&mut NoObserver).err().unwrap();
    assert_eq!(words(&replay.read_region(out).unwrap()), [u32::MAX - 1, 2]);
    assert_eq!(err.to_string(), "op 5 (launch) uses scratch region s while it is not allocated");
}

#[test]
fn nested_while_and_if_around_launches() {
    // while (outer) { countdown(outer); if (flag) { countdown(inner) } }
    let mut w = writer();
    let k = countdown_kernel(&mut w);
    let outer = region(&mut w, "outer", &[3, 0]);
    let flag = region(&mut w, "flag", &[1]);
    let inner = region(&mut w, "inner", &[100, 0]);
    w.begin_while(Condition { region: outer, offset: 0, max_iterations: 0 }).unwrap();
    w.launch(launch_on(k, outer)).unwrap();
    w.begin_if(Condition { region: flag, offset: 0, max_iterations: 0 }).unwrap();
    w.launch(launch_on(k, inner)).unwrap();
    w.end_body().unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let (replay, stats) = run_once(&bytes).unwrap();
    assert_eq!(words(&replay.read_region(outer).unwrap()), [0, 3]);
    assert_eq!(words(&replay.read_region(inner).unwrap()), [97, 3]);
    assert_eq!((stats.launches, stats.loop_iterations), (6, 3));
}

#[test]
fn the_instruction_budget_spans_the_whole_iteration() {
    let mut w = writer();
    let k = countdown_kernel(&mut w);
    let counter = region(&mut w, "counter", &[1_000_000, 0]);
    w.begin_while(Condition { region: counter, offset: 0, max_iterations: 0 }).unwrap();
    w.launch(launch_on(k, counter)).unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let options = ReplayOptions { instruction_budget: Some(200), ..ReplayOptions::default() };
    let mut replay = CpuReplay::new(&archive, options).unwrap();
    let err = replay.run_iteration(&mut NoObserver).err().unwrap();
    let done = words(&replay.read_region(counter).unwrap())[1];
    assert!(done > 0 && done < 200, "{done} launches ran");
    assert!(err.to_string().contains("budget"), "{err}");
}

#[test]
fn a_loop_without_kernels_is_stopped_by_the_budget() {
    // A condition word that nothing clears and no iteration limit: only the budget can end it.
    let mut w = writer();
    let flag = region(&mut w, "flag", &[1]);
    w.begin_while(Condition { region: flag, offset: 0, max_iterations: 0 }).unwrap();
    w.memset(set_first_word(flag)).unwrap();
    w.end_body().unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let options = ReplayOptions { instruction_budget: Some(10_000), ..ReplayOptions::default() };
    let mut replay = CpuReplay::new(&archive, options).unwrap();
    let err = replay.run_iteration(&mut NoObserver).err().unwrap();
    assert!(matches!(err, ReplayError::Budget { op: 0, kind: "while", budget: 10_000 }), "{err}");
}

/// A memset of a region's first word to 1 (what keeps a loop going).
fn set_first_word(region: RegionId) -> MemsetOp {
    MemsetOp { region, offset: 0, len: 4, width: 4, pattern: 1 }
}

/// Stores `%tid.x` at `p[%tid.x]` (u32), from every thread.
const STORE_TID: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry store_tid(
	.param .u64 store_tid_param_0
)
{
	.reg .b32 	%r<2>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [store_tid_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %tid.x;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.u32 	[%rd4], %r1;
	ret;
}
"#;

#[test]
fn faults_name_the_same_thread_and_address_on_both_engines_for_small_and_large_blocks() {
    // Native code really runs this kernel (else the comparison below would be the interpreter twice).
    let module = ptx::Module::parse(STORE_TID).unwrap();
    let mut memory = ptx::Memory::new();
    let base = memory.add_region(4 * 128, 4).unwrap();
    let dims = ptx::LaunchDims { grid: [1, 1, 1], block: [128, 1, 1], dynamic_shared: 0 };
    let stats =
        ptx::launch(&module, "store_tid", &dims, &base.to_le_bytes(), &memory, &ptx::ExecOptions::default()).unwrap();
    assert!(stats.jit, "the kernel ran on the interpreter");

    // Blocks of up to 64 threads and larger ones take different worker shapes in both engines.
    for threads in [32u32, 128] {
        let mut w = writer();
        let m = w.add_module("store_tid", STORE_TID).unwrap();
        let p = ParamDecl { name: "store_tid_param_0".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
        let k = w.add_kernel(m, "store_tid", vec![p]).unwrap();
        let out = region(&mut w, "out", &[0; 5]);
        w.launch(LaunchDecl { grid: [2, 1, 1], block: [threads, 1, 1], ..launch_on(k, out) }).unwrap();
        let bytes = finish(w);
        let archive = Archive::open(&bytes).unwrap();
        let errors: Vec<ReplayError> = [ptx::Engine::Jit, ptx::Engine::JitScalar, ptx::Engine::Interpreter]
            .into_iter()
            .map(|engine| {
                let options = ReplayOptions { threads: 1, engine, ..ReplayOptions::default() };
                let mut replay = CpuReplay::new(&archive, options).unwrap();
                replay.run_iteration(&mut NoObserver).expect_err("the store past the region faults")
            })
            .collect();
        for err in &errors {
            match err {
                ReplayError::Exec { error: ptx::ExecError::Memory { block, thread, addr, size, .. }, .. } => {
                    assert_eq!((*block, *thread, *size), ([0, 0, 0], [5, 0, 0], 4), "{err}");
                    // Regions start at a multiple of 2^36: the first byte past a 20-byte region.
                    assert_eq!(addr & ((1 << 36) - 1), 20, "{err}");
                }
                other => panic!("expected a memory fault, got {other}"),
            }
        }
        assert_eq!(errors[0].to_string(), errors[1].to_string());
    }
}

#[test]
fn iteration_stats_say_which_engine_ran_each_launch() {
    let mut w = writer();
    let m = w.add_module("store_tid", STORE_TID).unwrap();
    let p = ParamDecl { name: "store_tid_param_0".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer };
    let k = w.add_kernel(m, "store_tid", vec![p]).unwrap();
    let out = region(&mut w, "out", &[0; 64]);
    // Rows of 32 threads split into groups; rows of 12 do not.
    w.launch(LaunchDecl { grid: [1, 1, 1], block: [32, 1, 1], ..launch_on(k, out) }).unwrap();
    w.launch(LaunchDecl { grid: [1, 1, 1], block: [12, 1, 1], ..launch_on(k, out) }).unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let native = cfg!(all(feature = "jit", not(target_arch = "wasm32")));
    for (engine, want_native, want_lanes) in
        [(ptx::Engine::Jit, 2, 1), (ptx::Engine::JitScalar, 2, 0), (ptx::Engine::Interpreter, 0, 0)]
    {
        let options = ReplayOptions { threads: 1, engine, ..ReplayOptions::default() };
        let mut replay = CpuReplay::new(&archive, options).unwrap();
        let stats = replay.run_iteration(&mut NoObserver).unwrap();
        let (want_native, want_lanes) = if native { (want_native, want_lanes) } else { (0, 0) };
        assert_eq!(stats.launches, 2, "{engine:?}");
        assert_eq!((stats.native_launches, stats.lane_launches), (want_native, want_lanes), "{engine:?}");
    }
}

/// Placement metadata: regions land at their captured addresses (relocations patch those in),
/// regions without one get fresh addresses above them, the options override the archive, and an
/// address no region may have is an error naming the region.
#[test]
fn placed_regions_sit_at_their_captured_addresses() {
    use crate::placement::{Placement, ADDRESSES_KEY, PLACEMENT_KEY};
    let build = |second: u64, placement: Option<&str>| {
        let mut w = writer();
        let table = w.add_region(RegionDecl::new("table", 8, DType::U64)).unwrap();
        let a = region(&mut w, "a", &[5, 6]);
        let _fresh = region(&mut w, "upload0", &[1]);
        w.add_region_reloc(table, Reloc { offset: 0, target: a, target_offset: 4 }).unwrap();
        w.set_meta(
            ADDRESSES_KEY,
            &format!(r#"[{{"region":0,"address":{}}},{{"region":1,"address":{second}}}]"#, 7u64 << 36),
        );
        if let Some(p) = placement {
            w.set_meta(PLACEMENT_KEY, p);
        }
        finish(w)
    };
    let a_at = (7u64 << 36) + 0x1_0000;
    let bytes = build(a_at, Some("captured"));
    let archive = Archive::open(&bytes).unwrap();
    let replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let t = replay.read_region(0).unwrap();
    assert_eq!(u64::from_le_bytes(t.try_into().unwrap()), a_at + 4, "the relocation patches in the captured address");
    assert_eq!(replay.memory().read_u32(a_at + 4).unwrap(), 6);
    assert_eq!(replay.memory().read_u32(8 << 36).unwrap(), 1, "the region without an address goes above");
    // Overridden: fresh addresses, the same relocation to wherever `a` went.
    let fresh =
        CpuReplay::new(&archive, ReplayOptions { placement: Some(Placement::Fresh), ..Default::default() }).unwrap();
    assert!(fresh.memory().read_u32(a_at + 4).is_err());
    // The archive does not ask; the options do.
    let bytes = build(a_at, None);
    let archive = Archive::open(&bytes).unwrap();
    let placed =
        CpuReplay::new(&archive, ReplayOptions { placement: Some(Placement::Captured), ..Default::default() }).unwrap();
    assert_eq!(placed.memory().read_u32(a_at).unwrap(), 5);
    // An address in the module variables' window.
    let bytes = build(0x0100_0000_0000_0010, Some("captured"));
    let archive = Archive::open(&bytes).unwrap();
    let err = CpuReplay::new(&archive, ReplayOptions::default()).err().unwrap().to_string();
    assert!(err.contains("region a cannot be placed at its captured address 0x100000000000010"), "{err}");
    assert!(err.contains("--placement fresh"), "{err}");
    let bytes = build(a_at, Some("sideways"));
    let err = CpuReplay::new(&Archive::open(&bytes).unwrap(), ReplayOptions::default()).err().unwrap().to_string();
    assert!(err.contains("capture.placement") && err.contains("sideways"), "{err}");
}

/// Metadata a replay cannot follow is one typed error that names its key: a placement that asks
/// for addresses the archive lacks, addresses of a region that does not exist, and launch
/// attributes of an op that is not a launch.
#[test]
fn metadata_a_replay_cannot_follow_names_its_key() {
    use crate::placement::{ADDRESSES_KEY, PLACEMENT_KEY};
    let build = |meta: &[(&str, &str)]| {
        let mut w = writer();
        let _a = region(&mut w, "a", &[5, 6]);
        for (k, v) in meta {
            w.set_meta(k, v);
        }
        finish(w)
    };
    let error = |bytes: &[u8]| match CpuReplay::new(&Archive::open(bytes).unwrap(), ReplayOptions::default()) {
        Err(ReplayError::Metadata(e)) => e,
        Err(other) => panic!("not a metadata error: {other}"),
        Ok(_) => panic!("the replay followed metadata it cannot"),
    };
    let e = error(&build(&[(PLACEMENT_KEY, "captured")]));
    assert!(matches!(e, MetadataError::Missing { key: ADDRESSES_KEY, .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "regions are to be placed at their captured addresses, but the archive has no metadata capture.addresses"
    );
    let e = error(&build(&[(PLACEMENT_KEY, "captured"), (ADDRESSES_KEY, r#"[{"region":3,"address":4096}]"#)]));
    assert_eq!(e.to_string(), "archive metadata capture.addresses: region 3 does not exist (the archive has 1)");
    let e = error(&build(&[("capture.launch_attributes", r#"[{"op":0,"attributes":{"cluster":[2,1,1]}}]"#)]));
    assert_eq!(e.to_string(), "archive metadata capture.launch_attributes: op 0 is not a launch of this archive");
}

/// A kernel that follows a pointer the capture kept as plain data (no relocation): at the
/// captured addresses it reads the region it points into; at fresh ones the fault names that
/// region and the way out.
#[test]
fn a_pointer_the_capture_did_not_see_is_named_where_it_faults() {
    use crate::placement::{Placement, ADDRESSES_KEY};
    const FOLLOW: &str = ".version 8.0\n.target sm_80\n.address_size 64\n\
        .visible .entry follow(.param .u64 table, .param .u64 out) {\n\
        .reg .b32 %r<2>; .reg .b64 %rd<4>;\n\
        ld.param.u64 %rd1, [table]; ld.param.u64 %rd2, [out];\n\
        ld.global.u64 %rd3, [%rd1]; ld.global.u32 %r1, [%rd3];\n\
        st.global.u32 [%rd2], %r1; ret; }";
    let at = 7u64 << 36;
    let mut w = writer();
    let data = region(&mut w, "data", &[41, 42]);
    let table = w.add_region(RegionDecl::new("table", 8, DType::U64)).unwrap();
    w.set_initial_bytes(table, &(at + 4).to_le_bytes()).unwrap();
    let out = region(&mut w, "out", &[0]);
    let m = w.add_module("follow", FOLLOW).unwrap();
    let p = |name: &str, offset| ParamDecl { name: name.into(), offset, size: 8, align: 8, kind: ParamKind::Pointer };
    let k = w.add_kernel(m, "follow", vec![p("table", 0), p("out", 8)]).unwrap();
    let relocs =
        vec![Reloc { offset: 0, target: table, target_offset: 0 }, Reloc { offset: 8, target: out, target_offset: 0 }];
    w.launch(LaunchDecl { kernel: k, grid: [1, 1, 1], block: [1, 1, 1], shared_bytes: 0, params: vec![0; 16], relocs })
        .unwrap();
    w.set_meta(ADDRESSES_KEY, &format!(r#"[{{"region":{data},"address":{at}}}]"#));
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let options = |placement| ReplayOptions { placement: Some(placement), ..Default::default() };
    let mut placed = CpuReplay::new(&archive, options(Placement::Captured)).unwrap();
    placed.run_iteration(&mut NoObserver).unwrap();
    assert_eq!(words(&placed.read_region(out).unwrap()), [42]);
    let mut fresh = CpuReplay::new(&archive, options(Placement::Fresh)).unwrap();
    match fresh.run_iteration(&mut NoObserver).unwrap_err() {
        e @ ReplayError::UnseenPointer { .. } => {
            let text = e.to_string();
            assert!(text.contains(&format!("address {:#x}", at + 4)), "{text}");
            assert!(text.contains(&format!("region data as captured (at {at:#x})")), "{text}");
            assert!(text.contains("--placement captured"), "{text}");
        }
        other => panic!("not named as an unseen pointer: {other}"),
    }
}

#[test]
fn a_keeper_that_fails_stops_the_session_with_its_own_error() {
    let mut w = writer();
    let output = region(&mut w, "output", &[1, 2]);
    w.add_binding("y", output, Direction::Out).unwrap();
    let bytes = finish(w);
    let archive = Archive::open(&bytes).unwrap();
    let mut replay = CpuReplay::new(&archive, ReplayOptions::default()).unwrap();
    let session = Session::new(&archive, 0, &[]);
    let mut keep = |_, _: &[u8]| Err(KeepError::new(std::io::Error::other("disk full")));
    let err = session.finish(&mut replay, false, &mut |_| {}, &mut keep).unwrap_err();
    assert_eq!(err.to_string(), format!("keeping region {output}: disk full"));
    let SessionError::Keep { region, error } = err else { panic!("not a keeping error") };
    assert_eq!(region, output);
    assert_eq!(error.to_string(), "disk full");
}
