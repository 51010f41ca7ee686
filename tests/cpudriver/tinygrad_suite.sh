#!/usr/bin/env bash
# tinygrad's own test modules on recap's CPU driver, one process per module, counted by pytest.
#
#   tests/cpudriver/tinygrad_suite.sh [--python PY] [--renderer R] [--devices N] TINYGRAD_DIR MODULE...
#
# TINYGRAD_DIR is a checkout of tinygrad (its `tinygrad/` package, `test/`, `examples/` and
# `extra/`, which some test modules import); MODULE a test file relative to it
# (test/backend/test_jit.py). Each module runs under `recap run --cpu` (the `recap` on PATH, or
# $RECAP) with DEV=CUDA (or DEV=CUDA:R, R=PTX for tinygrad's own PTX renderer instead of NVRTC),
# pytest's assertion rewriting off (Python 3.11's `ast` fails on tinygrad's deepest expressions
# with "AST constructor recursion depth mismatch" when it is on) and one line per module:
# `MODULE rc=N SECONDS pytest's summary`. PY is the Python with tinygrad's dependencies, pytest,
# hypothesis, nvidia-cuda-nvrtc and nvidia-cuda-runtime (python3 by default): NVRTC and the headers
# it needs come from those wheels. A kernel fault is the context's sticky error, as on a GPU: the
# tests after a faulting one in its module fail with the fault's status, so the faulting test's name
# (the first failure) is what to look at. --devices N reports N devices (`recap run --devices`):
# test/backend/test_multitensor.py uses CUDA:0 to CUDA:5.
set -euo pipefail

python=python3
renderer=
devices=1
while [ $# -gt 0 ]; do
    case "$1" in
        --python) python="$2"; shift ;;
        --renderer) renderer=":$2"; shift ;;
        --devices) devices="$2"; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "tinygrad_suite.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
    shift
done
if [ $# -lt 2 ]; then
    echo "tinygrad_suite.sh: a tinygrad checkout and at least one test module are needed (--help)" >&2
    exit 2
fi
dir="$(cd "$1" && pwd)"
# The modules run from the checkout: a relative path to the Python is taken from here first.
case "$python" in */*) python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")" ;; esac
shift
recap="${RECAP:-recap}"
cuda="$("$python" -c 'import nvidia.cu13 as m; print(list(m.__path__)[0])')"
logs="$(mktemp -d)"
cd "$dir"
for module in "$@"; do
    log="$logs/$(basename "$module" .py).log"
    start=$(date +%s)
    rc=0
    DEV="CUDA$renderer" NVRTC_PATH="$cuda/lib/libnvrtc.so.13" CUDA_PATH="$cuda" RECAP_CPU_LOG=1 \
        "$recap" run --cpu --devices "$devices" -- "$python" -m pytest -q -p no:cacheprovider --tb=line -rfE --assert=plain "$module" \
        >"$log" 2>&1 || rc=$?
    summary="$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1 || true)"
    echo "$module rc=$rc $(($(date +%s) - start))s ${summary:-no summary (see $log)}"
done
echo "logs: $logs"
