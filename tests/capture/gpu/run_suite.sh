#!/usr/bin/env bash
# The real-program suite on an H100/H200 machine: every program in this folder built (nvcc) or run
# (python3) under `recap capture`, then replayed with --check on CUDA (graph mode and stream mode) and
# on the CPU, each step under a time limit. Programs whose archive holds kernels without PTX are
# captured a second time with --record-effects, and that archive is the one the CPU replays. One
# results line per program goes to results.tsv and results.jsonl (the table of docs/REAL-PROGRAMS.md);
# each program's logs and archives stay in its own folder.
#
# Run from the repository root, with librecap_intercept.so and librecap_audit.so beside the recap
# binary:
#   RECAP=.gpu/bin/recap tests/capture/gpu/run_suite.sh OUT_DIR [PROGRAM...]
# Environment: JOBS (programs at a time, default 6), CAPTURE_LIMIT / GPU_LIMIT / CPU_LIMIT (seconds
# per capture, per CUDA replay, per CPU replay: 300, 120, 150), OLD_NUMPY (a folder holding a numpy
# that numba-cuda still runs with, put first on PYTHONPATH for the numba programs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
RECAP=$(realpath "${RECAP:-.gpu/bin/recap}")
JOBS=${JOBS:-6}
CAPTURE_LIMIT=${CAPTURE_LIMIT:-300}
GPU_LIMIT=${GPU_LIMIT:-120}
CPU_LIMIT=${CPU_LIMIT:-150}
export RECAP CAPTURE_LIMIT GPU_LIMIT CPU_LIMIT

# name | command (a .cu is built first and run from the build folder) | extra capture arguments
programs() {
  cat <<'EOF'
streams_graph|streams_graph.cu|
graph_nodes|graph_nodes.cu|
graph_conditional|graph_conditional.cu|
cluster_launch|cluster_launch.cu|
placed_pointers|placed_pointers.cu|
launch_overhead|launch_overhead.cu 20000 200|
constant_stencil|constant_stencil.cu|
curand_mc|curand_mc.cu|
thrust_cub|thrust_cub.cu|--repeat-range 3
cufft_conv|cufft_conv.cu|
cublas_mlp|cublas_mlp.cu|
torch_mlp|torch_mlp.py|
torch_graph|torch_graph.py|
torch_nvtx|torch_nvtx.py|--range nvtx:train_step
torch_adamw|torch_adamw.py|
torch_amp|torch_amp.py|
torch_sdpa|torch_sdpa.py|
torch_compile|torch_compile.py|
torch_compile_graphs|torch_compile_graphs.py|
torch_two_gpu|torch_two_gpu.py|
triton_seq|triton_seq.py|
triton_tma|triton_tma.py|
triton_layernorm|triton_layernorm.py|--repeat-range 3
triton_splitk|triton_splitk.py|--repeat-range 3
torch_scatter_add|torch_scatter_add.py|--repeat-range 3
cupy_atomics|cupy_atomics.py|--repeat-range 3
cupy_raw|cupy_raw.py|
cupy_kernels|cupy_kernels.py|
jax_jit|jax_jit.py|
jax_grad|jax_grad.py|
numba_kernels|numba_kernels.py|
numba_tiled|numba_tiled.py|
EOF
}

# nvcc flags beyond -O2 -arch=sm_90 -std=c++17, by program.
libs_of() {
  case "$1" in
    cufft_conv) echo -lcufft ;;
    cublas_mlp) echo -lcublas ;;
  esac
}

# One step under its time limit: its exit status, with 124 for a step stopped at the limit.
timed() {
  local limit=$1
  shift
  timeout --kill-after=10 "$limit" "$@"
}

# The verdict of a replay from its exit status and output: PASS, FAIL (the check found a region that
# differs), TIMEOUT, or ERROR (the replay stopped).
verdict() {
  local rc=$1 log=$2
  if [ "$rc" = 0 ]; then echo PASS
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo TIMEOUT
  elif grep -q '^FAIL\| FAIL ' "$log"; then echo FAIL
  else echo ERROR
  fi
}

# The first line that says what went wrong in a log: an error line, else a failed region.
first_error() {
  grep -m1 -iE '^(error|recap[a-z ]*: error)|error:|panicked|Traceback|^FAIL' "$1" 2>/dev/null | cut -c1-300
}

