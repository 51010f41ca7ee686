//! `recap diff A B [--json]`: what differs between two archives, in structure (modules by PTX hash,
//! kernels, regions, bindings, metadata, ops with their launch shapes and parameters) and in data
//! (every region both have: initial and expected contents, under A's tolerance for the region).
//!
//! Structure is compared as the records `recap inspect --json` prints, matched by name (modules,
//! kernels, regions, bindings, metadata), by position (pointers inside regions), or, for ops, by an
//! alignment of the two op lists, so that an op added in one archive shows as that alone; the two
//! commands can never disagree about what an archive holds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use recap::mapped::MappedFile;
use serde_json::{json, Value};
use shared::archive::{Archive, Blob, Tolerance};
use shared::check::{check_region, Outcome, RegionInput};

use super::inspect::records;

/// Compare two archives' structure and data
#[derive(clap::Args)]
pub struct Args {
    pub a: PathBuf,
    pub b: PathBuf,
    /// One JSON object per difference (and a last one with the counts) instead of text
    #[arg(long)]
    pub json: bool,
    /// Differences shown per kind in the text report (all of them with --json)
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

/// One difference.
struct Difference {
    /// `module`, `kernel`, `region`, `binding`, `meta`, `op`, `region_pointer`, `header`, `data`.
    kind: &'static str,
    /// What it is about: a name, an op index.
    key: String,
    text: String,
    detail: Value,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let open =
        |p: &PathBuf| -> Result<MappedFile> { MappedFile::open(p).with_context(|| format!("opening {}", p.display())) };
    let (ma, mb) = (open(&args.a)?, open(&args.b)?);
    let a = Archive::open(&ma).with_context(|| format!("reading {}", args.a.display()))?;
    let b = Archive::open(&mb).with_context(|| format!("reading {}", args.b.display()))?;
    a.verify_blobs().with_context(|| format!("{}", args.a.display()))?;
    b.verify_blobs().with_context(|| format!("{}", args.b.display()))?;

