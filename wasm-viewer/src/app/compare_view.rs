//! The comparison part of a session page: the verdict, the ops in the order they ran with an
//! agree/differ column, and, for the op where the two sides part, both sides' values and their
//! difference (a line for 1-D regions, a heatmap for 2-D), with `.npy` downloads of both sides.

use std::fmt::Write as _;

use shared::archive::Archive;
use shared::protocol::Parting;

use super::views::preview_plot;
use crate::model::esc;
use crate::plot;
use crate::session::CompareView;

/// Most op rows drawn; the rest are counted.
const MAX_ROWS: usize = 2000;

/// The section's HTML. `selected` is the op whose parting is shown (the first divergence when
/// none was picked); `download` is the session id once its kept regions can be fetched. Without
/// the archive (deleted from the host) ops are named by the partings' labels, else by number.
pub fn html(c: &CompareView, archive: Option<&Archive>, selected: Option<u32>, download: Option<&str>) -> String {
    let mut h = String::new();
    match &c.verdict {
        Some(v) if v.agree => {
            let _ = write!(
                h,
                r#"<div class="verdict pass" id="cmp-verdict">{}</div>"#,
                esc(&crate::model::agreement(&v.a, &v.b, v.ops, v.regions))
            );
        }
        Some(v) => {
            let control = v.control.as_ref().map_or(String::new(), |p| {
                let next = |o: Option<u32>| o.map_or("nothing".to_string(), |op| format!("op {op}"));
                format!(
                    "; control flow parts: {} ran {}, {} ran {}",
                    esc(&v.a),
                    next(p.a_next),
                    esc(&v.b),
                    next(p.b_next)
                )
            });
            let _ = write!(
                h,
                r#"<div class="verdict fail" id="cmp-verdict">DIFFER: {} and {} part at {} op(s) of {} compared{control}</div>"#,
                esc(&v.a),
                esc(&v.b),
                v.differing,
                v.ops
            );
        }
        None => h.push_str(r#"<div class="muted" id="cmp-verdict">Comparing op by op…</div>"#),
    }
    let first = c.first_divergence();
    if let Some(op) = first {
        let _ = write!(
            h,
            r#"<div class="toolbar"><button class="primary" data-replay="first-divergence" id="cmp-first">Jump to the first divergence (op {op})</button></div>"#
        );
    }
    let shown = selected.filter(|op| c.partings.iter().any(|p| p.op == *op)).or(first);
    h.push_str(r#"<div class="split cmp"><div class="table cmp-ops" style="flex:0 0 520px"><div class="row head"><span>#</span><span>op</span><span>passes</span><span>verdict</span></div><div class="tbody" id="cmp-ops">"#);
    for &op in c.order.iter().take(MAX_ROWS) {
        let (passes, differ) = c.ops[&op];
        let (class, badge) =
            if differ == 0 { ("agree", "agree".to_string()) } else { ("differ", format!("differ ×{differ}")) };
        let label = match archive {
            Some(a) if (op as usize) < a.op_count() => a.op_label(op),
            _ => c.partings.iter().find(|p| p.op == op).map_or_else(|| format!("op {op}"), |p| p.label.clone()),
        };
        let _ = write!(
            h,
            r#"<div class="row {class}{}" data-cmp-op="{op}" id="cmp-op-{op}"><span>{op}</span><span class="mono" title="{label}">{label}</span><span>{passes}</span><span><span class="badge {}">{badge}</span></span></div>"#,
            if shown == Some(op) { " sel" } else { "" },
            if differ == 0 { "pass" } else { "fail" },
            label = esc(&label),
        );
    }
    if c.order.len() > MAX_ROWS {
        let _ = write!(
            h,
            r#"<div class="row muted"><span></span><span>… {} more ops</span></div>"#,
            c.order.len() - MAX_ROWS
        );
    }
    h.push_str("</div></div>");
    match shown.and_then(|op| c.partings.iter().find(|p| p.op == op)) {
        Some(p) => h.push_str(&parting_html(p, download)),
        None if c.verdict.is_some() => h.push_str(r#"<div class="pane"><p class="muted">Every op agrees.</p></div>"#),
        None => h.push_str(r#"<div class="pane"><p class="muted">No op differs so far.</p></div>"#),
    }
    h.push_str("</div>");
    h
}

fn parting_html(p: &Parting, download: Option<&str>) -> String {
    let mut h = format!(
        r#"<div class="pane" id="cmp-parting" data-parting-op="{}"><h4>op {} <span class="mono">{}</span>, pass {}: region <span class="mono">{}</span> differs</h4><p>{}</p>"#,
        p.op,
        p.op,
        esc(&p.label),
        p.pass,
        esc(&p.name),
        // The first mismatch follows with the sides' names.
        esc(p.check.detail.split("; first at").next().unwrap_or_default())
    );
    if let Some(m) = &p.check.first_mismatch {
        let v = |x: Option<f64>| x.map(plot::num).unwrap_or_else(|| "NaN".into());
        let _ = write!(
            h,
            r#"<p class="mono" id="cmp-first-mismatch">first at element {}: A {} · B {}</p>"#,
            m.index,
            v(m.want),
            v(m.got)
        );
    }
    if !p.histogram.is_empty() {
        let buckets: Vec<String> = p.histogram.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        let _ = write!(h, r#"<p class="stats mono">|A − B| over differing elements: {}</p>"#, esc(&buckets.join(", ")));
    }
    for (side, label, preview) in [("a", "A", &p.a), ("b", "B", &p.b), ("d", "A − B", &p.difference)] {
        let _ = write!(h, "<h5>{label}</h5>");
        match preview {
            Some(preview) => h.push_str(&preview_plot(&format!("hm-cmp-{side}-{}", p.op), preview, label)),
            None => h.push_str(r#"<p class="muted">empty</p>"#),
        }
    }
    if let Some(session) = download {
        let _ = write!(
            h,
            r#"<p class="downloads">download <a class="npy" data-npy-side="a" download href="{}">A as .npy</a> · <a class="npy" data-npy-side="b" download href="{}">B as .npy</a></p>"#,
            esc(&super::api::url(&format!("/api/sessions/{session}/regions/{}?side=a", p.region))),
            esc(&super::api::url(&format!("/api/sessions/{session}/regions/{}?side=b", p.region)))
        );
    }
    h.push_str("</div>");
    h
}
