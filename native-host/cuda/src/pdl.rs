//! Programmatic dependent launch for an archive's own kernels: the PTX rewrite that makes it safe.
//!
//! The key idea: a CUDA graph starts a dependent kernel only after its predecessor has completed
//! and its writes are flushed, one launch latency per edge. A programmatic edge lets the dependent
//! be scheduled while the predecessor still runs; what keeps that correct is the dependent itself,
//! which must execute `griddepcontrol.wait` (wait until every prerequisite grid has completed and
//! its memory is visible) before it touches memory. recap holds the PTX of every kernel it
//! replays, so it can put that wait first in every entry, before any instruction at all, and then
//! join kernel nodes with programmatic edges wherever the plan put an ordinary one.
//!
//! Without more, a dependent is scheduled once every block of its predecessor has exited (or
//! triggered). An entry may also fire `griddepcontrol.launch_dependents` at its top, as the
//! hand-written anchor `pdl_chain.cu` does (the trigger, then the wait): the dependent is then
//! scheduled as soon as every block of the predecessor has started, and its blocks sit at their
//! own wait until the predecessor's writes are visible, so results do not change. That pays where
//! a dependent like the predecessor fits beside its whole grid (half a wave, [`half_wave`]). A grid
//! that fills the GPU leaves the dependent's blocks no room but what its own blocks free, and its
//! trigger then costs more than it saves (an H200, a chain of 1,056-block kernels that are exactly
//! one wave: 1.09x plain edges with the trigger, 1.00x with the wait alone), so those entries get
//! the wait alone. Which entries trigger is the caller's choice (`replay/trigger.rs` decides it
//! from the occupancy of each launch).
//!
//! Both instructions are no-ops for a grid with no programmatic dependent or prerequisite, so the
//! rewritten PTX runs the same anywhere. `griddepcontrol` needs PTX ISA 7.8 and an sm_90 target:
//! both are raised where lower (the code is JIT-compiled for the GPU at hand, which is sm_90 or
//! newer when this is used). PTX that already says `griddepcontrol` manages its own dependencies
//! and is kept as it is.

/// What the rewrite did to a module.
#[derive(Debug, PartialEq, Eq)]
pub enum Rewritten {
    /// Every entry now waits first, and `triggers` of them trigger their dependents before that:
    /// the new text.
    Waits { text: String, triggers: usize },
    /// The module already uses `griddepcontrol`; its text is kept, and its entries are taken to
    /// wait where they need to.
    OwnWaits,
}

/// Why a module's PTX was not rewritten (its kernels then keep plain edges): what could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PdlError {
    #[error(transparent)]
    NotUtf8(#[from] std::str::Utf8Error),
    #[error("the PTX has no .entry")]
    NoEntry,
    #[error("the .entry at byte {0} has no body")]
    NoBody(usize),
    #[error("the PTX has no .version")]
    NoVersion,
    #[error(".version {0} is not MAJOR.MINOR")]
    Version(String),
    #[error("the PTX has no .target")]
    NoTarget,
    #[error(".target {0} names no sm_ architecture")]
    NoArchitecture(String),
    #[error(".target sm_{0}")]
    Architecture(String),
}

/// The lowest PTX ISA version with `griddepcontrol`.
const MIN_VERSION: (u32, u32) = (7, 8);
/// The lowest target with `griddepcontrol`.
const MIN_SM: u32 = 90;

