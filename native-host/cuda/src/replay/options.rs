//! What a replay is asked to do: the submission [`Mode`], programmatic dependent launch ([`Pdl`])
//! and the rest of [`ReplayOptions`], most of them switches for comparison.

/// How the ops are submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// One CUDA graph built with the explicit node API, instantiated once, launched per replay.
    #[default]
    Graph,
    /// The same ops launched one by one on a stream; loops and branches are driven from the host.
    Stream,
}

impl std::str::FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, UnknownMode> {
        match s {
            "graph" => Ok(Mode::Graph),
            "stream" => Ok(Mode::Stream),
            _ => Err(UnknownMode(s.to_string())),
        }
    }
}

/// A submission mode name that is neither `graph` nor `stream`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode {0}: use graph or stream")]
pub struct UnknownMode(pub String);

/// Whether kernels follow kernels through programmatic edges ([`ReplayOptions::pdl`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pdl {
    /// Where the GPU and driver have it; ordinary edges elsewhere, silently.
    #[default]
    Auto,
    /// Asked for: where the GPU or driver lacks it, ordinary edges and a warning.
    On,
    /// Ordinary edges only (for comparison).
    Off,
}

/// What a replay is asked to do besides running the ops.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayOptions {
    pub mode: Mode,
    /// Chain every op after the one before it instead of following the plan's DAG (for comparison).
    pub serial: bool,
    /// Stream mode: record an event after every op so that [`CudaReplay::op_times`] has figures.
    pub op_timing: bool,
    /// Stream mode: wait for every op to finish before the next, so that a fault names its op.
    pub sync_each_op: bool,
    /// Load code as modules and give graph nodes context-bound `CUfunction`s instead of the
    /// library `CUkernel`s the CUDA runtime uses (for comparison).
    pub module_functions: bool,
    /// Join a WHILE body's kernels to recap's condition kernel with ordinary edges even where
    /// programmatic edges are available (for comparison).
    pub plain_condition_edges: bool,
    /// Start the programmatic edges to the condition kernel at the body kernel's completion
    /// trigger (`CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC`) instead of at its launch
    /// (`CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`, the default: the condition kernel may start once
    /// every block of the body kernel has begun). Either way `griddepcontrol.wait` holds the
    /// condition kernel until the body's writes are visible; the launch-order port only lets it
    /// be scheduled earlier, which is about 0.1 us per iteration faster on an H200 (for comparison).
    pub trigger_condition_edges: bool,
    /// Programmatic dependent launch between the archive's kernels in graph mode: every kernel
    /// waits for its predecessors at entry (`griddepcontrol.wait`, see [`crate::pdl`]) and kernel
    /// nodes follow kernel nodes through programmatic edges, so a dependent kernel is scheduled
    /// while its predecessor still runs. By default wherever the GPU (sm_90 and newer) and the
    /// driver (12.3) have it.
    pub pdl: Pdl,
    /// With `pdl`: start the programmatic edges between kernels at the predecessor's launch
    /// (`CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER`: the dependent may be scheduled once every block
    /// of its predecessor has begun) instead of at its completion trigger (the default, what
    /// programmatic stream serialization does; for comparison).
    pub pdl_from_launch: bool,
    /// With `pdl`: every kernel waits at entry, but none triggers its dependents early (for
    /// comparison). By default the kernels whose every launch is at most half a wave on its GPU also fire
    /// `griddepcontrol.launch_dependents` first (see [`crate::pdl`]), so that a dependent is
    /// scheduled once all of their blocks have started rather than once all have exited.
    pub pdl_wait_only: bool,
    /// Several GPUs: turn peer access between them off, so that copies between them go through
    /// the driver's staging as on GPUs without a direct link (for comparison and tests).
    pub without_peer_access: bool,
    /// Regions at their captured addresses or fresh ones; `None` follows the archive
    /// (`shared::placement`, placed.rs).
    pub placement: Option<shared::placement::Placement>,
}

#[cfg(test)]
mod tests {
    use super::{Mode, UnknownMode};

    #[test]
    fn modes_parse_by_name_and_others_are_refused_by_name() {
        assert_eq!("graph".parse(), Ok(Mode::Graph));
        assert_eq!("stream".parse(), Ok(Mode::Stream));
        let e = "graphs".parse::<Mode>().unwrap_err();
        assert_eq!(e, UnknownMode("graphs".into()));
        assert_eq!(e.to_string(), "unknown mode graphs: use graph or stream");
    }
}
