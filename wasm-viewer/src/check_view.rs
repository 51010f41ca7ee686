//! The check panel: a replay's verdict as the viewer shows it, region by region and, inside each
//! region, stretch by stretch in the stretch's element type (`shared::check`).
//!
//! A region's row keeps the summary columns (verdict, tolerance, mismatches, errors, first
//! mismatch); under it one row per stretch says how it was typed, whether it is bit-exact, within
//! its tolerance or different, the tolerance it was judged by, the first differing element as that
//! type's values, the spread where replays disagreed, and a histogram of how far the inexact
//! elements lie from the expected ones in ulps. Plain Rust to HTML, so it is tested natively.

use std::fmt::Write as _;

use shared::check::{Outcome, StretchCheck, TypeSource};
use shared::protocol::{CheckReport, CheckState, RegionCheckReport};

use crate::model::esc;
use crate::plot;

/// The whole panel for a finished check.
pub fn check_html(c: &CheckReport) -> String {
    if c.regions.is_empty() {
        return r#"<p class="muted">This archive records no expected state to check against.</p>"#.to_string();
    }
    let replays = if c.replays > 1 {
        format!(
            " (judged over {} whole replays on the device; stretches where they disagreed are nondeterministic)",
            c.replays
        )
    } else {
        String::new()
    };
    let (class, headline) = match c.state {
        CheckState::Exact => ("pass", "PASS (exact): every region matches its expected state bit for bit"),
        CheckState::Within => (
            "pass",
            "PASS (within tolerance): every region matches its expected state, some elements only within their type's tolerance",
        ),
        CheckState::Failed => ("fail", "FAIL: some regions differ from their expected state"),
        CheckState::NothingToCheck => ("fail", "nothing to check: the archive holds no expected state"),
    };
    let mut h = format!(
        r#"<div class="verdict {class}" id="r-verdict">{headline}{replays}</div><table class="params check"><thead><tr><th>region</th><th>verdict</th><th>tolerance</th><th>mismatches</th><th>max abs err</th><th>max rel err</th><th>first mismatch</th></tr></thead><tbody>"#
    );
    for r in &c.regions {
        region_rows(&mut h, r);
    }
    h.push_str("</tbody></table>");
    h
}

