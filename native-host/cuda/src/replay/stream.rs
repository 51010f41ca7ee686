//! Running a replay: launching the graph, or in stream mode submitting the steps one by one on
//! each GPU's stream (an op on another GPU waiting for an event of the one before, loops and
//! branches driven from the host by reading their condition word), waiting, and per-op times.

use std::collections::HashMap;
use std::ffi::c_void;
use std::time::Duration;

use cudarc::driver::sys::{self, CUdeviceptr};
use shared::archive::OpId;

use super::graph::GraphState;
use super::step::{Args, Control, Fill, KernelStep, Step};
use super::{CudaError, CudaReplay, Mode, OpHook, OpTime};
use crate::driver::{call, DriverError};
use crate::kernels;

/// What a loop does after `done` passes, its condition word reading `word`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Run,
    Done,
    /// The condition still asks for a pass, but `max_iterations` passes are done.
    Limited,
}

fn next_pass(done: u32, max_iterations: u32, word: u32) -> Pass {
    match (word, max_iterations) {
        (0, _) => Pass::Done,
        (_, 0) => Pass::Run,
        (_, max) if done >= max => Pass::Limited,
        _ => Pass::Run,
    }
}

impl CudaReplay {
    /// Stream mode: makes `slot` current, its stream first waiting for everything submitted on
    /// the slot of the op before.
    fn enter(&mut self, slot: usize) -> Result<sys::CUstream, DriverError> {
        if self.slots.len() == 1 {
            return Ok(self.slots[0].stream);
        }
        let handoff = if slot != self.current {
            let from = &self.slots[self.current];
            from.device.bind()?;
            call!(cuEventRecord(from.handoff, from.stream))?;
            Some(from.handoff)
        } else {
            None
        };
        let to = &self.slots[slot];
        to.device.bind()?;
        if let Some(event) = handoff {
            call!(cuStreamWaitEvent(to.stream, event, 0))?;
        }
        self.current = slot;
        Ok(to.stream)
    }