/// `ptx` with `griddepcontrol.wait;` as the first instruction of every `.entry`, preceded by
/// `griddepcontrol.launch_dependents;` in the entries whose name `trigger` accepts, its
/// `.version` and `.target` raised where they are too low for it. An error names what could not
/// be parsed.
pub fn with_entry_waits(ptx: &str, trigger: &dyn Fn(&str) -> bool) -> Result<Rewritten, PdlError> {
    if ptx.contains("griddepcontrol") {
        return Ok(Rewritten::OwnWaits);
    }
    let mut out = String::with_capacity(ptx.len() + 256);
    let mut rest = ptx;
    let (mut entries, mut triggers) = (0, 0);
    while let Some(at) = find_entry(rest) {
        let body = body_start(&rest[at..]).ok_or(PdlError::NoBody(ptx.len() - rest.len() + at))?;
        let insert = first_statement(&rest[at + body..]);
        let split = at + body + insert;
        out.push_str(&rest[..split]);
        if trigger(entry_name(&rest[at + ".entry".len()..])) {
            out.push_str("\tgriddepcontrol.launch_dependents;\n");
            triggers += 1;
        }
        out.push_str("\tgriddepcontrol.wait;\n");
        rest = &rest[split..];
        entries += 1;
    }
    out.push_str(rest);
    if entries == 0 {
        return Err(PdlError::NoEntry);
    }
    Ok(Rewritten::Waits { text: raise_target(&raise_version(&out)?)?, triggers })
}

/// Whether a grid of `blocks` blocks and a dependent grid like it are resident together on a GPU
/// of `multiprocessors` that each hold `per_multiprocessor` of its blocks (what the occupancy API
/// gives for the kernel, its block size and its dynamic shared memory): at most half a wave, where
/// an early trigger pays.
pub fn half_wave(blocks: u64, multiprocessors: u32, per_multiprocessor: u32) -> bool {
    blocks.saturating_mul(2) <= u64::from(multiprocessors) * u64::from(per_multiprocessor)
}

/// The name of the entry whose declaration follows `.entry` at the start of `text`.
fn entry_name(text: &str) -> &str {
    let text = text.trim_start();
    let end = text.find(|c: char| c == '(' || c == '{' || c == ';' || c.is_whitespace()).unwrap_or(text.len());
    &text[..end]
}

/// Byte offset of the next `.entry` directive (not inside a comment).
fn find_entry(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let code = line.split("//").next().unwrap_or("");
        if let Some(i) = code.find(".entry") {
            let after = code[i + ".entry".len()..].chars().next();
            if after.is_none_or(char::is_whitespace) {
                return Some(offset + i);
            }
        }
        offset += line.len();
    }
    None
}

/// Offset just past the `{` that opens the body of the entry at the start of `text`: after the
/// parameter list's closing parenthesis (when there is one) and any performance directives.
fn body_start(text: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            '{' if depth == 0 => return Some(i + 1),
            ';' if depth == 0 => return None, // a declaration without a body
            _ => {}
        }
    }
    None
}

/// Offset in `body` (which starts just after `{`) of the first line that is not blank, a comment
/// or a variable declaration: where the first instruction goes.
fn first_statement(body: &str) -> usize {
    let mut offset = 0;
    let mut first = true;
    for line in body.split_inclusive('\n') {
        let t = line.trim();
        let declaration = [".reg", ".local", ".shared", ".pragma"].iter().any(|d| t.starts_with(d));
        if !(first || t.is_empty() || t.starts_with("//") || declaration) {
            return offset;
        }
        // The rest of the line with the `{` never holds the first instruction of nvcc's,
        // Triton's or Warp's PTX; if it does, the wait goes after it, still before the next.
        first = false;
        offset += line.len();
    }
    offset
}

fn raise_version(ptx: &str) -> Result<String, PdlError> {
    let Some(line) = ptx.lines().find(|l| l.trim_start().starts_with(".version")) else {
        return Err(PdlError::NoVersion);
    };
    let declared = line.trim().trim_start_matches(".version").trim();
    let (major, minor) = declared
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| PdlError::Version(declared.to_string()))?;
    if (major, minor) >= MIN_VERSION {
        return Ok(ptx.to_string());
    }
    Ok(ptx.replacen(line, &format!(".version {}.{}", MIN_VERSION.0, MIN_VERSION.1), 1))
}

