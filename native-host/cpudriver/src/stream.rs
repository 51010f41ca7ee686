//! Streams and events, which are bookkeeping here (a stream keeps the context it was made in): work runs to completion when it is issued, so
//! every stream is idle and every recorded event complete. Events keep the host time they were
//! recorded at, for `cuEventElapsedTime`. The profiler calls succeed and do nothing.

use std::ffi::{c_float, c_int, c_uint};
use std::time::Instant;

use crate::driver::{driver, ready, Event};
use crate::ffi::{Handle, Out};
use crate::result::{guard, CUresult};

/// `CU_EVENT_DISABLE_TIMING`.
const EVENT_DISABLE_TIMING: c_uint = 2;

// SAFETY (every `unsafe` below): the pointers are the caller's, valid as the driver API requires.

fn create_stream(stream: &Out<Handle>) -> CUresult {
    guard(|| {
        let mut d = ready(None)?;
        stream.check()?;
        let ctx = d.current()?;
        stream.set(d.streams.insert(ctx))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, _flags: c_uint) -> CUresult {
    create_stream(&unsafe { Out::new(stream) })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(stream: *mut Handle, _flags: c_uint, _priority: c_int) -> CUresult {
    create_stream(&unsafe { Out::new(stream) })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: Handle) -> CUresult {
    guard(|| driver()?.streams.remove(stream).map(drop))
}

/// Waits for nothing (the stream's work is done); reports the context's sticky fault.
fn synchronize(stream: Handle) -> CUresult {
    guard(|| ready(Some(stream)).map(drop))
}

fn record(event: Handle, stream: Handle) -> CUresult {
    guard(|| {
        let mut d = ready(Some(stream))?;
        d.events.get_mut(event)?.recorded = Some(Instant::now());
        Ok(())
    })
}

fn wait_event(stream: Handle, event: Handle) -> CUresult {
    guard(|| {
        let d = ready(Some(stream))?;
        d.events.get(event).map(drop)
    })
}

exports! {
    cuStreamSynchronize(stream: Handle) | cuStreamSynchronize_ptsz => synchronize(stream);
    cuStreamQuery(stream: Handle) | cuStreamQuery_ptsz => synchronize(stream);
    cuStreamWaitEvent(stream: Handle, event: Handle, _flags: c_uint) | cuStreamWaitEvent_ptsz => wait_event(stream, event);
    cuEventRecord(event: Handle, stream: Handle) | cuEventRecord_ptsz => record(event, stream);
    cuEventRecordWithFlags(event: Handle, stream: Handle, _flags: c_uint) | cuEventRecordWithFlags_ptsz => record(event, stream);
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Handle, flags: c_uint) -> CUresult {
    let event = unsafe { Out::new(event) };
    guard(|| {
        let mut d = ready(None)?;
        event.check()?;
        event.set(d.events.insert(Event { recorded: None, timing: flags & EVENT_DISABLE_TIMING == 0 }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: Handle) -> CUresult {
    guard(|| driver()?.events.remove(event).map(drop))
}

/// An event is complete once recorded (and, as on the real driver, when it never was).
#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: Handle) -> CUresult {
    guard(|| driver()?.events.get(event).map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: Handle) -> CUresult {
    guard(|| {
        let d = ready(None)?;
        d.events.get(event).map(drop)
    })
}

/// Milliseconds of host time between the two events' records.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut c_float, start: Handle, end: Handle) -> CUresult {
    let ms = unsafe { Out::new(ms) };
    guard(|| {
        let d = driver()?;
        let (start, end) = (d.events.get(start)?, d.events.get(end)?);
        let (Some(t0), Some(t1), true, true) = (start.recorded, end.recorded, start.timing, end.timing) else {
            return Err(CUresult::INVALID_HANDLE);
        };
        let elapsed = match t1.checked_duration_since(t0) {
            Some(d) => d.as_secs_f64(),
            None => -t0.duration_since(t1).as_secs_f64(),
        };
        ms.set((elapsed * 1e3) as c_float)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut c_float, start: Handle, end: Handle) -> CUresult {
    unsafe { cuEventElapsedTime_v2(ms, start, end) }
}

#[no_mangle]
pub unsafe extern "C" fn cuProfilerStart() -> CUresult {
    guard(|| driver().map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn cuProfilerStop() -> CUresult {
    guard(|| driver().map(drop))
}
