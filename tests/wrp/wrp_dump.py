#!/usr/bin/env python3
"""Independent reference reader for Warp APIC ``.wrp`` files (format version 18, Warp 1.19.0).

Pure Python + stdlib (no Warp import).  Used by ``generate.py`` to emit
``<fixture>.expected.json`` golden summaries, and handy on its own:

    python3 wrp_dump.py file.wrp            # JSON summary to stdout

The layout is described in /work/wrp-notes.md.  All integers are little-endian,
all structs are packed (no implicit padding).
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys

OP_NAMES = {
    1: "KERNEL_LAUNCH",
    2: "MEMCPY_H2D",
    3: "MEMCPY_D2H",
    4: "MEMCPY_D2D",
    5: "MEMSET",
    6: "ALLOC",
    7: "IF",
    8: "WHILE",
    9: "SCAN",
    10: "MEMTILE",
    11: "SEGMENTED_SORT",
    12: "RADIX_SORT",
    13: "RUNLENGTH_ENCODE",
    14: "BSR_FROM_TRIPLETS",
    15: "BSR_TRANSPOSE",
    16: "REDUCTION",
    17: "BVH_REFIT",
    18: "BVH_REBUILD",
    19: "HASH_GRID_UPDATE",
}
RELOC_NAMES = {1: "DATA_PTR", 2: "HANDLE", 3: "NULL"}


class Reader:
    def __init__(self, data: bytes, pos: int = 0, end: int | None = None):
        self.d = data
        self.p = pos
        self.end = len(data) if end is None else end

    def take(self, n: int) -> bytes:
        if self.p + n > self.end:
            raise ValueError(f"truncated read of {n} bytes at {self.p} (end {self.end})")
        b = self.d[self.p : self.p + n]
        self.p += n
        return b

    def u(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        return struct.unpack("<" + fmt, self.take(size))

    def string(self) -> str:
        (n,) = self.u("I")
        return self.take(n).decode("utf-8")


def parse_header(d: bytes) -> dict:
    magic = d[0:4]
    if magic != b"WRP1":
        raise ValueError(f"bad magic {magic!r}")
    version, flags, num_sections, table_off = struct.unpack_from("<IIIQ", d, 4)
    device_type = d[24]
    (target_arch,) = struct.unpack_from("<I", d, 28)
    sections = []
    for i in range(num_sections):
        t, f, off, size, usize = struct.unpack_from("<IIQQQ", d, table_off + 32 * i)
        sections.append({"type": t, "flags": f, "offset": off, "size": size, "uncompressed_size": usize})
    return {
        "magic": magic.decode(),
        "version": version,
        "flags": flags,
        "num_sections": num_sections,
        "section_table_offset": table_off,
        "device_type": device_type,
        "target_arch": target_arch,
        "sections": sections,
    }


def parse_metadata(d: bytes, off: int, size: int) -> dict:
    r = Reader(d, off, off + size)
    (version,) = r.u("I")
    producer = r.string()
    target_arch, n_mod, n_kern, n_bind, n_mesh, n_ploc = r.u("IIIIII")
    modules = []
    for _ in range(n_mod):
        m = {
            "module_hash": r.string(),
            "module_name": r.string(),
            "binary_filename": r.string(),
            "target_arch": r.u("I")[0],
            "binary_digest": r.string(),
            "source_filename": r.string(),
            "source_digest": r.string(),
        }
        m["binary_kind"], m["fallback_reason"] = r.u("BB")
        recipe = r.take(16)
        m["compile_recipe"] = {
            "debug": recipe[0],
            "optimization_level": recipe[1],
            "verify_fp": recipe[2],
            "fast_math": recipe[3],
            "fuse_fp": recipe[4],
            "lineinfo": recipe[5],
            "arch_suffix": recipe[6],
        }
        modules.append(m)
    kernels = []
    for _ in range(n_kern):
        k = {
            "kernel_key": r.string(),
            "module_hash": r.string(),
            "forward_name": r.string(),
            "backward_name": r.string(),
        }
        k["forward_smem_bytes"], k["backward_smem_bytes"], k["block_dim"] = r.u("III")
        kernels.append(k)
    bindings = []
    for _ in range(n_bind):
        name = r.string()
        (rid,) = r.u("I")
        bindings.append({"name": name, "region_id": rid})
    meshes = []
    for _ in range(n_mesh):
        np_, nt, wn, bc, leaf, pr, ir, vr, orig = r.u("iiBBHIIIQ")
        meshes.append(
            {
                "num_points": np_,
                "num_tris": nt,
                "support_winding_number": wn,
                "bvh_constructor": bc,
                "bvh_leaf_size": leaf,
                "points_region_id": pr,
                "indices_region_id": ir,
                "velocities_region_id": vr,
                "original_ptr": orig,
            }
        )
    plocs = []
    for _ in range(n_ploc):
        rid, o, s, c = r.u("IQQQ")
        plocs.append({"region_id": rid, "offset": o, "stride": s, "count": c})
    if r.p != r.end:
        raise ValueError(f"{r.end - r.p} trailing metadata bytes")
    return {
        "version": version,
        "producer_version": producer,
        "target_arch": target_arch,
        "modules": modules,
        "kernels": kernels,
        "bindings": bindings,
        "meshes": meshes,
        "ptr_locations": plocs,
    }


def parse_memory(d: bytes, off: int, size: int) -> list:
    r = Reader(d, off, off + size)
    (count,) = r.u("I")
    regions = []
    for _ in range(count):
        rid, esize, rsize, has = r.u("IIQB")
        r.take(7)
        reg = {"region_id": rid, "element_size": esize, "size": rsize, "has_initial_data": has}
        if has:
            data = r.take(rsize)
            reg["data_offset_in_file"] = r.p - rsize
            reg["sha256"] = hashlib.sha256(data).hexdigest()
        regions.append(reg)
    return regions


def _fixed_fields(op_type: int, body: bytes) -> dict:
    """Decode the fixed part (after the 8-byte op header) of non-launch ops."""
    if op_type == 4:  # MEMCPY_D2D
        dr, sr, do, so, sz = struct.unpack_from("<iiQQQ", body)
        return {"dst_region_id": dr, "src_region_id": sr, "dst_offset": do, "src_offset": so, "size": sz}
    if op_type == 2:  # MEMCPY_H2D
        dr, _pad, do, sz = struct.unpack_from("<iIQQ", body)
        return {"dst_region_id": dr, "dst_offset": do, "size": sz, "inline_data_len": sz}
    if op_type == 5:  # MEMSET
        rid, val, o, sz = struct.unpack_from("<iiQQ", body)
        return {"region_id": rid, "value": val, "offset": o, "size": sz}
    if op_type == 10:  # MEMTILE
        rid, srcsize, o, cnt = struct.unpack_from("<iIQQ", body)
        return {"region_id": rid, "srcsize": srcsize, "offset": o, "count": cnt, "value_hex": body[24 : 24 + srcsize].hex()}
    if op_type == 6:  # ALLOC
        rid, _pad, sz = struct.unpack_from("<iIQ", body)
        return {"region_id": rid, "size": sz}
    if op_type == 9:  # SCAN
        dr, sr, do, so, ln, ins, outs, tl, dt, inc = struct.unpack_from("<iiQQIiiiBB", body)
        return {
            "dst_region_id": dr, "src_region_id": sr, "dst_offset": do, "src_offset": so, "length": ln,
            "in_stride": ins, "out_stride": outs, "type_len": tl, "dtype": dt, "inclusive": inc,
        }
    if op_type == 16:  # REDUCTION
        ar, br, orr, cnt, ao, bo, oo, ast, bst, tl, kind, dt = struct.unpack_from("<iiiIQQQiiiBB", body)
        return {
            "input_a_region_id": ar, "input_b_region_id": br, "output_region_id": orr, "count": cnt,
            "input_a_offset": ao, "input_b_offset": bo, "output_offset": oo, "input_a_stride": ast,
            "input_b_stride": bst, "type_len": tl, "kind": kind, "dtype": dt,
        }
    if op_type == 11:  # SEGMENTED_SORT
        kr, vr, sr, er, ko, vo, so, eo, cnt, ns, dt = struct.unpack_from("<iiiiQQQQIIB", body)
        return {
            "keys_region_id": kr, "values_region_id": vr, "segstart_region_id": sr, "segend_region_id": er,
            "keys_offset": ko, "values_offset": vo, "segstart_offset": so, "segend_offset": eo, "count": cnt,
            "num_segments": ns, "dtype": dt,
        }
    if op_type == 13:  # RUNLENGTH_ENCODE
        vr, rvr, rlr, rcr, vo, rvo, rlo, rco, cnt = struct.unpack_from("<iiiiQQQQI", body)
        return {
            "values_region_id": vr, "run_values_region_id": rvr, "run_lengths_region_id": rlr,
            "run_count_region_id": rcr, "values_offset": vo, "run_values_offset": rvo, "run_lengths_offset": rlo,
            "run_count_offset": rco, "value_count": cnt,
        }
    if op_type == 12:  # RADIX_SORT
        kr, vr, ko, vo, cnt, bb, eb, vs, dt = struct.unpack_from("<iiQQIiiiB", body)
        return {
            "keys_region_id": kr, "values_region_id": vr, "keys_offset": ko, "values_offset": vo, "count": cnt,
            "begin_bit": bb, "end_bit": eb, "value_size": vs, "dtype": dt,
        }
    return {"raw_hex": body.hex()}


def parse_ops(d: bytes, off: int, end: int, count: int) -> list:
    ops = []
    p = off
    for _ in range(count):
        op_type, total = struct.unpack_from("<II", d, p)
        if total < 8 or p + total > end:
            raise ValueError(f"bad op size {total} at {p}")
        op = {"op": OP_NAMES.get(op_type, str(op_type)), "op_type": op_type, "total_size": total, "stream_offset": p - off}
        body = d[p + 8 : p + total]
        if op_type == 1:
            (s0, s1, s2, s3, ndim, size, dim, max_blocks, block_dim, smem, grid_stride,
             is_fwd, cluster, _p1a, _p1b, klen, hlen, nparams, _pad2, nrelocs, vsize) = struct.unpack_from(
                "<4IiQQiiiiBBBBHHHHII", d, p + 8)
            q = p + 80
            key = d[q : q + klen].decode(); q += klen
            mhash = d[q : q + hlen].decode(); q += hlen
            nbind = nparams * (1 if is_fwd else 2)
            binds = []
            for _j in range(nbind):
                pi, nr, vo, vs, va = struct.unpack_from("<HHIII", d, q); q += 16
                binds.append({"param_index": pi, "num_relocs": nr, "value_offset": vo, "value_size": vs, "value_align": va})
            relocs = []
            for _j in range(nrelocs):
                vbo, rid, roff, kind = struct.unpack_from("<IiQB", d, q); q += 24
                relocs.append({"value_byte_offset": vbo, "region_id": rid, "region_offset": roff, "kind": RELOC_NAMES.get(kind, kind)})
            vdata = d[q : q + vsize]; q += vsize
            if q != p + total:
                raise ValueError("launch record size mismatch")
            op.update({
                "kernel_key": key, "module_hash": mhash, "shape": [s0, s1, s2, s3], "ndim": ndim, "size": size,
                "dim": dim, "max_blocks": max_blocks, "block_dim": block_dim, "smem_bytes": smem,
                "grid_stride": grid_stride, "is_forward": is_fwd, "cluster_dim": cluster,
                "num_params": nparams, "bindings": binds, "relocs": relocs, "value_data_hex": vdata.hex(),
            })
        elif op_type in (7, 8):
            cr, _pad, co, asz, acnt, bsz, bcnt = struct.unpack_from("<iIQIIII", body)
            a0 = p + 40
            op.update({
                "cond_region_id": cr, "cond_offset": co, "branch_a_size": asz, "branch_a_op_count": acnt,
                "branch_b_size": bsz, "branch_b_op_count": bcnt,
                "branch_a": parse_ops(d, a0, a0 + asz, acnt),
                "branch_b": parse_ops(d, a0 + asz, a0 + asz + bsz, bcnt),
            })
        else:
            op.update(_fixed_fields(op_type, body))
        ops.append(op)
        p += total
    return ops


def parse_wrp(path: str) -> dict:
    with open(path, "rb") as f:
        d = f.read()
    hdr = parse_header(d)
    out = {"file_size": len(d), "header": hdr}
    for s in hdr["sections"]:
        if s["type"] == 1:
            out["metadata"] = parse_metadata(d, s["offset"], s["size"])
        elif s["type"] == 2:
            out["memory"] = parse_memory(d, s["offset"], s["size"])
        elif s["type"] == 3:
            (count,) = struct.unpack_from("<I", d, s["offset"])
            out["operation_count"] = count
            out["operations"] = parse_ops(d, s["offset"] + 4, s["offset"] + s["size"], count)
    return out


if __name__ == "__main__":
    print(json.dumps(parse_wrp(sys.argv[1]), indent=1))