fn raise_target(ptx: &str) -> Result<String, PdlError> {
    let Some(line) = ptx.lines().find(|l| l.trim_start().starts_with(".target")) else {
        return Err(PdlError::NoTarget);
    };
    let targets = line.trim().trim_start_matches(".target").trim();
    let sm = targets.split(',').map(str::trim).find_map(|t| t.strip_prefix("sm_"));
    let Some(sm) = sm else { return Err(PdlError::NoArchitecture(targets.to_string())) };
    let number: u32 = sm
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .map_err(|_| PdlError::Architecture(sm.to_string()))?;
    if number >= MIN_SM {
        return Ok(ptx.to_string());
    }
    let raised = line.replacen(&format!("sm_{sm}"), &format!("sm_{MIN_SM}"), 1);
    Ok(ptx.replacen(line, &raised, 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = ".version 7.0\n.target sm_75\n.address_size 64\n\n\
        // .globl a\n.visible .entry a(\n\t.param .u64 a_param_0\n)\n.maxntid 128, 1, 1\n{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<2>;\n\n\
        \tld.param.u64 %rd1, [a_param_0];\n\tret;\n}\n\
        .visible .entry b()\n{\n$L__BB0:\n\tret;\n}\n";

    const NONE: &dyn Fn(&str) -> bool = &|_| false;
    const ALL: &dyn Fn(&str) -> bool = &|_| true;

    fn waits(ptx: &str, trigger: &dyn Fn(&str) -> bool) -> (String, usize) {
        match with_entry_waits(ptx, trigger).unwrap() {
            Rewritten::Waits { text, triggers } => (text, triggers),
            Rewritten::OwnWaits => panic!("rewritten as its own waits: {ptx}"),
        }
    }

    const ONE: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\n\
        .visible .entry inc(.param .u64 x)\n{\n\t.reg .b64 %rd<2>;\n\tld.param.u64 %rd1, [x];\n\tret;\n}\n";

    #[test]
    fn a_triggering_entry_fires_its_dependents_then_waits() {
        let (text, triggers) = waits(ONE, ALL);
        assert_eq!(triggers, 1);
        assert_eq!(
            text,
            ".version 8.0\n.target sm_90\n.address_size 64\n\n\
             .visible .entry inc(.param .u64 x)\n{\n\t.reg .b64 %rd<2>;\n\
             \tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n\
             \tld.param.u64 %rd1, [x];\n\tret;\n}\n"
        );
    }

    #[test]
    fn a_multi_wave_entry_only_waits() {
        let (text, triggers) = waits(ONE, NONE);
        assert_eq!(triggers, 0);
        assert_eq!(
            text,
            ".version 8.0\n.target sm_90\n.address_size 64\n\n\
             .visible .entry inc(.param .u64 x)\n{\n\t.reg .b64 %rd<2>;\n\
             \tgriddepcontrol.wait;\n\
             \tld.param.u64 %rd1, [x];\n\tret;\n}\n"
        );
    }

    #[test]
    fn of_several_entries_only_those_named_trigger() {
        let seen = std::cell::RefCell::new(Vec::new());
        let only_b = |name: &str| {
            seen.borrow_mut().push(name.to_string());
            name == "b"
        };
        let (text, triggers) = waits(TWO, &only_b);
        assert_eq!(seen.into_inner(), ["a", "b"], "every entry is asked about by its name, in order");
        assert_eq!(triggers, 1);
        assert_eq!(
            text,
            ".version 7.8\n.target sm_90\n.address_size 64\n\n\
             // .globl a\n.visible .entry a(\n\t.param .u64 a_param_0\n)\n.maxntid 128, 1, 1\n{\n\t.reg .b32 %r<3>;\n\t.reg .b64 %rd<2>;\n\n\
             \tgriddepcontrol.wait;\n\
             \tld.param.u64 %rd1, [a_param_0];\n\tret;\n}\n\
             .visible .entry b()\n{\n\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n$L__BB0:\n\tret;\n}\n"
        );
        // Both, the trigger before the wait in each.
        let (text, triggers) = waits(TWO, ALL);
        assert_eq!(triggers, 2);
        assert_eq!(text.matches("\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n").count(), 2);
    }

    #[test]
    fn every_entry_waits_before_its_first_instruction() {
        let (text, _) = waits(TWO, NONE);
        assert_eq!(text.matches("griddepcontrol.wait;").count(), 2);
        // After the declarations of `a`, before its first instruction.
        let a = text.find(".entry a(").unwrap();
        let wait = a + text[a..].find("griddepcontrol.wait").unwrap();
        assert!(text[a..wait].contains(".reg .b64 %rd<2>;") && !text[a..wait].contains("ld.param"));
        // `b` begins with a label: the wait goes before it.
        let b = text.find(".entry b()").unwrap();
        assert!(text[b..].find("griddepcontrol.wait").unwrap() < text[b..].find("$L__BB0").unwrap());
        assert!(text.starts_with(".version 7.8\n.target sm_90\n"), "{text}");
    }

    #[test]
    fn newer_versions_and_targets_stay_and_own_waits_are_kept() {
        let ptx = TWO.replace(".version 7.0", ".version 8.5").replace("sm_75", "sm_90a");
        let (text, _) = waits(&ptx, ALL);
        assert!(text.starts_with(".version 8.5\n.target sm_90a\n"), "{text}");
        // A module that already says griddepcontrol is kept whole, whatever the caller asks.
        let own = TWO.replace("\tret;\n}\n.visible", "\tgriddepcontrol.launch_dependents;\n\tret;\n}\n.visible");
        assert_eq!(with_entry_waits(&own, ALL).unwrap(), Rewritten::OwnWaits);
        let own_wait = ONE.replace("\tret;", "\tgriddepcontrol.wait;\n\tret;");
        assert_eq!(with_entry_waits(&own_wait, ALL).unwrap(), Rewritten::OwnWaits);
        assert!(with_entry_waits(".version 7.8\n.target sm_90\n", ALL).unwrap_err().to_string().contains("no .entry"));
        // A commented-out entry is not one.
        assert!(with_entry_waits(".version 7.8\n.target sm_90\n// .entry x()\n", ALL).is_err());
    }

    #[test]
    fn entry_names_end_at_their_parameters_or_body() {
        assert_eq!(entry_name(" inc(.param .u64 x)"), "inc");
        assert_eq!(entry_name("\t_Z3incPfi (\n"), "_Z3incPfi");
        assert_eq!(entry_name(" b\n{"), "b");
        assert_eq!(entry_name(" c{"), "c");
        assert_eq!(entry_name(""), "");
    }

    #[test]
    fn half_a_wave_leaves_room_for_a_dependent_like_it() {
        // One block to a multiprocessor: 66 blocks of 132 leave room for 66 more, 67 do not.
        assert!(half_wave(1, 132, 1));
        assert!(half_wave(66, 132, 1));
        assert!(!half_wave(67, 132, 1));
        // 256-thread blocks, 8 to a multiprocessor: 528 blocks are half a wave; 1,056 fill the GPU.
        assert!(half_wave(528, 132, 8));
        assert!(!half_wave(529, 132, 8));
        assert!(!half_wave(1056, 132, 8));
        // A kernel the multiprocessor cannot hold a block of never triggers.
        assert!(!half_wave(1, 132, 0));
        // No overflow at the extremes.
        assert!(half_wave(u64::from(u32::MAX), u32::MAX, 2));
        assert!(!half_wave(u64::MAX, u32::MAX, u32::MAX));
    }

    #[test]
    fn recaps_own_kernels_rewrite() {
        for ptx in [crate::kernels::FILL_MODULE, crate::kernels::CONDITION_MODULE] {
            let entries = ptx.matches(".entry").count();
            let (text, triggers) = waits(ptx, ALL);
            assert_eq!(text.matches("griddepcontrol.wait;").count(), entries);
            assert_eq!((triggers, text.matches("griddepcontrol.launch_dependents;").count()), (entries, entries));
        }
    }
}