    /// Submits one replay without waiting for it. Pair with [`CudaReplay::synchronize`].
    pub fn launch(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))?;
        let r = self.submit();
        r.map_err(|e| self.fail(e))
    }

    fn submit(&mut self) -> Result<(), CudaError> {
        match &self.graph {
            Some(g) if self.mode == Mode::Graph => {
                call!(cuGraphLaunch(g.exec, self.slots[0].stream))?;
                Ok(())
            }
            _ => {
                self.op_log.clear();
                let top: Vec<OpId> = self.plan.dags[0].nodes.clone();
                self.run_ops(&top, None)?;
                self.join_slots()
            }
        }
    }

    /// Stream mode: the first slot's stream waits for the work of every other slot, so that
    /// what follows on it (the end event, a read) comes after the whole replay.
    fn join_slots(&mut self) -> Result<(), CudaError> {
        if self.slots.len() > 1 {
            for i in 1..self.slots.len() {
                self.enter(i)?;
            }
            self.enter(0)?;
        }
        Ok(())
    }

    /// Replays once op by op (stream mode only), calling `hook` with each op as it finishes (an op
    /// without a body once it has run, a while/if once its passes are done), in the order the CPU
    /// replay's `step` gives them: what holding the GPU beside another replay, op by op, needs.
    pub fn replay_each_op(&mut self, hook: &mut OpHook<'_>) -> Result<(), CudaError> {
        if self.mode != Mode::Stream {
            return Err(CudaError::Invalid("an op-by-op replay needs stream mode".into()));
        }
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))?;
        self.op_log.clear();
        let top: Vec<OpId> = self.plan.dags[0].nodes.clone();
        let r = self.run_ops(&top, Some(hook)).and_then(|_| self.join_slots());
        r.map_err(|e| self.fail(e))?;
        self.synchronize()
    }

    /// Waits for everything submitted so far.
    pub fn synchronize(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        let r = self.slots.iter().try_for_each(|s| s.device.bind().and_then(|_| call!(cuStreamSynchronize(s.stream))));
        self.current = 0;
        r.map_err(|e| self.fail(e.into()))?;
        self.slots[0].device.bind()?;
        Ok(())
    }

    /// Replays once and waits; returns the device time between the replay's start and end.
    pub fn replay(&mut self) -> Result<Duration, CudaError> {
        self.ready()?;
        self.apply_param_changes().map_err(|e| self.fail(e))?;
        let r = (|| {
            let stream = self.slots[0].stream;
            call!(cuEventRecord(self.start, stream))?;
            self.submit()?;
            call!(cuEventRecord(self.end, stream))?;
            for s in &self.slots {
                s.device.bind()?;
                call!(cuStreamSynchronize(s.stream))?;
            }
            self.slots[0].device.bind()?;
            let mut ms = 0f32;
            call!(cuEventElapsedTime(&mut ms, self.start, self.end))?;
            Ok(Duration::from_secs_f64(ms as f64 / 1e3))
        })();
        r.map_err(|e| self.fail(e))
    }

    fn run_ops(&mut self, ops: &[OpId], mut hook: Option<&mut OpHook<'_>>) -> Result<(), CudaError> {
        for &op in ops {
            self.run_op(op, hook.as_deref_mut())?;
            if let Some(hook) = hook.as_deref_mut() {
                hook(self, op)?;
            }
        }
        Ok(())
    }

    fn run_op(&mut self, op: OpId, mut hook: Option<&mut OpHook<'_>>) -> Result<(), CudaError> {
        let stream = self.enter(self.op_slots[op as usize]).map_err(|e| self.op_error(op, e))?;
        let step = self.steps[op as usize].clone();
        let r: Result<(), DriverError> = match step {
            Step::Kernel(mut k) => launch_kernel(&mut k, stream),
            Step::Copy { src, dst, len, .. } => call!(cuMemcpyDtoDAsync_v2(dst, src, len as usize, stream)),
            Step::Memset { dst, fill, slot } => self.run_fill(slot, dst, fill),
            Step::Control { kind, cond, max_iterations, .. } => {
                let body: Vec<OpId> = self.plan.body(op).map(|d| d.nodes.clone()).unwrap_or_default();
                let mut done = 0u32;
                loop {
                    if kind == Control::If && done == 1 {
                        break;
                    }
                    let mut word = 0u32;
                    call!(cuStreamSynchronize(stream)).map_err(|e| self.op_error(op, e))?;
                    call!(cuMemcpyDtoH_v2(&mut word as *mut u32 as *mut c_void, cond, 4))
                        .map_err(|e| self.op_error(op, e))?;
                    match next_pass(done, max_iterations, word) {
                        Pass::Run => {}
                        Pass::Done => break,
                        Pass::Limited => {
                            *self.host_limit_hits.entry(op).or_default() += 1;
                            break;
                        }
                    }
                    self.run_ops(&body, hook.as_deref_mut())?;
                    // The body ran on this op's GPU; a later pass reads the word on its stream.
                    self.enter(self.op_slots[op as usize]).map_err(|e| self.op_error(op, e))?;
                    done += 1;
                }
                Ok(())
            }
            Step::Barrier | Step::Skip => return Ok(()),
        };
        r.map_err(|e| self.op_error(op, e))?;
        if self.options.sync_each_op {
            call!(cuStreamSynchronize(stream)).map_err(|e| self.op_error(op, e))?;
        }
        if self.options.op_timing {
            let i = self.op_log.len();
            if i >= self.op_events.len() {
                let mut ev = std::ptr::null_mut();
                call!(cuEventCreate(&mut ev, sys::CUevent_flags::CU_EVENT_DEFAULT as u32))?;
                self.op_events.push(ev);
            }
            call!(cuEventRecord(self.op_events[i], stream))?;
            self.op_log.push((op, i));
        }
        Ok(())
    }

    fn run_fill(&self, slot: usize, dst: CUdeviceptr, fill: Fill) -> Result<(), DriverError> {
        let stream = self.slots[slot].stream;
        match fill {
            Fill::Memset { elem: 1, value, count } => call!(cuMemsetD8Async(dst, value as u8, count as usize, stream)),
            Fill::Memset { elem: 2, value, count } => {
                call!(cuMemsetD16Async(dst, value as u16, count as usize, stream))
            }
            Fill::Memset { value, count, .. } => call!(cuMemsetD32Async(dst, value, count as usize, stream)),
            other => launch_kernel(&mut self.fill_step(slot, dst, other), stream),
        }
    }

    pub(super) fn fill_step(&self, slot: usize, dst: CUdeviceptr, fill: Fill) -> KernelStep {
        let s = &self.slots[slot];
        match fill {
            Fill::U64 { count, pattern } => Args::default().u64(dst).u64(count).u64(pattern).launch(
                (s.fill_u64, slot),
                kernels::fill_grid(count),
                kernels::FILL_BLOCK,
            ),
            Fill::Bytes { len, pattern, width } => Args::default().u64(dst).u64(len).u64(pattern).u32(width).launch(
                (s.fill_bytes, slot),
                kernels::fill_grid(len),
                kernels::FILL_BLOCK,
            ),
            Fill::Memset { .. } => unreachable!("memsets are not kernels"),
        }
    }

    /// Per-op device times of the last stream-mode replay with `op_timing` on.
    pub fn op_times(&mut self) -> Result<Vec<OpTime>, CudaError> {
        self.ready()?;
        let mut totals: Vec<OpTime> = Vec::new();
        let mut index: HashMap<OpId, usize> = HashMap::new();
        let mut prev = self.start;
        for &(op, ev) in &self.op_log {
            let mut ms = 0f32;
            call!(cuEventElapsedTime(&mut ms, prev, self.op_events[ev]))?;
            prev = self.op_events[ev];
            let i = *index.entry(op).or_insert_with(|| {
                totals.push(OpTime { op, label: self.labels[op as usize].clone(), runs: 0, total: Duration::ZERO });
                totals.len() - 1
            });
            totals[i].runs += 1;
            totals[i].total += Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3);
        }
        Ok(totals)
    }

    /// For comparison only: records one stream-mode submission by stream capture and launches
    /// that graph from now on (a chain in archive order, not the plan's DAG). Archives with loops
    /// cannot be captured: their host loop reads the condition back.
    pub fn capture_stream_graph(&mut self) -> Result<(), CudaError> {
        self.ready()?;
        if self.mode != Mode::Stream
            || self.steps.iter().any(|s| matches!(s, Step::Control { .. }))
            || self.slots.len() > 1
        {
            return Err(CudaError::Invalid(
                "only a stream-mode replay on one GPU without loops can be captured".into(),
            ));
        }
        let stream = self.slots[0].stream;
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        call!(cuStreamBeginCapture_v2(stream, mode))?;
        let submitted = self.submit();
        let mut graph = std::ptr::null_mut();
        let ended = call!(cuStreamEndCapture(stream, &mut graph));
        submitted?;
        ended?;
        let mut exec = std::ptr::null_mut();
        call!(cuGraphInstantiateWithFlags(&mut exec, graph, 0))?;
        self.graph = Some(GraphState { graph, exec, kernel_nodes: HashMap::new(), node_count: 0, edge_count: 0 });
        self.mode = Mode::Graph;
        Ok(())
    }
}

