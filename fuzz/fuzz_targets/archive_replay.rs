//! Any bytes, resealed so that mutations get past the checksums: an archive that opens is planned
//! and replayed once on the CPU under tight limits, its regions read back and checked. Every error is
//! fine; a panic, a hang or a huge allocation is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::archive::{reseal, Archive};
use shared::plan::Plan;
use shared::ptx;
use shared::replay::{CpuReplay, NoObserver, ReplayLimits, ReplayOptions};

/// Small enough that a hostile archive's claims cost little, large enough for the seeds to replay.
const LIMITS: ReplayLimits =
    ReplayLimits { max_region_bytes: 1 << 20, max_total_bytes: 4 << 20, max_regions: 64, max_grid_blocks: 4096 };

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    // A buffer reseal refuses still goes to open: its errors are part of what is fuzzed.
    let _ = reseal(&mut bytes);
    let Ok(archive) = Archive::open(&bytes) else { return };
    walk_plan(&Plan::build(&archive));

    let options = ReplayOptions {
        // Small enough that an input which spends all of it still runs in a few milliseconds.
        instruction_budget: Some(20_000),
        cancel: None,
        threads: 1,
        // The interpreter is every engine's reference, and this build has no native code.
        engine: ptx::Engine::Interpreter,
        limits: LIMITS,
        ..Default::default()
    };
    let Ok(mut replay) = CpuReplay::new(&archive, options) else { return };
    let _ = replay.run_iteration(&mut NoObserver);
    for id in 0..archive.region_count() as u32 {
        let _ = replay.read_region(id);
    }
    let _ = shared::replay::check_state(&mut replay, &archive, &Default::default(), &[]);
});

fn walk_plan(plan: &Plan) {
    for access in &plan.access {
        let _ = access.regions();
    }
    for dag in &plan.dags {
        let _ = (dag.roots(), dag.depth());
        for &n in &dag.nodes {
            let _ = dag.preds(n).count();
        }
        if let Some(owner) = dag.owner {
            assert!(plan.body(owner).is_some());
        }
    }
    let _ = (plan.top().nodes.len(), plan.edge_count());
}