one() {
  local name=$1 cmd=$2 extra=$3 out=$4
  local d="$out/$name" start=$SECONDS
  mkdir -p "$d"
  local src=${cmd%% *} args=""
  [ "$src" != "$cmd" ] && args=${cmd#* }
  local run=()
  case "$src" in
    *.cu)
      # shellcheck disable=SC2046
      if ! timed 300 nvcc -O2 -arch=sm_90 -std=c++17 -I"$here" -o "$d/$name" "$here/$src" $(libs_of "$name") \
        > "$d/build.log" 2>&1; then
        record "$d" "$name" build "$(first_error "$d/build.log" || tail -1 "$d/build.log")" $((SECONDS - start))
        return
      fi
      # shellcheck disable=SC2206
      run=("$d/$name" $args)
      ;;
    numba_*.py)
      run=(env PYTHONPATH="${OLD_NUMPY:-}${PYTHONPATH:+:$PYTHONPATH}" python3 "$here/$src") ;;
    *.py)
      run=(python3 "$here/$src") ;;
  esac
  if [ "$name" = torch_two_gpu ] && [ "$(nvidia-smi -L | grep -c '^GPU')" -lt 2 ]; then
    record "$d" "$name" skipped "one GPU on this machine" $((SECONDS - start))
    return
  fi
  # shellcheck disable=SC2086
  timed "$CAPTURE_LIMIT" "$RECAP" capture $extra -o "$d/plain.recap" -- "${run[@]}" > "$d/capture.log" 2>&1
  echo "rc=$?" >> "$d/capture.log"
  if [ ! -s "$d/plain.recap" ]; then
    record "$d" "$name" capture "$(first_error "$d/capture.log" || tail -2 "$d/capture.log" | head -1)" $((SECONDS - start))
    return
  fi
  "$RECAP" inspect --json "$d/plain.recap" > "$d/inspect.jsonl" 2> "$d/inspect.err"
  local devices
  devices=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline()).get("devices", 1))' "$d/inspect.jsonl" 2>/dev/null || echo 1)
  local cuda=(--device cuda)
  [ "$devices" -gt 1 ] && cuda=(--devices "$(seq -s, -f 'cuda:%g' 0 $((devices - 1)))")
  for mode in graph stream; do
    timed "$GPU_LIMIT" "$RECAP" replay "${cuda[@]}" --mode "$mode" --check --quiet "$d/plain.recap" > "$d/$mode.log" 2>&1
    echo "$(verdict $? "$d/$mode.log")" > "$d/$mode.verdict"
  done
  timed "$CPU_LIMIT" "$RECAP" replay --check --quiet --threads 4 "$d/plain.recap" > "$d/cpu.log" 2>&1
  echo "$(verdict $? "$d/cpu.log")" > "$d/cpu.verdict"
  local no_ptx
  no_ptx=$(python3 -c '
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
bare = {r["id"] for r in rs if r["type"] == "module" and r["ptx_bytes"] == 0}
print(sum(1 for r in rs if r["type"] == "kernel" and r["module"] in bare))' "$d/inspect.jsonl" 2>/dev/null || echo 0)
  if [ "$no_ptx" -gt 0 ]; then
    # shellcheck disable=SC2086
    timed "$CAPTURE_LIMIT" "$RECAP" capture --record-effects $extra -o "$d/effects.recap" -- "${run[@]}" \
      > "$d/capture_effects.log" 2>&1
    echo "rc=$?" >> "$d/capture_effects.log"
    if [ -s "$d/effects.recap" ]; then
      timed "$CPU_LIMIT" "$RECAP" replay --check --quiet --threads 4 "$d/effects.recap" > "$d/cpu_effects.log" 2>&1
      echo "$(verdict $? "$d/cpu_effects.log")" > "$d/cpu_effects.verdict"
      # Recording effects changes how the program ran (graphs issued node by node, synchronised
      # launches), never what it computed: that archive must pass on CUDA as the plain one does.
      timed "$GPU_LIMIT" "$RECAP" replay "${cuda[@]}" --mode graph --check --quiet "$d/effects.recap" \
        > "$d/cuda_effects.log" 2>&1
      echo "$(verdict $? "$d/cuda_effects.log")" > "$d/cuda_effects.verdict"
    else
      echo "CAPTURE" > "$d/cpu_effects.verdict"
    fi
  fi
  # Where one engine reproduces the program and the other does not, name the first op whose writes
  # differ between the CPU and CUDA.
  local cpu_archive=plain cpu_verdict
  cpu_verdict=$(cat "$d/cpu.verdict")
  if [ -s "$d/effects.recap" ]; then
    cpu_archive=effects
    cpu_verdict=$(cat "$d/cpu_effects.verdict")
  fi
  local graph_verdict
  graph_verdict=$(cat "$d/graph.verdict")
  if [ "$devices" = 1 ] && { [ "$graph_verdict" = FAIL ] || { [ "$graph_verdict" = PASS ] && [ "$cpu_verdict" = FAIL ]; }; }; then
    timed "$CPU_LIMIT" "$RECAP" compare --devices cpu,cuda "$d/$cpu_archive.recap" > "$d/compare.log" 2>&1
  fi
  record "$d" "$name" done "" $((SECONDS - start))
}