fn launch_kernel(k: &mut KernelStep, stream: sys::CUstream) -> Result<(), DriverError> {
    let mut args = k.arg_pointers();
    let params = if args.is_empty() { std::ptr::null_mut() } else { args.as_mut_ptr() };
    if !k.attrs.is_empty() {
        let config = sys::CUlaunchConfig {
            gridDimX: k.grid[0],
            gridDimY: k.grid[1],
            gridDimZ: k.grid[2],
            blockDimX: k.block[0],
            blockDimY: k.block[1],
            blockDimZ: k.block[2],
            sharedMemBytes: k.shared,
            hStream: stream,
            attrs: k.attrs.as_mut_ptr(),
            numAttrs: k.attrs.len() as u32,
        };
        return call!(cuLaunchKernelEx(&config, k.func.function, params, std::ptr::null_mut()));
    }
    call!(cuLaunchKernel(
        k.func.function,
        k.grid[0],
        k.grid[1],
        k.grid[2],
        k.block[0],
        k.block[1],
        k.block[2],
        k.shared,
        stream,
        params,
        std::ptr::null_mut(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_runs_while_its_word_is_set_and_its_limit_is_named_when_it_stops_it() {
        // Unbounded: the word alone decides.
        assert_eq!(next_pass(0, 0, 1), Pass::Run);
        assert_eq!(next_pass(1_000_000, 0, 7), Pass::Run);
        assert_eq!(next_pass(3, 0, 0), Pass::Done);
        // Bounded: below the limit as unbounded; at it, a set word is a loop the limit stopped.
        assert_eq!(next_pass(3, 4, 1), Pass::Run);
        assert_eq!(next_pass(4, 4, 1), Pass::Limited);
        assert_eq!(next_pass(4, 4, 0), Pass::Done);
        assert_eq!(next_pass(0, 1, u32::MAX), Pass::Run);
        assert_eq!(next_pass(1, 1, u32::MAX), Pass::Limited);
    }
}
