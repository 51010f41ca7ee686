//! `recap capture --repeat-range N`: the program's own spread, kept in its archive.
//!
//! A program whose result depends on the order the GPU runs its blocks (float atomics, split-K,
//! a lock-ordered sum) gives different last bits from run to run. After the program ends, the
//! recorded range is run N more times on the device the program ran on, through the same driver,
//! each from the captured initial state (a child `recap replay --device cuda --mode stream`, which
//! reaches that driver as `libcuda.so.1`, op by op as the program issued them). Each stretch where
//! those runs and the program's own disagree gets its spread recorded in the archive's `spread`
//! section (`shared::archive::spread`): a check on any device then calls it nondeterministic and
//! judges it with a tolerance no tighter than that. Untyped bytes that disagree get no spread (no
//! type says how far apart two byte patterns are) and stay exact; the report says how many.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use shared::archive::{with_recorded_spread, ElemType, RecordedSpread};
use shared::capture::RepeatReport;
use shared::check::RegionCheck;

/// Runs the range of the archive at `archive` `runs` more times on `driver` and records the
/// spread in place. A failure leaves the archive as it was, and the report says why.
pub fn measure(archive: &Path, driver: &Path, runs: u32) -> RepeatReport {
    let started = std::time::Instant::now();
    let mut report = match measure_inner(archive, driver, runs) {
        Ok(r) => r,
        Err(e) => RepeatReport { runs, error: Some(format!("{e:#}")), ..RepeatReport::default() },
    };
    report.seconds = started.elapsed().as_secs_f64();
    report
}

fn measure_inner(archive: &Path, driver: &Path, runs: u32) -> Result<RepeatReport> {
    let shim = super::libcuda_folder("recap-repeat-", driver)?;
    let search = super::prepend(shim.path(), "LD_LIBRARY_PATH");
    let exe = std::env::current_exe().context("finding the recap executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("replay").arg(archive).args(["--device", "cuda", "--mode", "stream", "--check", "--json", "--quiet"]);
    // Bit for bit: every difference from the program's run counts.
    cmd.args(["--ulps", "0", "--rtol", "0", "--atol", "0"]);
    if runs > 1 {
        cmd.args(["--determinism", &runs.to_string()]);
    }
    let out = cmd.env("LD_LIBRARY_PATH", search).output().context("running the range again with recap replay")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let check = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["type"] == "check")
        .and_then(|v| serde_json::from_value::<Vec<RegionCheck>>(v["regions"].clone()).ok());
    let Some(check) = check else {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let why = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("it gave no verdict");
        bail!("the range did not run again on the capture's device: {why}");
    };
    let mut spreads = Vec::new();
    let mut untyped = 0u64;
    for r in &check {
        for s in &r.stretches {
            let differed = s.inexact.max(s.spread.map_or(0, |sp| sp.elements));
            if differed == 0 {
                continue;
            }
            if s.ty == ElemType::Untyped {
                untyped += 1;
                continue;
            }
            let (mut ulps, mut abs) = s.spread.map_or((0, 0.0), |sp| (sp.ulps, sp.abs));
            // Against the program's own run: ulps for floats, values for integers.
            ulps = ulps.max(if s.ty.is_float() { s.max_ulps } else { s.max_abs.min(u64::MAX as f64) as u64 });
            abs = abs.max(s.max_abs);
            spreads.push(RecordedSpread {
                region: r.region,
                offset: s.offset,
                len: s.len,
                ulps,
                abs,
                elements: differed,
            });
        }
    }
    let bytes = std::fs::read(archive).with_context(|| format!("reading {}", archive.display()))?;
    let bytes =
        with_recorded_spread(&bytes, &spreads).with_context(|| format!("adding spread to {}", archive.display()))?;
    recap::types::write_whole(archive, &bytes).with_context(|| format!("writing {}", archive.display()))?;
    Ok(RepeatReport {
        runs,
        stretches: spreads.len() as u64,
        max_ulps: spreads.iter().map(|s| s.ulps).max().unwrap_or(0),
        untyped_differing: untyped,
        error: None,
        seconds: 0.0,
    })
}

/// The report's lines.
pub fn print_report(r: &RepeatReport) {
    if let Some(e) = &r.error {
        println!("  repeat-range: no spread recorded: {e}");
        return;
    }
    if r.stretches == 0 {
        println!("  repeat-range: {} more runs of the range agree with the program's bit for bit", r.runs);
    } else {
        println!(
            "  repeat-range: {} more runs of the range: {} stretches nondeterministic, up to {} ulps apart (kept in the archive)",
            r.runs, r.stretches, r.max_ulps
        );
    }
    if r.untyped_differing > 0 {
        println!(
            "    {} untyped stretches also differ between runs; with no type they stay compared exactly",
            r.untyped_differing
        );
    }
}