# The program's results line, as JSON, into its folder (assembled into the tables at the end).
record() {
  python3 - "$@" <<'PY'
import json, os, re, sys
d, name, stage, note, seconds = sys.argv[1:6]
def read(f):
    p = os.path.join(d, f)
    return open(p, errors="replace").read().strip() if os.path.exists(p) else ""
def first_error(f):
    lines = read(f).splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback"):
            # Python's own error: the exception line that ends the traceback.
            rest = [l for l in lines[i + 1:] if l and not l[0].isspace() and not l.startswith("rc=")]
            return (rest[0] if rest else line)[:300]
        l = line.lower()
        if l.startswith(("error", "fail")) or "error:" in l or "panicked" in l:
            return line[:300]
    return ""
row = {"program": name, "stage": stage, "seconds": int(seconds)}
cap = read("capture.log")
row["capture_rc"] = cap.rsplit("rc=", 1)[-1] if "rc=" in cap else ""
# The program's own verdict: its "NAME: ok" line, or (for one that prints none) a clean exit.
row["program_ok"] = f"{name}: ok" in cap or row["capture_rc"] == "0"
header, modules, kernels = {}, {}, []
for line in read("inspect.jsonl").splitlines():
    r = json.loads(line)
    if r["type"] == "header": header = r
    elif r["type"] == "module": modules[r["id"]] = r
    elif r["type"] == "kernel": kernels.append(r)
with_ptx = sum(1 for k in kernels if modules.get(k["module"], {}).get("ptx_bytes", 0) > 0)
row.update(ops=header.get("ops"), kernels=len(kernels) if header else None,
           kernels_ptx=with_ptx if header else None,
           kernels_no_ptx=len(kernels) - with_ptx if header else None,
           regions=header.get("regions"), devices=header.get("devices", 1) if header else None)
for f in ("plain.recap", "effects.recap"):
    p = os.path.join(d, f)
    row[f.split(".")[0] + "_bytes"] = os.path.getsize(p) if os.path.exists(p) else None
for v in ("graph", "stream", "cpu", "cpu_effects", "cuda_effects"):
    row[v] = read(v + ".verdict") or None
# Recorded effects applied over inputs that differ (the CPU's own results of earlier ops differ).
m = re.search(r"(\d+) of them over inputs that differ from the captured ones, first op (\d+)(?: after op (\d+))?",
              read("cpu_effects.log"))
row["stale_effects"] = {"launches": int(m[1]), "first": int(m[2]), "after": m[3] and int(m[3])} if m else None
errors = {}
if stage != "done":
    errors["capture" if stage == "capture" else stage] = note
else:
    if not row["program_ok"]:
        errors["program"] = first_error("capture.log") or "no ok line from the program"
    for v in ("graph", "stream", "cpu", "cpu_effects", "cuda_effects"):
        if row[v] and row[v] != "PASS":
            errors[v] = first_error(v + ".log") or (read(v + ".log").splitlines() or [""])[-1][:300]
    if row["cpu_effects"] == "CAPTURE":
        errors["cpu_effects"] = first_error("capture_effects.log")
row["errors"] = errors
row["compare"] = " / ".join(read("compare.log").splitlines()[:3])[:400] or None
json.dump(row, open(os.path.join(d, "result.json"), "w"))
print(f"{name}: {stage} in {seconds}s graph={row['graph']} stream={row['stream']} cpu={row['cpu']} "
      f"cpu_effects={row['cpu_effects']} cuda_effects={row['cuda_effects']} {next(iter(errors.values()), '')[:160]}", flush=True)
PY
}

if [ "${1:-}" = --one ]; then
  shift
  one "$@"
  exit 0
fi

out=$(mkdir -p "${1:?usage: run_suite.sh OUT_DIR [PROGRAM...]}" && cd "$1" && pwd)
shift
only=" $* "
export -f one record verdict first_error timed libs_of
export here
echo "recap: $("$RECAP" --version 2>&1 | head -1); nvcc: $(nvcc --version | tail -2 | head -1)"
nvidia-smi -L
# Longest first, so that the slow captures start at once.
programs | sort -t'|' -k1,1 | awk -F'|' '/^torch_compile|^thrust|^jax|^torch_sdpa/ {print "0|" $0; next} {print "1|" $0}' |
  sort -s -t'|' -k1,1 | cut -d'|' -f2- |
  while IFS='|' read -r name cmd extra; do
    if [ "$only" = "  " ] || [[ "$only" == *" $name "* ]]; then printf '%s\0%s\0%s\0' "$name" "$cmd" "$extra"; fi
  done |
  xargs -0 -n3 -P "$JOBS" bash -c 'one "$0" "$1" "$2" "'"$out"'"'

python3 - "$out" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
rows = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "*", "result.json")))]
with open(os.path.join(out, "results.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
cols = ["program", "stage", "program_ok", "ops", "kernels", "kernels_ptx", "kernels_no_ptx", "plain_bytes",
        "effects_bytes", "graph", "stream", "cpu", "cpu_effects", "cuda_effects", "seconds"]
with open(os.path.join(out, "results.tsv"), "w") as f:
    f.write("\t".join(cols + ["first_error"]) + "\n")
    for r in rows:
        err = "; ".join(f"{k}: {v}" for k, v in r["errors"].items())
        f.write("\t".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + "\t" + err.replace("\t", " ") + "\n")
print(open(os.path.join(out, "results.tsv")).read())
PY
