//! `recap capture` of CUDA graphs a program builds node by node (`tests/capture/programs/
//! graph_nodes.c`, `graph_conditional.c`), on the CPU driver: every node kind the programs use
//! expanded into ops in the graph's run order at each launch, a conditional WHILE node into a while
//! op on its condition's region, and the archives replay bit-exactly.

use crate::cpudriver::Program;
use crate::intercept::{capture_ok, inspect, replay_check};

#[test]
fn capture_expands_a_graph_built_node_by_node_at_each_launch_and_replays_it_exactly() {
    let program = Program::build("graph_nodes", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("graph_nodes.recap");
    let report = capture_ok(&program, &archive, "profiler");
    let ops = &report["ops"];
    assert_eq!(ops["graph launch (expanded)"], 2, "{report:#}");
    // Per launch: four kernel nodes (v1, v2, cuGraphAddNode, one in the child graph), the memset,
    // two uploads (the pitched one dense, so one copy), ten row copies of the pitched
    // device-to-device copy, and the download.
    assert_eq!(ops["launch"], 8, "{report:#}");
    assert_eq!(ops["memset"], 2, "{report:#}");
    assert_eq!(ops["upload"], 4, "{report:#}");
    assert_eq!(ops["copy"], 20, "{report:#}");
    assert_eq!(ops["download (checked, not replayed)"], 2, "{report:#}");
    assert_eq!(ops["graph node added: kernel"], 4, "{report:#}");
    assert_eq!(ops["graph node added: memcpy"], 4, "{report:#}");
    assert_eq!(ops["graph node added: child graph"], 1, "{report:#}");
    assert!(report["incomplete"].as_object().unwrap().is_empty(), "{report:#}");

    // The run order: the memset and the uploads first, the kernel that needs both uploads after
    // them, the one added last (ordered by an edge added afterwards) after the child graph.
    let listing = inspect(&archive);
    let first_launch: Vec<&str> = listing
        .lines()
        .filter(|l| l.contains("launch scale_add") || l.contains("launch mix_u32"))
        .take(4)
        .map(|l| if l.contains("mix_u32") { "mix" } else { "axpy" })
        .collect();
    assert_eq!(first_launch, ["axpy", "mix", "axpy", "axpy"], "{listing}");
    for engine in ["interp", "jit"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("3 of 3 regions pass"), "engine {engine}:\n{out}");
    }
}

#[test]
fn capture_turns_a_conditional_while_node_into_a_while_op_on_its_condition_region() {
    let program = Program::build("graph_conditional", &["-lcuda"]);
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("graph_conditional.recap");
    let report = capture_ok(&program, &archive, "profiler");
    let ops = &report["ops"];
    // The condition takes its default at the launch (a memset of its region), then the loop: one
    // while op whose body is the kernel that sets the condition through its handle parameter.
    assert_eq!(ops["conditional node (a while op)"], 1, "{report:#}");
    assert_eq!(ops["memset"], 1, "{report:#}");
    assert_eq!(ops["launch"], 1, "{report:#}");
    assert!(report["incomplete"].as_object().unwrap().is_empty(), "{report:#}");
    let listing = inspect(&archive);
    assert!(listing.contains("while"), "{listing}");
    // Ten passes on replay, as in the program: y and the pass counter match what it left.
    for engine in ["interp", "jit"] {
        let out = replay_check(&archive, engine);
        assert!(out.contains("3 of 3 regions pass"), "engine {engine}:\n{out}");
    }
}
