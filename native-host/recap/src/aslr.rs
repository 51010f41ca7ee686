//! Address-space layout randomisation, off where captured device addresses must come back.
//!
//! With unified addressing the CUDA driver puts device memory in the process's own address space,
//! in the range where the kernel also maps libraries and heaps; the kernel moves that range by a
//! random offset in every process. A region placed at its captured address
//! (`shared::placement`) can be reserved again only if the same range is free in the replaying
//! process, which, with randomisation on, it almost never is. So `recap capture` runs the program
//! with randomisation off (as gdb runs the programs it debugs), a CUDA replay of an archive that
//! places regions runs itself again with randomisation off, and the host starts the worker of a
//! CUDA session of such an archive with it off: then both processes lay out their memory the same
//! way, and the driver grants the captured ranges (measured on an H100 machine: with
//! randomisation on in either, the reservation lands elsewhere and the replay stops naming both
//! addresses).

use std::ffi::OsString;

/// `personality(2)`'s flag that turns randomisation off for the programs a process executes.
const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
/// Asks `personality(2)` for the current persona without changing it.
const QUERY: libc::c_ulong = 0xffff_ffff;

/// Whether this process runs with randomisation on.
pub fn randomized() -> bool {
    // SAFETY: the query changes nothing.
    let persona = unsafe { libc::personality(QUERY) };
    persona != -1 && (persona as libc::c_ulong & ADDR_NO_RANDOMIZE) == 0
}

/// Turns randomisation off for the programs this process executes from now on (this process keeps
/// its own layout). A sandbox may refuse it: a container's default seccomp profile allows
/// `personality` only with a few values.
pub fn disable_for_exec() -> std::io::Result<()> {
    // SAFETY: both calls only read or set this process's persona.
    let persona = unsafe { libc::personality(QUERY) };
    if persona == -1 || unsafe { libc::personality(persona as libc::c_ulong | ADDR_NO_RANDOMIZE) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `cmd` run its program with randomisation off, set in the child between fork and exec;
/// where the kernel refuses, the program runs with it on (and a placement it then cannot make is
/// the replay's clear error).
pub fn disable_in(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure makes two `personality` system calls and builds
    // no value that allocates, as a child of a threaded process may.
    unsafe {
        cmd.pre_exec(|| {
            let _ = disable_for_exec();
            Ok(())
        })
    }
}

/// Runs this very command again with randomisation off; returns only where that cannot be done
/// (the error says why), and the caller goes on with randomisation on.
pub fn reexec_without_randomization() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    if let Err(e) = disable_for_exec() {
        return e;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    std::process::Command::new(exe).args(args).exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program started through [`disable_in`] runs in a persona without randomisation (where
    /// this machine allows the call at all), and one started plainly does not.
    #[test]
    fn a_program_started_through_disable_in_runs_without_randomisation() {
        let persona = |cmd: &mut std::process::Command| {
            let out = cmd.arg("/proc/self/personality").output().expect("cat runs");
            libc::c_ulong::from_str_radix(String::from_utf8_lossy(&out.stdout).trim(), 16).expect("a hex persona")
        };
        if !randomized() {
            eprintln!("skipped: this process already runs without randomisation, so its children would too");
            return;
        }
        if let Err(e) = disable_for_exec().and_then(|()| {
            // Undo at once: the test only asks whether the kernel allows the call.
            // SAFETY: reads and restores this process's own persona.
            let p = unsafe { libc::personality(QUERY) };
            (unsafe { libc::personality(p as libc::c_ulong & !ADDR_NO_RANDOMIZE) } != -1)
                .then_some(())
                .ok_or_else(std::io::Error::last_os_error)
        }) {
            eprintln!("skipped: this sandbox refuses personality(2) ({e})");
            return;
        }
        let plain = persona(&mut std::process::Command::new("cat"));
        assert_eq!(plain & ADDR_NO_RANDOMIZE, 0, "a plain child keeps randomisation ({plain:#x})");
        let off = persona(disable_in(&mut std::process::Command::new("cat")));
        assert_ne!(off & ADDR_NO_RANDOMIZE, 0, "the child runs without randomisation ({off:#x})");
        assert!(randomized(), "this process keeps its own persona");
    }
}