    let (ra, rb) = (records(&a), records(&b));
    let is_op = |r: &&Value| r["type"] == "op";
    let (ops_a, rest_a): (Vec<&Value>, Vec<&Value>) = ra.iter().partition(is_op);
    let (ops_b, rest_b): (Vec<&Value>, Vec<&Value>) = rb.iter().partition(is_op);
    let mut diffs = ops(&ops_a, &ops_b);
    diffs.extend(structure(&rest_a, &rest_b));
    diffs.extend(data(&a, &b)?);
    if args.json {
        for d in &diffs {
            println!("{}", json!({"kind": d.kind, "key": d.key, "text": d.text, "detail": d.detail}));
        }
        println!("{}", json!({"kind": "summary", "differences": diffs.len(), "identical": diffs.is_empty()}));
    } else {
        let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
        for d in &diffs {
            let n = shown.entry(d.kind).or_default();
            *n += 1;
            if *n <= args.limit {
                println!("{} {}: {}", d.kind, d.key, d.text);
            }
        }
        for (kind, n) in shown.iter().filter(|(_, &n)| n > args.limit) {
            println!("... and {} more {kind} difference(s)", n - args.limit);
        }
        if diffs.is_empty() {
            println!("{} and {} hold the same work and the same data", args.a.display(), args.b.display());
        } else {
            println!("{} difference(s)", diffs.len());
        }
    }
    Ok(if diffs.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The key a record is matched by.
fn key_of(rec: &Value) -> (String, String) {
    let t = rec["type"].as_str().unwrap_or_default().to_string();
    let k = match t.as_str() {
        "module" | "kernel" | "region" | "binding" => rec["name"].to_string(),
        "meta" => rec["key"].to_string(),
        "region_pointer" => format!("{}+{}", rec["region"], rec["offset"]),
        _ => "archive".to_string(),
    };
    (t, k.trim_matches('"').to_string())
}

/// Everything but the ops, matched by [`key_of`].
fn structure(a: &[&Value], b: &[&Value]) -> Vec<Difference> {
    let index = |recs: &[&Value]| -> BTreeMap<(String, String), Value> {
        recs.iter().map(|r| (key_of(r), (*r).clone())).collect()
    };
    let (ia, ib) = (index(a), index(b));
    let kind = |t: &str| -> &'static str {
        match t {
            "module" => "module",
            "kernel" => "kernel",
            "region" => "region",
            "binding" => "binding",
            "meta" => "meta",
            "region_pointer" => "region_pointer",
            _ => "header",
        }
    };
    let mut out = Vec::new();
    for ((t, k), ra) in &ia {
        match ib.get(&(t.clone(), k.clone())) {
            None => out.push(Difference {
                kind: kind(t),
                key: k.clone(),
                text: "only in A".into(),
                detail: json!({"a": ra}),
            }),
            // Ids are positions, which other differences already explain; the file size follows
            // from everything else.
            Some(rb) => {
                if let Some((text, detail)) = field_differences(ra, rb, &["type", "id", "bytes", "module"]) {
                    out.push(Difference { kind: kind(t), key: k.clone(), text, detail });
                }
            }
        }
    }
    for ((t, k), rb) in &ib {
        if !ia.contains_key(&(t.clone(), k.clone())) {
            out.push(Difference { kind: kind(t), key: k.clone(), text: "only in B".into(), detail: json!({"b": rb}) });
        }
    }
    // The header first, then by key.
    out.sort_by_key(|d| (d.kind != "header", d.key.parse::<u64>().unwrap_or(u64::MAX)));
    out
}

/// The fields (other than `skip`) in which two records differ: one line for people, and each
/// field's two values as JSON; `None` when they agree.
fn field_differences(ra: &Value, rb: &Value, skip: &[&str]) -> Option<(String, Value)> {
    let (oa, ob) = (ra.as_object()?, rb.as_object()?);
    let fields: Vec<(&String, &Value, &Value)> = oa
        .iter()
        .filter(|(f, _)| !skip.contains(&f.as_str()))
        .map(|(f, va)| (f, va, ob.get(f).unwrap_or(&Value::Null)))
        .filter(|(_, va, vb)| va != vb)
        .collect();
    if fields.is_empty() {
        return None;
    }
    let text =
        fields.iter().map(|(f, va, vb)| format!("{f} {} -> {}", short(va), short(vb))).collect::<Vec<_>>().join(", ");
    let detail =
        fields.iter().map(|(f, va, vb)| ((*f).clone(), json!({"a": va, "b": vb}))).collect::<serde_json::Map<_, _>>();
    Some((text, Value::Object(detail)))
}

/// Above this many op pairs the ops are matched by position instead of aligned (the alignment
/// takes time and memory in proportion to the pairs).
const MAX_ALIGNED_PAIRS: usize = 16 << 20;

/// The ops of both archives aligned as a longest common subsequence of what each op is (its kind
/// and label: `launch saxpy`, `copy a -> b`), so that an op added or removed in one archive shows
/// as that, not as every later op changed; aligned ops are then compared field by field.
fn ops(a: &[&Value], b: &[&Value]) -> Vec<Difference> {
    let sig = |r: &Value| (r["kind"].clone(), r["label"].clone(), r["depth"].clone());
    let pairs: Vec<(Option<usize>, Option<usize>)> = if a.len().saturating_mul(b.len()) <= MAX_ALIGNED_PAIRS {
        // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
        let (n, m) = (a.len(), b.len());
        let mut lcs = vec![0u32; (n + 1) * (m + 1)];
        let at = |i: usize, j: usize| i * (m + 1) + j;
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[at(i, j)] = if sig(a[i]) == sig(b[j]) {
                    lcs[at(i + 1, j + 1)] + 1
                } else {
                    lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
                };
            }
        }
        let (mut i, mut j, mut out) = (0, 0, Vec::new());
        while i < n || j < m {
            if i < n && j < m && sig(a[i]) == sig(b[j]) {
                out.push((Some(i), Some(j)));
                (i, j) = (i + 1, j + 1);
            } else if j == m || (i < n && lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
                out.push((Some(i), None));
                i += 1;
            } else {
                out.push((None, Some(j)));
                j += 1;
            }
        }
        out
    } else {
        (0..a.len().max(b.len())).map(|k| ((k < a.len()).then_some(k), (k < b.len()).then_some(k))).collect()
    };
    let mut out = Vec::new();
    for (i, j) in pairs {
        match (i.map(|i| a[i]), j.map(|j| b[j])) {
            (Some(ra), Some(rb)) => {
                let key =
                    if ra["id"] == rb["id"] { ra["id"].to_string() } else { format!("{} -> {}", ra["id"], rb["id"]) };
                if let Some((text, detail)) = field_differences(ra, rb, &["id"]) {
                    out.push(Difference { kind: "op", key, text, detail });
                }
            }
            (Some(ra), None) => out.push(Difference {
                kind: "op",
                key: ra["id"].to_string(),
                text: format!("only in A: {}", ra["label"].as_str().unwrap_or_default()),
                detail: json!({"a": ra}),
            }),
            (None, Some(rb)) => out.push(Difference {
                kind: "op",
                key: rb["id"].to_string(),
                text: format!("only in B: {}", rb["label"].as_str().unwrap_or_default()),
                detail: json!({"b": rb}),
            }),
            (None, None) => {}
        }
    }
    out
}