fn region_rows(h: &mut String, r: &RegionCheckReport) {
    let first = r
        .first_mismatch
        .as_ref()
        .map(|m| {
            let value = |v: Option<f64>| v.map(plot::num).unwrap_or_else(|| "NaN".into());
            format!("[{}] got {} want {}", m.index, value(m.got), value(m.want))
        })
        .unwrap_or_default();
    let verdict = if r.passed { "pass" } else { "fail" };
    let _ = write!(
        h,
        r#"<tr class="{verdict}" data-check-region="{}"><td class="mono">{}</td><td><span class="badge {verdict}">{verdict}</span>{}</td><td>{}</td><td>{} of {}</td><td>{}</td><td>{}</td><td class="mono">{}</td></tr>"#,
        r.region,
        esc(&r.name),
        if r.nondeterministic { r#" <span class="badge warn">nondeterministic</span>"# } else { "" },
        esc(&r.tolerance),
        r.mismatches,
        r.count,
        r.max_abs_error.map(plot::num).unwrap_or_default(),
        r.max_rel_error.map(plot::num).unwrap_or_default(),
        esc(&first)
    );
    // A region judged as one untyped, exact stretch has nothing more to say than its row.
    let plain = r.stretches.len() == 1 && r.stretches[0].outcome == Outcome::Exact;
    if plain {
        return;
    }
    for (i, s) in r.stretches.iter().enumerate() {
        stretch_row(h, r.region, i, s);
    }
}

fn stretch_row(h: &mut String, region: u32, index: usize, s: &StretchCheck) {
    let typed_by = match s.typed_by {
        TypeSource::Ptx => "typed by the PTX that wrote it",
        TypeSource::Declared => "the region's declared type",
        TypeSource::Program => "typed by the program's array that held it",
        TypeSource::None => "untyped: no PTX wrote it",
    };
    let (badge, outcome) = match s.outcome {
        Outcome::Exact => ("pass", "exact"),
        Outcome::Within => ("pass", "within tolerance"),
        Outcome::Differ => ("fail", "differ"),
    };
    let tolerance = match &s.tolerance {
        Some(t) => format!("{} ulps or atol {} + rtol {}", t.ulps, plot::num(t.atol), plot::num(t.rtol)),
        None => "exact".to_string(),
    };
    let mut detail = format!("{} of {} elements inexact, {} outside", s.inexact, s.elements, s.differing);
    if s.inexact > 0 && s.tolerance.is_some() {
        let _ = write!(detail, "; max {} ulps, |d| {}", s.max_ulps, plot::num(s.max_abs));
    }
    if let Some(f) = &s.first {
        let _ = write!(detail, "; first at element {} (byte {}): got {} want {}", f.index, f.offset, f.got, f.want);
    }
    for clause in s.spread_clauses() {
        let _ = write!(detail, "; {clause}");
    }
    let nondeterministic = s.spread.is_some() || s.recorded_spread.is_some();
    let _ = write!(
        h,
        r#"<tr class="stretch {badge}" data-stretch="{region}:{index}"><td class="mono">bytes {}..{} {}</td><td><span class="badge {badge}">{outcome}</span>{}</td><td>{}</td><td colspan="4"><div class="stretch-detail">{} <span class="muted">({typed_by})</span></div>{}</td></tr>"#,
        s.offset,
        s.offset + s.len,
        esc(s.ty.name()),
        if nondeterministic { r#" <span class="badge warn">nondeterministic</span>"# } else { "" },
        esc(&tolerance),
        esc(&detail),
        ulp_histogram(&s.ulp_histogram)
    );
}

/// The distances of the inexact elements in ulps, by power of two: bucket `k` counts distances in
/// `[2^(k-1), 2^k)`, bucket 0 the elements at distance 0. Empty buckets past the last are left out.
pub fn ulp_histogram(buckets: &[u64]) -> String {
    let last = match buckets.iter().rposition(|&n| n > 0) {
        Some(i) => i,
        None => return String::new(),
    };
    let bars: Vec<(String, f64)> = buckets[..=last]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let label = match k {
                0 => "0 ulps".to_string(),
                1 => "1 ulp".to_string(),
                k if k >= 64 => format!("≥ 2^{} ulps", k - 1),
                k => format!("{}–{} ulps", 1u64 << (k - 1), (1u64 << k) - 1),
            };
            (label, n as f64)
        })
        .collect();
    format!(
        r#"<div class="ulp-histogram" title="inexact elements by distance in ulps">{}</div>"#,
        plot::bars_svg(&bars, 360, "elements")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::archive::ElemType;
    use shared::check::{ElementDiff, FloatTolerance, Spread};

    fn stretch(outcome: Outcome, spread: Option<Spread>, first: Option<ElementDiff>) -> StretchCheck {
        StretchCheck {
            offset: 0,
            len: 32,
            ty: ElemType::F32,
            typed_by: TypeSource::Ptx,
            outcome,
            elements: 8,
            inexact: 3,
            differing: if outcome == Outcome::Differ { 1 } else { 0 },
            tolerance: Some(FloatTolerance { ulps: 4, rtol: 1e-5, atol: 0.0 }),
            max_ulps: 6,
            max_abs: 1e-3,
            max_rel: 1e-6,
            first,
            spread,
            recorded_spread: None,
            ulp_histogram: vec![0, 1, 0, 2],
        }
    }

    fn report(state: CheckState, passed: bool, s: StretchCheck, replays: u32) -> CheckReport {
        let nondeterministic = s.spread.is_some();
        CheckReport {
            passed,
            state,
            replays,
            regions: vec![RegionCheckReport {
                region: 1,
                name: "bins<&>".into(),
                passed,
                tolerance: "f32: 4 ulps or rtol 1e-5".into(),
                count: 8,
                mismatches: s.differing,
                max_abs_error: Some(1e-3),
                max_rel_error: Some(1e-6),
                first_mismatch: None,
                detail: String::new(),
                outcome: s.outcome,
                nondeterministic,
                stretches: vec![s],
            }],
        }
    }

    #[test]
    fn a_nondeterministic_stretch_within_tolerance_shows_its_spread_type_and_histogram() {
        let spread = Spread { ulps: 5, abs: 2e-3, elements: 3 };
        let html = check_html(&report(CheckState::Within, true, stretch(Outcome::Within, Some(spread), None), 4));
        assert!(html.contains("PASS (within tolerance)") && html.contains("judged over 4 whole replays"), "{html}");
        assert!(html.contains(r#"data-check-region="1""#) && html.contains("bins&lt;&amp;&gt;"), "{html}");
        assert!(html.contains(r#"data-stretch="1:0""#) && html.contains("bytes 0..32 f32"), "{html}");
        assert!(html.contains("within tolerance") && html.contains("typed by the PTX that wrote it"), "{html}");
        assert!(html.contains("replays disagree on 3 elements by up to 5 ulps"), "{html}");
        assert!(html.contains("4 ulps or atol 0 + rtol"), "{html}");
        // Buckets 0..=3 shown: 0, 1, 2–3 and 4–7 ulps.
        assert!(html.contains("ulp-histogram") && html.contains("4–7 ulps") && html.contains("1 ulp"), "{html}");
    }

    #[test]
    fn a_spread_recorded_at_capture_is_shown_as_the_programs_own() {
        let mut s = stretch(Outcome::Within, None, None);
        s.recorded_spread = Some(Spread { ulps: 9, abs: 1e-2, elements: 2 });
        let html = check_html(&report(CheckState::Within, true, s, 1));
        assert!(
            html.contains("at capture: the program&#39;s repeated runs disagree on 2 elements by up to 9 ulps"),
            "{html}"
        );
        assert!(html.contains(r#"<span class="badge warn">nondeterministic</span>"#), "{html}");
    }

    #[test]
    fn a_differing_stretch_names_its_first_element_in_its_type() {
        let first = ElementDiff {
            index: 2,
            offset: 8,
            got: "65.5 (0x42830000)".into(),
            want: "64.5 (0x42810000)".into(),
            got_value: Some(65.5),
            want_value: Some(64.5),
        };
        let html = check_html(&report(CheckState::Failed, false, stretch(Outcome::Differ, None, Some(first)), 1));
        assert!(html.starts_with(r#"<div class="verdict fail" id="r-verdict">FAIL"#), "{html}");
        assert!(!html.contains("whole replays") && !html.contains("nondeterministic"), "{html}");
        assert!(html.contains("first at element 2 (byte 8): got 65.5 (0x42830000) want 64.5 (0x42810000)"), "{html}");
        assert!(html.contains(r#"<span class="badge fail">differ</span>"#), "{html}");
    }

    #[test]
    fn an_exact_region_is_one_row_and_an_empty_histogram_draws_nothing() {
        let mut s = stretch(Outcome::Exact, None, None);
        s.inexact = 0;
        s.ulp_histogram.clear();
        let html = check_html(&report(CheckState::Exact, true, s, 1));
        assert!(html.contains("PASS (exact)") && !html.contains("data-stretch"), "{html}");
        assert_eq!(ulp_histogram(&[0, 0]), "");
        let nothing = CheckReport { passed: false, state: CheckState::NothingToCheck, regions: vec![], replays: 1 };
        assert!(check_html(&nothing).contains("no expected state"));
    }
}
