//! Plots as plain data: SVG text for line charts, RGBA pixels for heatmaps. Pure Rust so that
//! the replay charts, the region previews and the tests all share one implementation.

use std::fmt::Write as _;

use shared::archive::DType;
use shared::protocol::RegionPreview;

use crate::model::{element_f64, series, Series};

/// Formats an axis value compactly (`1.2e6`, `0.0031`, `42`).
pub fn num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        format!("{v:.2e}")
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}").trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A duration given in milliseconds, in the unit that reads best: `1.5 s`, `28.952 ms`, `701 µs`,
/// and below a microsecond `0.70 µs` (two decimals: a finer digit would be below any clock's
/// resolution here).
pub fn duration(ms: f64) -> String {
    let a = ms.abs();
    if !ms.is_finite() {
        "–".into()
    } else if a == 0.0 {
        "0 ms".into()
    } else if a >= 1000.0 {
        format!("{} s", num(ms / 1000.0))
    } else if a >= 1.0 {
        format!("{} ms", num(ms))
    } else if a >= 1e-3 {
        format!("{} µs", num(ms * 1000.0))
    } else {
        format!("{:.2} µs", ms * 1000.0)
    }
}

/// What the time-per-iteration chart's line summarises, in one line: median, min and max of the
/// iterations after the warm-up, and the warm-up's own time apart (the warm-up compiles code and
/// instantiates graphs: it would make "max" a compile time, not a replay time).
pub fn iterations_summary(times: &[f64]) -> String {
    let (warm, rest) = match times.split_first() {
        Some((w, r)) if !r.is_empty() => (Some(*w), r),
        _ => (None, times),
    };
    let mut f: Vec<f64> = rest.iter().copied().filter(|x| x.is_finite()).collect();
    f.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let mut s = if f.is_empty() {
        "no iteration after the warm-up yet".to_string()
    } else {
        format!(
            "median {} · min {} · max {} · {}",
            duration(f[f.len() / 2]),
            duration(f[0]),
            duration(f[f.len() - 1]),
            crate::model::count(f.len() as u64, "iteration", "iterations")
        )
    };
    if let Some(w) = warm.filter(|w| w.is_finite()) {
        let _ = write!(s, " · warm-up (iteration 1) {}, not included", duration(w));
    }
    s
}

