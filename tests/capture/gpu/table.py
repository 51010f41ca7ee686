"""The markdown table of docs/REAL-PROGRAMS.md from a run's results.jsonl (run_suite.sh writes it):
one row per program, sorted by name, a program's last line kept where a run wrote it twice.

    python3 tests/capture/gpu/table.py OUT/results.jsonl > table.md
"""
import json
import sys


def size(n):
    if n is None:
        return None
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}" if unit == "MiB" else f"{n // scale} KiB"
    return f"{n} B"


def main(path):
    rows = {}
    for line in open(path):
        line = line.strip()
        if line:
            r = json.loads(line)
            rows[r["program"]] = r
    print("| program | ops | kernels: PTX / machine code only | archive (with effects) | CUDA graph | CUDA stream "
          "| CPU | CPU with effects | CUDA graph with effects | first problem |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in sorted(rows):
        r = rows[name]
        if r.get("stage") != "done":
            print(f"| `{name}` | — | — | — | {r.get('stage')} | | | | | {r.get('errors', {})} |")
            continue
        archive = size(r.get("plain_bytes")) or "—"
        if r.get("effects_bytes"):
            archive += f" ({size(r['effects_bytes'])})"
        errors = r.get("errors") or {}
        # The CPU's own error matters only where the archive with effects did not pass either.
        keys = ["graph", "stream", "program", "cuda_effects"] + ([] if r.get("cpu_effects") == "PASS" else ["cpu_effects", "cpu"])
        first = next((errors[k] for k in keys if k in errors), "")
        first = first.replace("|", "\\|")[:170]
        cells = [r.get(k) or "—" for k in ("graph", "stream", "cpu", "cpu_effects", "cuda_effects")]
        stale = r.get("stale_effects")
        if stale and cells[3] in ("PASS", "FAIL"):
            # Recorded effects applied over inputs the CPU's own earlier results changed.
            cells[3] += f" ({stale['launches']} over other inputs, from op {stale['first']})"

        print(f"| `{name}` | {r['ops']} | {r['kernels_ptx']} / {r['kernels_no_ptx']} | {archive} | "
              + " | ".join(cells) + f" | {first} |")


if __name__ == "__main__":
    main(sys.argv[1])
