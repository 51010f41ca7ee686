//! The record checks [`Archive::open`] runs after locating the sections: every string, blob and
//! region index in range, every table's runs and ranges consistent, typed layouts, effects and the
//! op tree well formed. They are what lets every accessor afterwards be infallible.

use std::collections::HashSet;

use super::error::{err, FormatError};
use super::table::Table;
use super::views::{Blob, Op};
use super::Archive;
use crate::archive::layout::{self, *};
use crate::archive::model::*;
use crate::archive::rules;
use crate::le::{u32_at, u64_at};

impl<'a> Archive<'a> {
    pub(super) fn check_string(&self, t: &Table, i: usize, field: usize, optional: bool) -> Result<u32, FormatError> {
        let id = u32_at(t.rec(i), field);
        if (id as usize) < self.string_count || (optional && id == NO_STRING) {
            Ok(id)
        } else {
            err(t.name(), t.at(i, field), format!("record {i} names string {id} but there are {}", self.string_count))
        }
    }

    pub(super) fn check_blob(&self, t: &Table, i: usize, field: usize) -> Result<Blob<'a>, FormatError> {
        let r = t.rec(i);
        let offset = u64_at(r, field);
        let stored_len = u64_at(r, field + 8);
        let raw_len = u64_at(r, field + 16);
        let codec = u32_at(r, field + 24);
        let at = t.at(i, field);
        if codec != CODEC_RAW && codec != CODEC_LZ4_FRAME {
            return err(t.name(), at, format!("record {i} uses unknown compression codec {codec}"));
        }
        if offset.checked_add(stored_len).is_none_or(|e| e > self.blobs.len() as u64) {
            return err(
                t.name(),
                at,
                format!(
                    "record {i} refers to blob bytes {offset}+{stored_len} beyond the {}-byte blobs section",
                    self.blobs.len()
                ),
            );
        }
        if codec == CODEC_RAW && stored_len != raw_len {
            return err(t.name(), at, format!("record {i}: raw blob stored as {stored_len} bytes claims {raw_len}"));
        }
        // LZ4 cannot expand data more than 255-fold, so a larger claim is a lie that would make a
        // reader allocate far more than the file could ever hold.
        if codec == CODEC_LZ4_FRAME && raw_len / LZ4_MAX_RATIO > stored_len {
            return err(
                t.name(),
                at,
                format!("record {i}: {stored_len} compressed bytes cannot decode to the {raw_len} claimed"),
            );
        }
        Ok(Blob {
            stored: &self.blobs[offset as usize..(offset + stored_len) as usize],
            raw_len,
            codec,
            file_offset: self.blobs_offset + offset,
        })
    }

    pub(super) fn check_region_index(
        &self,
        t: &Table,
        i: usize,
        field: usize,
        what: &str,
    ) -> Result<RegionId, FormatError> {
        let r = u32_at(t.rec(i), field);
        if (r as usize) < self.regions.count {
            Ok(r)
        } else {
            err(
                t.name(),
                t.at(i, field),
                format!("record {i}: {what} region {r} does not exist ({} regions)", self.regions.count),
            )
        }
    }

    pub(super) fn region_size(&self, r: RegionId) -> u64 {
        u64_at(self.regions.rec(r as usize), 16)
    }

    pub(super) fn region_device(&self, r: RegionId) -> DeviceId {
        u32_at(self.regions.rec(r as usize), REGION_DEVICE)
    }

    pub(super) fn check_tables(&self) -> Result<(), FormatError> {
        let m = &self.modules;
        let c = &self.cubins;
        // Each module owns the next run of cubins, and each kernel the next run of parameters, so that
        // checking them all is one linear pass however hostile the counts.
        let mut next_cubin = 0u64;
        let mut sms = HashSet::new();
        for i in 0..m.count {
            self.check_string(m, i, 0, false)?;
            let first = u32_at(m.rec(i), 4) as u64;
            let n = u32_at(m.rec(i), 8) as u64;
            if first != next_cubin || first + n > c.count as u64 {
                return err(
                    "modules",
                    m.at(i, 4),
                    format!(
                        "module {i} lists cubins {first}..{}; expected the next of {} from {next_cubin}",
                        first + n,
                        c.count
                    ),
                );
            }
            next_cubin = first + n;
            sms.clear();
            for j in first as usize..(first + n) as usize {
                if u32_at(c.rec(j), 0) as usize != i {
                    return err(
                        "modules",
                        m.at(i, 4),
                        format!("module {i} lists cubin {j}, which belongs to module {}", u32_at(c.rec(j), 0)),
                    );
                }
                let sm = u32_at(c.rec(j), 4);
                if !sms.insert(sm) {
                    return err("cubins", c.at(j, 4), format!("module {i} has two cubins for sm_{sm}"));
                }
            }
            self.check_blob(m, i, 16)?;
        }
        if next_cubin != c.count as u64 {
            return err("cubins", c.file_offset, format!("{} cubins but the modules list {next_cubin}", c.count));
        }
        for i in 0..c.count {
            let module = u32_at(c.rec(i), 0);
            if module as usize >= m.count {
                return err("cubins", c.at(i, 0), format!("cubin {i} belongs to module {module} of {}", m.count));
            }
            self.check_blob(c, i, 8)?;
        }
        let p = &self.params;
        for i in 0..p.count {
            self.check_string(p, i, 0, false)?;
            let kind = u32_at(p.rec(i), 16);
            if kind > 1 {
                return err("params", p.at(i, 16), format!("parameter {i} has unknown kind {kind}"));
            }
        }
        let k = &self.kernels;
        let mut next_param = 0u64;
        for i in 0..k.count {
            let module = u32_at(k.rec(i), 0);
            if module as usize >= m.count {
                return err("kernels", k.at(i, 0), format!("kernel {i} belongs to module {module} of {}", m.count));
            }
            self.check_string(k, i, 4, false)?;
            let first = u32_at(k.rec(i), 8) as u64;
            let n = u32_at(k.rec(i), 12) as u64;
            if first != next_param || first + n > p.count as u64 {
                return err(
                    "kernels",
                    k.at(i, 8),
                    format!(
                        "kernel {i} lists parameters {first}..{}; expected the next of {} from {next_param}",
                        first + n,
                        p.count
                    ),
                );
            }
            next_param = first + n;
            if let Err((j, (field, reason))) = rules::params(&self.kernel(i as KernelId).params) {
                return err("params", p.at(first as usize + j, field), format!("kernel {i}: {reason}"));
            }
        }
        if next_param != p.count as u64 {
            return err("params", p.file_offset, format!("{} parameters but the kernels list {next_param}", p.count));
        }
        let dv = &self.devices;
        if dv.count == 0 && dv.file_offset != 0 {
            return err("devices", dv.file_offset, "the devices section lists no device");
        }
        for i in 0..dv.count {
            self.check_string(dv, i, 0, false)?;
        }
        let device_count = self.device_count();
        let rg = &self.regions;
        for i in 0..rg.count {
            let r = rg.rec(i);
            self.check_string(rg, i, 0, false)?;
            if let Err((field, reason)) =
                rules::device(REGION_DEVICE, "the region", u32_at(r, REGION_DEVICE), device_count)
            {
                return err("regions", rg.at(i, field), format!("region {i}: {reason}"));
            }
            let dtype = u32_at(r, 4);
            if DType::from_code(dtype).is_none() {
                return err("regions", rg.at(i, 4), format!("region {i} has unknown element type {dtype}"));
            }
            let flags = u32_at(r, 8);
            if flags & !(REGION_HAS_INITIAL | REGION_HAS_EXPECTED | REGION_SCRATCH) != 0 {
                return err("regions", rg.at(i, 8), format!("region {i} has unknown flags {flags:#x}"));
            }
            let rank = u32_at(r, 24);
            if rank > 4 {
                return err("regions", rg.at(i, 24), format!("region {i} has {rank} dimensions; at most 4"));
            }
            if let Err((field, reason)) = rules::region(&[], u32_at(r, 12)) {
                return err("regions", rg.at(i, field), format!("region {i}: {reason}"));
            }
            let size = u64_at(r, 16);
            for (flag, field, what) in [(REGION_HAS_INITIAL, 64, "initial"), (REGION_HAS_EXPECTED, 96, "expected")] {
                if flags & flag != 0 {
                    let b = self.check_blob(rg, i, field)?;
                    if b.raw_len != size {
                        return err(
                            "regions",
                            rg.at(i, field),
                            format!("region {i} is {size} bytes but its {what} data decodes to {}", b.raw_len),
                        );
                    }
                }
            }
            if flags & REGION_HAS_EXPECTED != 0 {
                let kind = u32_at(r, 128);
                let (a, b) = (f64::from_bits(u64_at(r, 136)), f64::from_bits(u64_at(r, 144)));
                let Some(t) = Tolerance::from_code(kind, a, b) else {
                    return err("regions", rg.at(i, 128), format!("region {i} has unknown tolerance kind {kind}"));
                };
                if let Err((field, reason)) = rules::tolerance(&t) {
                    return err("regions", rg.at(i, field), format!("region {i}: {reason}"));
                }
            }
        }
        let rl = &self.relocs;
        let mut seen_region_owner = false;
        for i in 0..rl.count {
            let r = rl.rec(i);
            let (kind, owner) = (u32_at(r, 0), u32_at(r, 4));
            let owner_size = match kind {
                RELOC_OWNER_REGION => {
                    seen_region_owner = true;
                    if owner as usize >= rg.count {
                        return err(
                            "relocs",
                            rl.at(i, 4),
                            format!("relocation {i} patches region {owner} of {}", rg.count),
                        );
                    }
                    self.region_size(owner)
                }
                RELOC_OWNER_LAUNCH => {
                    if seen_region_owner {
                        return err(
                            "relocs",
                            rl.at(i, 0),
                            format!("relocation {i}: launch relocations must precede region relocations"),
                        );
                    }
                    if owner as usize >= self.ops.count || u32_at(self.ops.rec(owner as usize), 0) != layout::op::LAUNCH
                    {
                        return err(
                            "relocs",
                            rl.at(i, 4),
                            format!("relocation {i} patches op {owner}, which is not a launch"),
                        );
                    }
                    u32_at(self.ops.rec(owner as usize), 36) as u64
                }
                _ => return err("relocs", rl.at(i, 0), format!("relocation {i} has unknown owner kind {kind}")),
            };
            let target = self.check_region_index(rl, i, 16, "target")?;
            if let Err((field, reason)) = rules::reloc(&self.reloc(i as u32), owner_size, self.region_size(target)) {
                return err("relocs", rl.at(i, field), format!("relocation {i}: {reason}"));
            }
            let owner_device = match kind {
                RELOC_OWNER_REGION => self.region_device(owner),
                _ => self.op_device(owner),
            };
            if let Err((_, reason)) =
                rules::same_device(0, "its target", target, self.region_device(target), owner_device)
            {
                return err("relocs", rl.at(i, 16), format!("relocation {i}: {reason}"));
            }
        }
        self.check_ops()?;
        let b = &self.bindings;
        let mut names = HashSet::new();
        for i in 0..b.count {
            let name = self.check_string(b, i, 0, false)?;
            if !names.insert(name) {
                return err("bindings", b.at(i, 0), format!("binding {:?} is declared twice", self.string(name)));
            }
            self.check_region_index(b, i, 4, "bound")?;
            let d = u32_at(b.rec(i), 8);
            if Direction::from_code(d).is_none() {
                return err("bindings", b.at(i, 8), format!("binding {i} has unknown direction {d}"));
            }
        }
        let mt = &self.meta;
        for i in 0..mt.count {
            self.check_string(mt, i, 0, false)?;
            self.check_string(mt, i, 4, false)?;
        }
        self.check_effects()?;
        self.check_types()?;
        self.check_spread()
    }

    /// Typed layouts: regions ascending, each region's stretches consecutive, of known types and
    /// covering the region exactly (`types::check_layout`).
    pub(super) fn check_types(&self) -> Result<(), FormatError> {
        let t = &self.types;
        let mut i = 0;
        let mut last: Option<RegionId> = None;
        while i < t.count {
            let (region, _, _) = crate::archive::types::record(t.rec(i));
            if region as usize >= self.regions.count {
                return err(
                    "types",
                    t.at(i, 0),
                    format!("record {i} names region {region} but there are {}", self.regions.count),
                );
            }
            if last.is_some_and(|l| l >= region) {
                return err(
                    "types",
                    t.at(i, 0),
                    format!("record {i}: region {region} comes after region {} or twice", last.unwrap_or(0)),
                );
            }
            last = Some(region);
            let first = i;
            let mut stretches = Vec::new();
            while i < t.count && crate::archive::types::record(t.rec(i)).0 == region {
                let (_, code, len) = crate::archive::types::record(t.rec(i));
                let Some(ty) = ElemType::from_code(code) else {
                    return err("types", t.at(i, 4), format!("record {i} has unknown element type {code}"));
                };
                stretches.push(Stretch { len, ty });
                i += 1;
            }
            if let Err((k, reason)) = crate::archive::types::check_layout(self.region(region).size, &stretches) {
                let at = (first + k).min(t.count - 1);
                return err("types", t.at(at, 8), format!("record {at}: typed layout of region {region}: {reason}"));
            }
        }
        Ok(())
    }

    /// Effects belong to launches, in op order, one inputs hash per launch, each write within a
    /// persistent region; a launch that wrote nothing has one record without a region.
    pub(super) fn check_effects(&self) -> Result<(), FormatError> {
        let e = &self.effects;
        for i in 0..e.count {
            let r = e.rec(i);
            let op = u32_at(r, 0);
            if op as usize >= self.ops.count || u32_at(self.ops.rec(op as usize), 0) != layout::op::LAUNCH {
                return err("effects", e.at(i, 0), format!("record {i}: op {op} is not a launch"));
            }
            let same_op = i > 0 && u32_at(e.rec(i - 1), 0) == op;
            if i > 0 && u32_at(e.rec(i - 1), 0) > op {
                return err("effects", e.at(i, 0), format!("record {i}: op {op} comes after a later op's effects"));
            }
            if same_op && e.rec(i - 1)[16..32] != r[16..32] {
                return err("effects", e.at(i, 16), format!("record {i}: op {op} has two inputs hashes"));
            }
            let blob = self.check_blob(e, i, 32)?;
            let region = u32_at(r, 4);
            let offset = u64_at(r, 8);
            if region == EFFECT_NO_REGION {
                let alone = !same_op && (i + 1 == e.count || u32_at(e.rec(i + 1), 0) != op);
                if !alone || offset != 0 || blob.raw_len != 0 {
                    return err(
                        "effects",
                        e.at(i, 4),
                        format!("record {i}: a write without a region must be op {op}'s only one, and empty"),
                    );
                }
                continue;
            }
            self.check_region_index(e, i, 4, "written")?;
            let flags = u32_at(self.regions.rec(region as usize), 8);
            if flags & REGION_SCRATCH != 0 {
                return err("effects", e.at(i, 4), format!("record {i}: region {region} is scratch"));
            }
            if offset.checked_add(blob.raw_len).is_none_or(|end| end > self.region_size(region)) {
                return err(
                    "effects",
                    e.at(i, 8),
                    format!(
                        "record {i}: {} bytes at {offset} run past region {region} of {} bytes",
                        blob.raw_len,
                        self.region_size(region)
                    ),
                );
            }
        }
        Ok(())
    }

    pub(super) fn check_ops(&self) -> Result<(), FormatError> {
        let t = &self.ops;
        let broken = |i: usize, rule: Result<(), rules::Broken>| match rule {
            Ok(()) => Ok(()),
            Err((field, reason)) => err("ops", t.at(i, field), format!("op {i}: {reason}")),
        };
        // Parameter bytes each kernel needs, computed once rather than per launch.
        let params_size: Vec<u64> = (0..self.kernels.count)
            .map(|k| {
                let r = self.kernels.rec(k);
                let first = u32_at(r, 8) as usize;
                (first..first + u32_at(r, 12) as usize)
                    .map(|p| u32_at(self.params.rec(p), 4) as u64 + u32_at(self.params.rec(p), 8) as u64)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let device_count = self.device_count();
        // Ends of the open while/if bodies with their devices, innermost last.
        let mut open: Vec<(usize, DeviceId)> = Vec::new();
        let mut next_reloc = 0u64;
        let mut next_library = 0usize;
        for i in 0..t.count {
            while open.last().is_some_and(|o| o.0 == i) {
                open.pop();
            }
            let r = t.rec(i);
            let device = u32_at(r, OP_DEVICE);
            broken(i, rules::device(OP_DEVICE, "the op", device, device_count))?;
            if let Some(&(_, body_device)) = open.last() {
                if device != body_device {
                    return err(
                        "ops",
                        t.at(i, OP_DEVICE),
                        format!("op {i} is on device {device} inside a body that runs on device {body_device}"),
                    );
                }
            }
            let placed = |field: usize, role: &str, region: RegionId| {
                broken(i, rules::same_device(field, role, region, self.region_device(region), device))
            };
            match u32_at(r, 0) {
                layout::op::LAUNCH => {
                    let kernel = u32_at(r, 4);
                    if kernel as usize >= self.kernels.count {
                        return err(
                            "ops",
                            t.at(i, 4),
                            format!("op {i} launches kernel {kernel} of {}", self.kernels.count),
                        );
                    }
                    let grid = [u32_at(r, 8), u32_at(r, 12), u32_at(r, 16)];
                    let block = [u32_at(r, 20), u32_at(r, 24), u32_at(r, 28)];
                    broken(i, rules::launch_dims(grid, block))?;
                    let len = u32_at(r, 36) as u64;
                    let off = u64_at(r, 40);
                    if off.checked_add(len).is_none_or(|e| e > self.param_bytes.len() as u64) {
                        return err(
                            "ops",
                            t.at(i, 36),
                            format!("op {i} parameter bytes {off}+{len} fall outside the param-bytes section"),
                        );
                    }
                    let need = params_size[kernel as usize];
                    if len < need || len > rules::MAX_PARAM_BYTES {
                        return err(
                            "ops",
                            t.at(i, 36),
                            format!("op {i} passes {len} parameter bytes; its kernel needs {need}"),
                        );
                    }
                    let first = u32_at(r, 48) as u64;
                    let n = u32_at(r, 52) as u64;
                    if first != next_reloc || first + n > self.relocs.count as u64 {
                        return err(
                            "ops",
                            t.at(i, 48),
                            format!("op {i} relocations {first}..{} are out of order or out of range", first + n),
                        );
                    }
                    for j in first..first + n {
                        let rr = self.relocs.rec(j as usize);
                        if u32_at(rr, 0) != RELOC_OWNER_LAUNCH || u32_at(rr, 4) as usize != i {
                            return err(
                                "ops",
                                t.at(i, 48),
                                format!("op {i} claims relocation {j}, which belongs elsewhere"),
                            );
                        }
                    }
                    next_reloc = first + n;
                }
                layout::op::COPY => {
                    self.check_region_index(t, i, 4, "source")?;
                    self.check_region_index(t, i, 8, "destination")?;
                    let Op::Copy(c) = self.op(i as OpId) else { unreachable!() };
                    broken(i, rules::copy(&c, self.region_size(c.src), self.region_size(c.dst)))?;
                }
                layout::op::MEMSET => {
                    self.check_region_index(t, i, 4, "memset")?;
                    let Op::Memset(m) = self.op(i as OpId) else { unreachable!() };
                    broken(i, rules::memset(&m, self.region_size(m.region)))?;
                    placed(4, "its", m.region)?;
                }
                layout::op::ALLOC | layout::op::FREE => {
                    let region = self.check_region_index(t, i, 4, "scratch")?;
                    if u32_at(self.regions.rec(region as usize), 8) & REGION_SCRATCH == 0 {
                        return err(
                            "ops",
                            t.at(i, 4),
                            format!("op {i} allocates or frees region {region}, which is not scratch"),
                        );
                    }
                    placed(4, "its scratch", region)?;
                }
                layout::op::WHILE | layout::op::IF => {
                    let region = self.check_region_index(t, i, 4, "condition")?;
                    let cond = Condition { region, offset: u64_at(r, 16), max_iterations: u32_at(r, 12) };
                    broken(i, rules::condition(&cond, self.region_size(region)))?;
                    placed(4, "its condition's", region)?;
                    let body_end = i as u64 + 1 + u32_at(r, 8) as u64;
                    let limit = open.last().map_or(t.count as u64, |e| e.0 as u64);
                    if body_end > limit {
                        return err(
                            "ops",
                            t.at(i, 8),
                            format!("op {i}: body of {} ops runs past its enclosing body or the op list", u32_at(r, 8)),
                        );
                    }
                    if body_end > i as u64 + 1 {
                        open.push((body_end as usize, device));
                    }
                    if open.len() > rules::MAX_NESTING {
                        return err(
                            "ops",
                            t.at(i, 0),
                            format!("op {i}: bodies nest more than {} deep", rules::MAX_NESTING),
                        );
                    }
                }
                layout::op::MARKER => {
                    self.check_string(t, i, 4, false)?;
                }
                kind @ (layout::op::SIGNAL | layout::op::WAIT) => {
                    if self.devices.count == 0 {
                        return err(
                            "ops",
                            t.at(i, 0),
                            format!(
                                "op {i} has kind {kind} ({}), which needs a devices section",
                                if kind == layout::op::SIGNAL { "signal" } else { "wait" }
                            ),
                        );
                    }
                }
                layout::op::LIBRARY => {
                    let record = u32_at(r, 4) as usize;
                    if record != next_library || record >= self.library.count {
                        return err(
                            "ops",
                            t.at(i, 4),
                            format!(
                                "op {i} names library record {record}; the next is {next_library} of {}",
                                self.library.count
                            ),
                        );
                    }
                    next_library += 1;
                    let l = &self.library;
                    let op = crate::archive::LibraryOp::decode(l.rec(record)).or_else(|(field, reason)| {
                        err("library", l.at(record, field), format!("record {record}: {reason}"))
                    })?;
                    let sizes = |r: RegionId| (r < self.regions.count as u32).then(|| self.region_size(r));
                    crate::archive::library::rule(&op, sizes).or_else(|(field, reason)| {
                        err("library", l.at(record, field), format!("record {record}: {reason}"))
                    })?;
                    for o in op.operands().unwrap_or_default() {
                        placed(4, o.role, o.at.region)?;
                    }
                }
                other => return err("ops", t.at(i, 0), format!("op {i} has unknown kind {other}")),
            }
        }
        if next_library != self.library.count {
            return err(
                "library",
                self.library.file_offset,
                format!("{} records but {next_library} library ops", self.library.count),
            );
        }
        // Region-owned relocations follow the launch ones; the rest were checked above.
        let launch_relocs =
            (0..self.relocs.count).take_while(|&j| u32_at(self.relocs.rec(j), 0) == RELOC_OWNER_LAUNCH).count() as u64;
        if launch_relocs != next_reloc {
            return err(
                "relocs",
                self.relocs.file_offset,
                format!("{launch_relocs} launch relocations but the launches claim {next_reloc}"),
            );
        }
        Ok(())
    }
}