/// A min/max band plot of a series (spikes survive any zoom-out), `w`×`h` pixels.
pub fn series_svg(s: &Series, w: u32, h: u32, class: &str) -> String {
    let (pl, pr, pt, pb) = (48.0, 8.0, 8.0, 18.0);
    let (iw, ih) = (w as f64 - pl - pr, h as f64 - pt - pb);
    let mut svg = format!(r#"<svg class="plot {class}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">"#);
    if s.elements == 0 || !s.min.is_finite() {
        let _ = write!(svg, r#"<text x="{}" y="{}" class="axis">no finite values</text></svg>"#, pl, h / 2);
        return svg;
    }
    let (lo, hi) = if s.max > s.min { (s.min, s.max) } else { (s.min - 1.0, s.max + 1.0) };
    let y = |v: f64| pt + ih - (v - lo) / (hi - lo) * ih;
    let n = s.lo.len();
    let x = |i: usize| pl + if n > 1 { i as f64 / (n - 1) as f64 * iw } else { iw / 2.0 };
    let _ = write!(
        svg,
        r#"<line class="grid" x1="{pl}" x2="{}" y1="{}" y2="{}"/><line class="grid" x1="{pl}" x2="{}" y1="{pt}" y2="{pt}"/>"#,
        pl + iw,
        pt + ih,
        pt + ih,
        pl + iw
    );
    let _ = write!(svg, r#"<text class="axis" x="{}" y="{}" text-anchor="end">{}</text>"#, pl - 4.0, pt + 8.0, num(hi));
    let _ = write!(svg, r#"<text class="axis" x="{}" y="{}" text-anchor="end">{}</text>"#, pl - 4.0, pt + ih, num(lo));
    let _ = write!(svg, r#"<text class="axis" x="{pl}" y="{}">0</text>"#, h as f64 - 4.0);
    let _ = write!(
        svg,
        r#"<text class="axis" x="{}" y="{}" text-anchor="end">{}</text>"#,
        pl + iw,
        h as f64 - 4.0,
        s.elements
    );
    // Upper edge left to right, lower edge back: one closed band.
    let mut d = String::new();
    let mut first = true;
    for i in 0..n {
        if s.hi[i].is_finite() {
            let _ = write!(d, "{}{:.1},{:.1}", if first { "M" } else { "L" }, x(i), y(s.hi[i]));
            first = false;
        }
    }
    for i in (0..n).rev() {
        if s.lo[i].is_finite() {
            let _ = write!(d, "L{:.1},{:.1}", x(i), y(s.lo[i]));
        }
    }
    if !d.is_empty() {
        let _ = write!(svg, r#"<path class="band" d="{d}Z"/>"#);
    }
    let tips: Vec<String> = (0..n)
        .map(|i| {
            let (a, b) = bucket_range(i, n, s.elements);
            let what = if b - a <= 1 { format!("element {a}") } else { format!("elements {a}–{}", b - 1) };
            match (s.lo[i].is_finite(), s.hi[i].is_finite()) {
                (true, _) if s.lo[i] == s.hi[i] => format!("{what}: {}", num(s.lo[i])),
                (true, true) => format!("{what}: min {}, max {}", num(s.lo[i]), num(s.hi[i])),
                _ => format!("{what}: no finite value"),
            }
        })
        .collect();
    svg.push_str(&hover_layer(pl, pt, iw, ih, &tips));
    svg.push_str("</svg>");
    svg
}

/// An invisible layer over a plot's area `(x, y, w, h)` whose `n` equal columns carry the tooltip
/// texts `tips` (the page shows the one under the pointer, with a cursor line).
fn hover_layer(x: f64, y: f64, w: f64, h: f64, tips: &[String]) -> String {
    let joined: Vec<String> = tips.iter().map(|t| crate::model::esc(&t.replace('|', "/"))).collect();
    format!(
        r#"<line class="hover-x" x1="{x:.1}" x2="{x:.1}" y1="{y:.1}" y2="{:.1}" visibility="hidden"/><rect class="hover" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}" data-tips="{}"/>"#,
        y + h,
        joined.join("|")
    )
}

/// The warm-up iteration's mark in its own column at `left`: a dot at its value on the chart's
/// scale (top `hi`), or, where it is above that scale, a triangle on the top edge with a break and
/// "off scale" beside its value.
#[allow(clippy::too_many_arguments)]
fn warm_up_mark(v: f64, left: f64, pt: f64, ih: f64, hi: f64, h: f64, sep: f64, y: &dyn Fn(f64) -> f64) -> String {
    let cx = left + 14.0;
    let mut g = format!(r#"<g class="warm-up" data-ms="{v}">"#);
    if !v.is_finite() {
        let _ = write!(g, r#"<text class="axis val" x="{:.1}" y="{:.1}">no time</text>"#, left, pt + 12.0);
    } else if v > hi {
        let _ = write!(
            g,
            r#"<path class="mark off-scale" d="M{:.1},{:.1}L{:.1},{:.1}L{:.1},{:.1}Z"/><path class="break" d="M{:.1},{:.1}l4,-3l4,3l4,-3"/><text class="axis val" x="{:.1}" y="{:.1}">{}</text><text class="axis val" x="{:.1}" y="{:.1}">off scale</text>"#,
            cx - 5.0,
            pt + 8.0,
            cx,
            pt,
            cx + 5.0,
            pt + 8.0,
            cx - 6.0,
            pt + 16.0,
            cx + 8.0,
            pt + 8.0,
            duration(v),
            cx + 8.0,
            pt + 20.0,
        );
    } else {
        let _ = write!(
            g,
            r#"<circle class="mark" cx="{cx:.1}" cy="{:.1}" r="3.5"/><text class="axis val" x="{:.1}" y="{:.1}">{}</text>"#,
            y(v),
            cx + 8.0,
            (y(v) + 4.0).max(pt + 10.0),
            duration(v)
        );
    }
    let _ = write!(
        g,
        r#"<text class="axis" x="{left:.1}" y="{:.1}">warm-up</text><title>iteration 1, the warm-up (code compiled, graph instantiated): {}{}; left out of the scale and of the summary</title></g><line class="grid sep" x1="{sep:.1}" x2="{sep:.1}" y1="{pt}" y2="{:.1}"/>"#,
        h - 6.0,
        duration(v),
        if v > hi { ", above this chart's scale" } else { "" },
        pt + ih
    );
    g
}

/// Time per iteration, `times[i]` being iteration `i + 1`: the first iteration, the warm-up (code
/// compiled, the graph instantiated), drawn apart as its own mark and left out of the scale, so
/// that it does not flatten the others, which are drawn as a line over their real iteration numbers (averaged into at most 600 points,
/// with the min..max of each as a band). Every point tells its value under the pointer.
pub fn iterations_svg(times: &[f64], w: u32, h: u32) -> String {
    let (pl, pr, pt, pb) = (64.0, 8.0, 8.0, 20.0);
    // The warm-up's column comes first, then the scale's labels beside the line they belong to.
    let first_w = if times.len() > 1 { 84.0 } else { 0.0 };
    let (x0, iw, ih) = (first_w + pl, w as f64 - pl - pr - first_w, h as f64 - pt - pb);
    let mut svg =
        format!(r#"<svg class="plot lines iterations" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">"#);
    let finite = |v: &f64| v.is_finite();
    if !times.iter().any(finite) {
        let _ = write!(svg, r#"<text class="axis" x="{pl}" y="{}">waiting for data</text></svg>"#, h / 2);
        return svg;
    }
    // The first iteration is the warm-up (code compiled, graph instantiated): it stands apart, left
    // of a separator, and is left out of the scale so that it cannot flatten the others' line. Its
    // mark is drawn on that same scale where it fits; above it, the mark sits on the top edge with a
    // break and says "off scale", so no height ever reads as a value it is not.
    let (rest, first_no) = if times.len() > 1 { (&times[1..], 2usize) } else { (times, 1usize) };
    let n = rest.len().min(600);
    let buckets: Vec<(usize, usize, f64, f64, f64)> = (0..n)
        .map(|b| {
            let (a, e) = bucket_range(b, n, rest.len());
            let vals: Vec<f64> = rest[a..e].iter().copied().filter(|v| v.is_finite()).collect();
            let mean = if vals.is_empty() { f64::NAN } else { vals.iter().sum::<f64>() / vals.len() as f64 };
            let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (a + first_no, e - 1 + first_no, mean, lo, hi)
        })
        .collect();
    let lo = buckets.iter().map(|b| b.3).fold(f64::INFINITY, f64::min).min(0.0);
    let mut hi = buckets.iter().map(|b| b.4).fold(f64::NEG_INFINITY, f64::max);
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        hi = lo + 1.0;
    }
    let y = |v: f64| pt + ih - (v - lo) / (hi - lo) * ih;
    if times.len() > 1 {
        svg.push_str(&warm_up_mark(times[0], 4.0, pt, ih, hi, h as f64, first_w - 2.0, &y));
    }
    let last_no = first_no + rest.len() - 1;
    let span = (last_no - first_no).max(1) as f64;
    let x = |it: f64| x0 + if last_no > first_no { (it - first_no as f64) / span * iw } else { iw / 2.0 };
    let _ =
        write!(svg, r#"<line class="grid" x1="{x0}" x2="{:.1}" y1="{:.1}" y2="{:.1}"/>"#, x0 + iw, pt + ih, pt + ih);
    let _ = write!(svg, r#"<line class="grid" x1="{x0}" x2="{:.1}" y1="{pt}" y2="{pt}"/>"#, x0 + iw);
    let _ = write!(
        svg,
        r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
        x0 - 4.0,
        pt + 8.0,
        duration(hi)
    );
    let _ = write!(
        svg,
        r#"<text class="axis" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
        x0 - 4.0,
        pt + ih,
        num(lo)
    );
    // The x axis in real iteration numbers, at round steps.
    let step = (crate::timeline::tick_step(span, (iw / 70.0).max(1.0)).round() as usize).max(1);
    let mut tick = first_no.div_ceil(step) * step;
    let mut ticks = vec![first_no];
    while tick <= last_no {
        if tick > first_no && (x(tick as f64) - x(*ticks.last().unwrap_or(&first_no) as f64)) > 28.0 {
            ticks.push(tick);
        }
        tick += step;
    }
    // The last iteration's own number ends the axis (in place of a round tick too close to it).
    let end = *ticks.last().unwrap_or(&first_no);
    if end != last_no {
        if x(last_no as f64) - x(end as f64) <= 28.0 && ticks.len() > 1 {
            ticks.pop();
        }
        ticks.push(last_no);
    }
    for t in ticks {
        let _ = write!(
            svg,
            r#"<text class="axis xtick" x="{:.1}" y="{:.1}" text-anchor="middle">{t}</text>"#,
            x(t as f64),
            h as f64 - 6.0
        );
    }
    let mid = |b: &(usize, usize, f64, f64, f64)| (b.0 + b.1) as f64 / 2.0;
    let mut band = String::new();
    for b in buckets.iter().filter(|b| b.4.is_finite()) {
        let _ = write!(band, "{}{:.1},{:.1}", if band.is_empty() { "M" } else { "L" }, x(mid(b)), y(b.4));
    }
    for b in buckets.iter().rev().filter(|b| b.3.is_finite()) {
        let _ = write!(band, "L{:.1},{:.1}", x(mid(b)), y(b.3));
    }
    if buckets.iter().any(|b| b.1 > b.0) && !band.is_empty() {
        let _ = write!(svg, r#"<path class="band" d="{band}Z"/>"#);
    }
    let mut d = String::new();
    for b in buckets.iter().filter(|b| b.2.is_finite()) {
        let _ = write!(d, "{}{:.1},{:.1}", if d.is_empty() { "M" } else { "L" }, x(mid(b)), y(b.2));
    }
    let _ = write!(svg, r#"<path class="line c0" d="{d}"><title>time per iteration</title></path>"#);
    if buckets.len() == 1 {
        let b = &buckets[0];
        let _ = write!(svg, r#"<circle class="dot c0" cx="{:.1}" cy="{:.1}" r="3"/>"#, x(mid(b)), y(b.2));
    }
    let tips: Vec<String> = buckets
        .iter()
        .map(|&(a, e, mean, lo, hi)| {
            if a == e {
                format!("iteration {a}: {}", duration(mean))
            } else {
                format!("iterations {a}–{e}: mean {} (min {}, max {})", duration(mean), duration(lo), duration(hi))
            }
        })
        .collect();
    svg.push_str(&hover_layer(x0, pt, iw, ih, &tips));
    svg.push_str("</svg>");
    svg
}

/// Line chart of one or more named series over a shared x (iterations), for replay timings.
pub fn lines_svg(series: &[(&str, &[f64])], w: u32, h: u32, unit: &str) -> String {
    let (pl, pr, pt, pb) = (72.0, 8.0, 8.0, 18.0);
    let (iw, ih) = (w as f64 - pl - pr, h as f64 - pt - pb);
    let mut svg = format!(r#"<svg class="plot lines" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">"#);
    let all = series.iter().flat_map(|(_, v)| v.iter().copied()).filter(|v| v.is_finite());
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in all {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let n = series.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    if n == 0 || !lo.is_finite() {
        let _ = write!(svg, r#"<text class="axis" x="{pl}" y="{}">waiting for data</text></svg>"#, h / 2);
        return svg;
    }
    lo = lo.min(0.0);
    if hi <= lo {
        hi = lo + 1.0;
    }
    let y = |v: f64| pt + ih - (v - lo) / (hi - lo) * ih;
    let x = |i: usize| pl + if n > 1 { i as f64 / (n - 1) as f64 * iw } else { iw / 2.0 };
    let _ = write!(svg, r#"<line class="grid" x1="{pl}" x2="{}" y1="{}" y2="{}"/>"#, pl + iw, pt + ih, pt + ih);
    let _ = write!(svg, r#"<line class="grid" x1="{pl}" x2="{}" y1="{pt}" y2="{pt}"/>"#, pl + iw);
    let _ = write!(
        svg,
        r#"<text class="axis" x="{}" y="{}" text-anchor="end">{} {unit}</text>"#,
        pl - 4.0,
        pt + 8.0,
        num(hi)
    );
    let _ = write!(svg, r#"<text class="axis" x="{}" y="{}" text-anchor="end">{}</text>"#, pl - 4.0, pt + ih, num(lo));
    // Iterations are counted from 1 on the axis, as people count them.
    let _ = write!(svg, r#"<text class="axis" x="{pl}" y="{}">1</text>"#, h as f64 - 4.0);
    let _ = write!(svg, r#"<text class="axis" x="{}" y="{}" text-anchor="end">{n}</text>"#, pl + iw, h as f64 - 4.0);
    for (k, (name, vals)) in series.iter().enumerate() {
        let mut d = String::new();
        for (i, v) in vals.iter().enumerate() {
            if v.is_finite() {
                let _ = write!(d, "{}{:.1},{:.1}", if d.is_empty() { "M" } else { "L" }, x(i), y(*v));
            }
        }
        let _ =
            write!(svg, r#"<path class="line c{}" d="{d}"><title>{}</title></path>"#, k % 6, crate::model::esc(name));
        if vals.len() == 1 {
            let _ = write!(svg, r#"<circle class="dot c{}" cx="{:.1}" cy="{:.1}" r="3"/>"#, k % 6, x(0), y(vals[0]));
        }
    }
    svg.push_str("</svg>");
    svg
}

/// Horizontal bars (per-op timings): `(label, value)`, longest first is the caller's choice.
pub fn bars_svg(bars: &[(String, f64)], w: u32, unit: &str) -> String {
    let row = 16.0;
    let h = (bars.len() as f64 * row + 4.0).max(20.0);
    let label_w = 180.0;
    let max = bars.iter().map(|b| b.1).fold(0.0f64, f64::max).max(f64::MIN_POSITIVE);
    let mut svg = format!(r#"<svg class="plot bars" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">"#);
    for (i, (label, v)) in bars.iter().enumerate() {
        let y = i as f64 * row + 2.0;
        let bw = (v / max) * (w as f64 - label_w - 70.0);
        let _ = write!(
            svg,
            r#"<text class="axis" x="{}" y="{}" text-anchor="end">{}</text><rect class="bar" x="{label_w}" y="{y}" width="{bw:.1}" height="{}"/><text class="axis" x="{}" y="{}">{} {unit}</text>"#,
            label_w - 4.0,
            y + 11.0,
            crate::model::esc(label),
            row - 4.0,
            label_w + bw + 4.0,
            y + 11.0,
            num(*v)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A perceptually ordered colour ramp (dark blue → teal → yellow), like viridis.
fn ramp(t: f64) -> [u8; 3] {
    const STOPS: [[f64; 3]; 5] =
        [[68.0, 1.0, 84.0], [59.0, 82.0, 139.0], [33.0, 145.0, 140.0], [94.0, 201.0, 98.0], [253.0, 231.0, 37.0]];
    let t = t.clamp(0.0, 1.0) * 4.0;
    let i = (t as usize).min(3);
    let f = t - i as f64;
    let c = |k: usize| (STOPS[i][k] + (STOPS[i + 1][k] - STOPS[i][k]) * f) as u8;
    [c(0), c(1), c(2)]
}

/// A heatmap image of a `rows`×`cols` grid, downsampled (by averaging) to at most `max_side`
/// pixels per side. Returns `(width, height, rgba, min, max)`.
pub fn heatmap(bytes: &[u8], dtype: DType, rows: usize, cols: usize, max_side: usize) -> (u32, u32, Vec<u8>, f64, f64) {
    let (w, h, cells) = heatmap_cells(bytes, dtype, rows, cols, max_side);
    grid_rgba(&cells, w, h)
}

/// The cells of a heatmap of a `rows`×`cols` grid at most `max_side` cells per side: each the mean
/// of the finite elements it covers (`None` when it covers none). Returns `(w, h, cells)`.
pub fn heatmap_cells(
    bytes: &[u8],
    dtype: DType,
    rows: usize,
    cols: usize,
    max_side: usize,
) -> (usize, usize, Vec<Option<f64>>) {
    let n = (bytes.len() / dtype.size()).min(rows * cols);
    let w = cols.min(max_side).max(1);
    let h = rows.min(max_side).max(1);
    let mut sum = vec![0.0f64; w * h];
    let mut cnt = vec![0u32; w * h];
    for i in 0..n {
        let v = element_f64(bytes, dtype, i);
        if !v.is_finite() {
            continue;
        }
        let (r, c) = (i / cols, i % cols);
        let p = (r * h / rows) * w + c * w / cols;
        sum[p] += v;
        cnt[p] += 1;
    }
    let cells = (0..w * h).map(|p| (cnt[p] > 0).then(|| sum[p] / cnt[p] as f64)).collect();
    (w, h, cells)
}

/// What a heatmap of a `rows`×`cols` source drawn as `h`×`w` cells shows, with the range its
/// colours span (`lo`..`hi`, the cells' values): one cell per element, or blocks averaged, which
/// the caption says, as their range is the means' and not the elements' own min and max.
pub fn heatmap_caption(rows: u64, cols: u64, w: usize, h: usize, lo: f64, hi: f64) -> String {
    let range = if lo.is_finite() { format!("{} to {}", num(lo), num(hi)) } else { "none finite".into() };
    if rows as usize <= h && cols as usize <= w {
        format!("one cell per element; colours span {range}")
    } else {
        let (br, bc) = (rows.div_ceil(h.max(1) as u64), cols.div_ceil(w.max(1) as u64));
        format!("{h}×{w} cells, each the mean of a block of up to {br}×{bc} elements; colours span the block means, {range}")
    }
}

/// The source rows (or columns) `[start, end)` that cell `b` of `n` covers over `len`: the rule of
/// the host's previews and of [`heatmap_cells`] (as near as integer steps allow).
pub fn bucket_range(b: usize, n: usize, len: usize) -> (usize, usize) {
    let n = n.max(1);
    (b * len / n, ((b + 1) * len / n).max(b * len / n + 1).min(len.max(1)))
}

/// The colour ramp as a CSS gradient, low values on the left: the legend under a heatmap.
pub fn ramp_css() -> String {
    let stops: Vec<String> = (0..=8)
        .map(|i| {
            let t = i as f64 / 8.0;
            let [r, g, b] = ramp(t);
            format!("rgb({r},{g},{b}) {:.1}%", t * 100.0)
        })
        .collect();
    format!("linear-gradient(to right, {})", stops.join(", "))
}

/// Colours a row-major grid of cells (`None`: no finite value, drawn magenta) on the ramp from
/// its smallest to its largest value: `(w, h, rgba, lo, hi)`.
pub fn grid_rgba(cells: &[Option<f64>], w: usize, h: usize) -> (u32, u32, Vec<u8>, f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in cells.iter().flatten() {
        lo = lo.min(*v);
        hi = hi.max(*v);
    }
    let span = if hi > lo { hi - lo } else { 1.0 };
    let mut rgba = vec![0u8; w * h * 4];
    for (p, px) in rgba.chunks_exact_mut(4).enumerate() {
        let [r, g, b] = match cells.get(p).copied().flatten() {
            Some(v) => ramp((v - lo) / span),
            None => [255, 0, 255],
        };
        px.copy_from_slice(&[r, g, b, 255]);
    }
    (w as u32, h as u32, rgba, lo, hi)
}

/// The min/max band of a host's 1-D region preview, as a [`Series`] for [`series_svg`].
pub fn preview_series(p: &RegionPreview) -> Series {
    let finite = |v: &Option<f64>| v.filter(|x| x.is_finite()).unwrap_or(f64::NAN);
    let lo: Vec<f64> = p.min.iter().map(finite).collect();
    let hi: Vec<f64> = p.max.iter().map(finite).collect();
    Series {
        elements: (p.source_shape[0] * p.source_shape[1]) as usize,
        min: lo.iter().copied().filter(|v| v.is_finite()).fold(f64::INFINITY, f64::min),
        max: hi.iter().copied().filter(|v| v.is_finite()).fold(f64::NEG_INFINITY, f64::max),
        non_finite: 0,
        lo,
        hi,
    }
}

/// The heatmap of a host's 2-D region preview (bucket means): `(w, h, rgba, lo, hi)`.
pub fn preview_heatmap(p: &RegionPreview) -> (u32, u32, Vec<u8>, f64, f64) {
    grid_rgba(&p.mean, p.cols as usize, p.rows as usize)
}

/// A series straight from region bytes.
pub fn region_series(bytes: &[u8], dtype: DType) -> Series {
    series(bytes, dtype, 600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heatmap_orders_colours_by_value() {
        let vals: Vec<u8> = (0..16).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let (w, h, px, lo, hi) = heatmap(&vals, DType::F32, 4, 4, 512);
        assert_eq!((w, h, lo, hi), (4, 4, 0.0, 15.0));
        assert!(ramp_css().starts_with("linear-gradient(to right, rgb(68,1,84) 0.0%"));
        // A 5-row grid in 2 cells: rows 0..2 and 2..5.
        assert_eq!((bucket_range(0, 2, 5), bucket_range(1, 2, 5)), ((0, 2), (2, 5)));
        assert_eq!(bucket_range(3, 4, 4), (3, 4));
        assert_eq!(&px[0..3], &[68, 1, 84]);
        assert_eq!(&px[15 * 4..15 * 4 + 3], &[253, 231, 37]);
    }

    #[test]
    fn svg_plots_have_paths() {
        let vals: Vec<u8> = (0..100).flat_map(|i| ((i as f32).sin()).to_le_bytes()).collect();
        let svg = series_svg(&region_series(&vals, DType::F32), 400, 120, "x");
        assert!(svg.contains("<path class=\"band\" d=\"M"));
        let svg = lines_svg(&[("iter", &[1.0, 2.0, 3.0])], 400, 120, "ms");
        assert!(svg.contains("class=\"line c0\" d=\"M"));
        assert_eq!(num(1234567.0), "1.23e6");
        assert_eq!(num(0.25), "0.25");
    }

    #[test]
    fn the_first_iteration_is_drawn_apart_and_the_axis_counts_real_iterations() {
        let mut times = vec![500.0];
        times.extend((0..2000).map(|i| 2.0 + (i % 7) as f64 * 0.1));
        let svg = iterations_svg(&times, 600, 160);
        assert!(svg.contains(r#"<g class="warm-up" data-ms="500">"#), "{svg}");
        // The line's scale is the other iterations' own: 500 ms is not its top.
        assert!(svg.contains(">2.6 ms</text>"), "{svg}");
        assert!(svg.contains(r#"class="axis xtick" x="148.0" y="154.0" text-anchor="middle">2</text>"#), "{svg}");
        assert!(svg.contains(">2001</text>"), "the last iteration's number: {svg}");
        let tips = svg.split("data-tips=\"").nth(1).unwrap().split('"').next().unwrap();
        assert_eq!(tips.split('|').count(), 600);
        assert!(tips.starts_with("iterations 2–4: mean "), "{tips}");
        // Few iterations: one point each, named by number.
        let svg = iterations_svg(&[9.0, 1.0, 2.0], 600, 160);
        assert!(svg.contains("data-tips=\"iteration 2: 1 ms|iteration 3: 2 ms\""), "{svg}");
        let svg = iterations_svg(&[4.0], 600, 160);
        assert!(!svg.contains("warm-up") && svg.contains("iteration 1: 4 ms"), "{svg}");
    }

    #[test]
    fn a_warm_up_above_the_scale_is_marked_off_scale_and_kept_out_of_the_summary() {
        // dag-8-chains on the CPU: a 29 ms first iteration (code compiled), then about 0.2 ms each.
        let mut times = vec![28.952];
        times.extend((0..19).map(|i| [0.2, 0.215, 0.227][i % 3]));
        let svg = iterations_svg(&times, 520, 160);
        let warm = svg.split(r#"<g class="warm-up""#).nth(1).unwrap().split("</g>").next().unwrap();
        // No bar whose height would read on the 0.227 ms scale: a mark on the top edge, off scale.
        assert!(!warm.contains("<rect"), "{warm}");
        assert!(warm.contains("off scale") && warm.contains("28.952 ms") && warm.contains(">warm-up<"), "{warm}");
        assert!(svg.contains(">227 µs</text>"), "the scale is the other iterations' own: {svg}");
        let summary = iterations_summary(&times);
        assert_eq!(
            summary,
            "median 215 µs · min 200 µs · max 227 µs · 19 iterations · warm-up (iteration 1) 28.952 ms, not included"
        );
        // A warm-up inside the others' range is a dot at its value on their scale.
        let svg = iterations_svg(&[1.5, 1.0, 2.0, 1.8], 520, 160);
        let warm = svg.split(r#"<g class="warm-up""#).nth(1).unwrap().split("</g>").next().unwrap();
        assert!(warm.contains("<circle") && !warm.contains("off scale"), "{warm}");
        assert_eq!(iterations_summary(&[3.0]), "median 3 ms · min 3 ms · max 3 ms · 1 iteration");
    }

    #[test]
    fn durations_read_in_human_units() {
        assert_eq!(duration(7.01e-4), "0.70 µs");
        assert_eq!(duration(0.701), "701 µs");
        assert_eq!(duration(28.952), "28.952 ms");
        assert_eq!(duration(1500.0), "1.5 s");
        assert_eq!(duration(0.0), "0 ms");
    }

    #[test]
    fn host_previews_draw_as_a_band_and_a_heatmap() {
        // 1-D: 5000 elements with one spike; the band's top is the spike, not a bucket mean.
        let mut line: Vec<f32> = (0..5000).map(|i| (i as f32 * 0.01).sin()).collect();
        line[1234] = 100.0;
        let bytes: Vec<u8> = line.iter().flat_map(|v| v.to_le_bytes()).collect();
        let p = RegionPreview::of(&bytes, DType::F32, &[5000]).unwrap();
        let s = preview_series(&p);
        assert_eq!((s.elements, s.max, s.lo.len()), (5000, 100.0, p.cols as usize));
        assert!(series_svg(&s, 560, 140, "region").contains(">100</text>"));
        // 2-D: a ramp along the columns gives dark on the left, bright on the right.
        let grid: Vec<u8> = (0..200 * 300).flat_map(|i| ((i % 300) as f32).to_le_bytes()).collect();
        let p = RegionPreview::of(&grid, DType::F32, &[200, 300]).unwrap();
        let (w, h, px, lo, hi) = preview_heatmap(&p);
        assert_eq!((w, h), (p.cols, p.rows));
        assert!(lo < 5.0 && hi > 295.0, "{lo}..{hi}");
        assert_eq!(&px[0..3], &[68, 1, 84]);
        let last = (w as usize - 1) * 4;
        assert_eq!(&px[last..last + 3], &[253, 231, 37]);
    }

    #[test]
    fn an_averaged_heatmap_says_so_with_the_means_range() {
        assert_eq!(
            heatmap_caption(256, 256, 64, 64, -0.5, 2.0),
            "64×64 cells, each the mean of a block of up to 4×4 elements; colours span the block means, -0.5 to 2"
        );
        assert_eq!(heatmap_caption(8, 16, 16, 8, 0.0, 1.0), "one cell per element; colours span 0 to 1");
    }
}
