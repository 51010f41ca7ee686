//! Launch bounds read from `.entry` headers, and PTX modules linked on their text: what binds
//! to what, checked by loading and running the result through the driver (`test_support`).

use super::*;
use crate::test_support::{run_k, CALLEE, CALLER, LINKED_RESULT};
use shared::ptx::Module;

#[test]
fn launch_bounds_come_from_the_entry_header() {
    let ptx = "
.version 8.0
.target sm_80
.address_size 64
// .entry commented(.param .u64 p) .maxntid 1
.visible .entry bounded(.param .u64 p) .maxntid 128, 1, 1 .maxnreg 40
{
    ret;
}
.visible .entry shaped() .reqntid 8, 4
{
    ret;
}
.visible .entry free(.param .u64 p)
{
    ret;
}
";
    let b = bounds(ptx);
    assert_eq!(b.len(), 3, "{b:?}");
    assert_eq!(b["free"], Bounds::default(), "no bounds, no registers");
    assert!(b["free"].admits([1024, 1, 1]) && b["free"].thread_limit().is_none());
    let bounded = b["bounded"];
    assert_eq!((bounded.max_threads, bounded.max_registers, bounded.required), (Some(128), Some(40), None));
    assert!(bounded.admits([128, 1, 1]) && bounded.admits([64, 2, 1]));
    assert!(!bounded.admits([256, 1, 1]) && !bounded.admits([65, 2, 1]));
    let shaped = b["shaped"];
    assert_eq!(shaped.required, Some([8, 4, 1]));
    assert_eq!(shaped.thread_limit(), Some(32));
    assert!(shaped.admits([8, 4, 1]) && !shaped.admits([4, 8, 1]));
}

/// Runs kernel `k` of linked PTX through the driver and returns the word it stores.
fn run(ptx: &str) -> u32 {
    run_k(ptx.as_bytes()).unwrap_or_else(|e| panic!("{e:?}\n{ptx}"))
}

#[test]
fn linked_modules_bind_externs_across_inputs_and_keep_private_names_apart() {
    let linked = link(&[CALLER, CALLEE]);
    assert_eq!(run(&linked), LINKED_RESULT, "{linked}");
    assert!(linked.contains("helper$recap0") && linked.contains("helper$recap1"), "{linked}");
    assert_eq!(linked.matches(".version").count(), 1, "{linked}");
    // In the other order the externs come after their definitions; the result is the same.
    assert_eq!(run(&link(&[CALLEE, CALLER])), LINKED_RESULT);
    // Without its callee the caller does not parse (an undefined function).
    assert!(Module::parse(&link(&[CALLER])).is_err());
    // Two weak definitions: one stays.
    let weak = ".version 8.0\n.target sm_80\n.address_size 64\n.weak .func w()\n{\n ret;\n}\n";
    let linked = link(&[weak, weak, CALLER, CALLEE]);
    assert_eq!(linked.matches(".weak .func w").count(), 1, "{linked}");
    assert_eq!(run(&linked), LINKED_RESULT);
}

#[test]
fn any_text_is_scanned_and_linked_without_a_panic() {
    let text = format!("{CALLER}{CALLEE} /* open \"quote \\\" é ( [ {{");
    let mut cut = 0;
    while cut <= text.len() {
        if text.is_char_boundary(cut) {
            let part = &text[..cut];
            bounds(part);
            link(&[part, CALLEE, part]);
        }
        cut += 7;
    }
    for junk in ["", "}}}}", ".entry", ".entry (", ".func (((", ".extern .global", ".target", ".global x[", "é.entryé"]
    {
        bounds(junk);
        link(&[junk, junk]);
    }
}

#[test]
fn registers_are_counted_from_declarations_and_bounded_on_request() {
    let ptx = "
.visible .entry k(.param .u64 p) .maxntid 64
{
    .reg .pred %p<4>;
    .reg .b16 %rs<3>;
    .reg .b32 %r<10>, %x, %y;
    .reg .f64 %fd<5>;
    { .reg .b32 %inner; }
    ret;
}
.visible .entry tight() .maxnreg 16
{
    .reg .b64 %rd<40>;
    ret;
}
";
    let b = bounds(ptx);
    assert_eq!(b["k"].registers, 3 + 12 + 10 + 1, "{b:?}");
    assert_eq!(b["tight"].registers, 80);
    let limited = limit_registers(ptx, 32);
    let b = bounds(&limited);
    assert_eq!(b["k"].max_registers, Some(32), "{limited}");
    assert_eq!(b["k"].max_threads, Some(64));
    assert_eq!(b["tight"].max_registers, Some(16), "a lower bound of its own stays: {limited}");
    assert_eq!(limited.matches(".maxnreg").count(), 2, "{limited}");
    Module::parse(&format!(".version 8.0\n.target sm_80\n.address_size 64\n{limited}")).unwrap();
}