/// A value short enough for one line.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!(
            "{}...",
            &s[..s.char_indices().take_while(|(i, _)| *i < 57).last().map_or(0, |(i, c)| i + c.len_utf8())]
        )
    } else {
        s
    }
}

/// Initial and expected contents of every region both archives have with the same size and dtype.
fn data(a: &Archive, b: &Archive) -> Result<Vec<Difference>> {
    let mut out = Vec::new();
    // Judged in the types A's program declared, where they fit.
    let declared = shared::archive::declared::of_archive(a).unwrap_or_default();
    for ra in a.regions() {
        let Some(rb) = b.region_by_name(ra.name) else { continue };
        if (ra.size, ra.dtype) != (rb.size, rb.dtype) {
            continue; // the structure's difference says so
        }
        let tolerance = ra.tolerance.unwrap_or(Tolerance::Exact);
        for (what, xa, xb) in [("initial", ra.initial, rb.initial), ("expected", ra.expected, rb.expected)] {
            let text = match (xa, xb) {
                (None, None) => continue,
                (Some(_), None) => format!("{what} data only in A"),
                (None, Some(_)) => format!("{what} data only in B"),
                (Some(x), Some(y)) => {
                    let (da, db) = (decode(&x, what, ra.name)?, decode(&y, what, ra.name)?);
                    let layout = a.typed_layout(ra.id);
                    let check = check_region(&RegionInput {
                        region: ra.id,
                        name: ra.name,
                        dtype: ra.dtype,
                        layout: layout.as_deref(),
                        got: &db,
                        others: &[],
                        want: &da,
                        tolerance,
                        over: Default::default(),
                        recorded: &[],
                        declared: declared.get(&ra.id).map_or(&[], |d| d.as_slice()),
                    });
                    let inexact: u64 = check.stretches.iter().map(|s| s.inexact).sum();
                    match check.outcome() {
                        Outcome::Exact => continue,
                        Outcome::Within => format!(
                            "{what}: {inexact} of {} elements differ in their bits, all within tolerance (max abs err {:.3e})",
                            check.elements(),
                            check.max_abs_err()
                        ),
                        Outcome::Differ => {
                            let first = check
                                .first_mismatch()
                                .map(|f| format!("; first at element {}: A {}, B {}", f.index, f.want, f.got))
                                .unwrap_or_default();
                            format!(
                                "{what}: {} of {} elements differ (max abs err {:.3e}{first})",
                                check.mismatches(),
                                check.elements(),
                                check.max_abs_err()
                            )
                        }
                    }
                }
            };
            out.push(Difference { kind: "data", key: ra.name.to_string(), text, detail: json!({"data": what}) });
        }
    }
    Ok(out)
}

fn decode(blob: &Blob, what: &str, region: &str) -> Result<Vec<u8>> {
    blob.decode().with_context(|| format!("decoding the {what} data of region {region:?}"))
}
