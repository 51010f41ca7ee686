//! `recap bench cuda --only pdl`: programmatic dependent launch against plain graph edges, per
//! configuration in one run: plain edges, PDL with every kernel waiting at entry (wait only),
//! PDL with the early trigger in half-wave kernels (recap's default), and PDL with its edges
//! leaving at the predecessor's launch. The configurations are those of the hand-written anchor
//! `../shared/bench/pdl_chain.cu` (a chain of 1000 `x[i] += 1` kernels of 1, 132 and 1,056 blocks)
//! and recap's own: a chain of two waves, chains of 1, 5 and 20 us kernels, eight independent
//! chains and the heat step.

use std::sync::Arc;

use shared::archive::Archive;

use crate::{chains_archive, heat_archive, time_per_node, wide_chain_archive};
use recap_cuda::{CudaError, CudaReplay, Device, Mode, Pdl, ReplayOptions};

/// One archive the section times, and what its per-node figure divides by.
pub struct Config {
    pub label: String,
    pub archive: Vec<u8>,
    /// Graph nodes (or ops) the replay time is divided by.
    pub nodes: usize,
}

/// Every configuration of the section, in the order it prints them. `multiprocessors`: the GPU's,
/// to size the chain of two waves of 256-thread blocks (8 of them to a multiprocessor).
pub fn configurations(multiprocessors: u32) -> Vec<Config> {
    let mut out = Vec::new();
    for n in [100usize, 1000] {
        out.push(Config { label: format!("pdl chain {n}, tiny kernels"), archive: wide_chain_archive(n, 1), nodes: n });
    }
    // The anchor's sizes: one block per multiprocessor of an H100/H200, and 1,056 blocks (eight
    // 256-thread blocks to each of 132 multiprocessors: a full wave there).
    for blocks in [132u32, 1056] {
        out.push(Config {
            label: format!("pdl chain 1000, {blocks} blocks"),
            archive: wide_chain_archive(1000, blocks),
            nodes: 1000,
        });
    }
    let two_waves = multiprocessors * 8 * 2;
    out.push(Config {
        label: format!("pdl chain 1000, {two_waves} blocks (two waves)"),
        archive: wide_chain_archive(1000, two_waves),
        nodes: 1000,
    });
    for spin_ns in [1_000u64, 5_000, 20_000] {
        out.push(Config {
            label: format!("pdl chain 100, {} us kernels", spin_ns / 1000),
            archive: chains_archive(1, 100, spin_ns),
            nodes: 100,
        });
    }
    out.push(Config {
        label: "pdl 8 chains x 100, tiny kernels".into(),
        archive: chains_archive(8, 100, 0),
        nodes: 800,
    });
    // A real multi-kernel graph: per op of 25 heat steps (100 ops, 75 of them kernels).
    out.push(Config { label: "pdl heat step x 25 (per op)".into(), archive: heat_archive(25), nodes: 100 });
    out
}

/// Times every configuration four ways on `device`, median of `reps` replays each.
pub(crate) fn section(
    device: &Arc<Device>,
    reps: usize,
    put: &mut dyn FnMut(String, f64, &'static str),
) -> Result<(), CudaError> {
    let plain = ReplayOptions { mode: Mode::Graph, pdl: Pdl::Off, ..Default::default() };
    let trigger = ReplayOptions { pdl: Pdl::On, ..plain };
    let wait = ReplayOptions { pdl_wait_only: true, ..trigger };
    let from_launch = ReplayOptions { pdl_from_launch: true, ..trigger };
    for c in configurations(device.residency.multiprocessors) {
        let archive = Archive::open(&c.archive)?;
        let (label, n) = (&c.label, c.nodes);
        let mut r = CudaReplay::load(device, &archive, plain)?;
        let plain_t = time_per_node(&mut r, n, reps)?;
        drop(r);
        let mut r = CudaReplay::load(device, &archive, wait)?;
        let edges = r.dependent_edges();
        let wait_t = time_per_node(&mut r, n, reps)?;
        drop(r);
        let mut r = CudaReplay::load(device, &archive, trigger)?;
        let (triggered, reloaded) = (r.triggered_kernels(), r.reloaded_modules());
        let trigger_t = time_per_node(&mut r, n, reps)?;
        drop(r);
        let mut r = CudaReplay::load(device, &archive, from_launch)?;
        let early_t = time_per_node(&mut r, n, reps)?;
        drop(r);
        put(format!("{label}: graph per node"), plain_t, "us");
        put(format!("{label}: graph-pdl-wait per node ({edges} programmatic edges)"), wait_t, "us");
        put(
            format!("{label}: graph-pdl per node ({triggered} kernels trigger early, {reloaded} modules loaded twice)"),
            trigger_t,
            "us",
        );
        put(format!("{label}: graph-pdl, edges from the launch, per node"), early_t, "us");
        put(format!("{label}: graph-pdl-wait / graph"), wait_t / plain_t, "x");
        put(format!("{label}: graph-pdl / graph"), trigger_t / plain_t, "x");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configuration_is_an_archive_of_the_launches_it_names() {
        let configs = configurations(132);
        let labels: Vec<&str> = configs.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "pdl chain 100, tiny kernels",
                "pdl chain 1000, tiny kernels",
                "pdl chain 1000, 132 blocks",
                "pdl chain 1000, 1056 blocks",
                "pdl chain 1000, 2112 blocks (two waves)",
                "pdl chain 100, 1 us kernels",
                "pdl chain 100, 5 us kernels",
                "pdl chain 100, 20 us kernels",
                "pdl 8 chains x 100, tiny kernels",
                "pdl heat step x 25 (per op)",
            ]
        );
        for c in &configs {
            let archive = Archive::open(&c.archive).unwrap_or_else(|e| panic!("{}: {e}", c.label));
            let grids: Vec<u32> = archive
                .ops()
                .filter_map(|op| match op {
                    shared::archive::Op::Launch(l) => Some(l.grid.iter().product()),
                    _ => None,
                })
                .collect();
            // Every op of a chain is a launch; the heat step has a copy per three launches.
            if c.label.contains("heat") {
                assert_eq!((archive.op_count(), grids.len()), (c.nodes, 75), "{}", c.label);
            } else {
                assert_eq!(grids.len(), c.nodes, "{}", c.label);
            }
            // A chain's label names its blocks where it has more than one.
            let named = c
                .label
                .split(", ")
                .nth(1)
                .and_then(|s| s.strip_suffix(" blocks").or(s.strip_suffix(" blocks (two waves)")));
            let want = named.map_or(1, |b| b.parse::<u32>().unwrap());
            if !c.label.contains("heat") {
                assert!(grids.iter().all(|&g| g == want), "{}: {grids:?}", c.label);
            }
        }
    }

    #[test]
    fn a_wide_chain_adds_one_per_launch_to_every_element() {
        // The same builder as the 1,056-block chain, short enough for the CPU.
        let bytes = wide_chain_archive(3, 5);
        let archive = Archive::open(&bytes).unwrap();
        let mut r = shared::replay::CpuReplay::new(&archive, Default::default()).unwrap();
        r.run_iteration(&mut shared::replay::NoObserver).unwrap();
        let x: Vec<f32> =
            r.read_region(0).unwrap().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(x.len(), 5 * 256);
        assert!(x.iter().all(|&v| v == 3.0), "{:?}", x.iter().find(|&&v| v != 3.0));
    }
}
