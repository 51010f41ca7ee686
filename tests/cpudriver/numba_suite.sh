#!/usr/bin/env bash
# numba-cuda's own test suites, counted the same way on recap's CPU driver and on a GPU.
#
#   tests/cpudriver/numba_suite.sh [--cpu] [--python PY] [--out DIR] [--timeout S] [--shard K/N] [SUITE...]
#
# SUITE is a package of numba.cuda.tests (cudadrv and cudapy by default). Each test module runs in
# a process of its own (numba_suite.py beside this script), and every test that fails or errs
# there, or that a crash of its module's process never reached, runs again alone in a fresh
# process, whose result is the one counted. A kernel fault is the context's sticky error on a GPU
# as on the CPU driver: without this, one faulting test fails every later test of its process, and
# the count would say more about test order than about the driver.
#
# --cpu runs every process under `recap run --cpu` (the `recap` on PATH, or $RECAP); without it
# the machine's own libcuda runs them (an H100/H200 machine). PY is the Python with numba-cuda
# (python3 by default). The per-module results (JSON lines), the failures grouped by cause
# (SUITE.failures.txt) and summary.txt go to DIR (numba-suite-out by default); the summary has one
# line per suite and the package versions the counts depend on, which must match between two runs
# for their counts to compare (pinned in docs/CPU-DRIVER.md, "numba-cuda"). --shard K/N runs only
# every Nth module from the Kth (1 to N), so that N runs with the same DIR share the work; the
# summary counts what DIR holds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
helper="$here/numba_suite.py"
python=python3
out=numba-suite-out
timeout_s=900
cpu=0
shard=1/1
suites=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) cpu=1 ;;
        --python) python="$2"; shift ;;
        --out) out="$2"; shift ;;
        --timeout) timeout_s="$2"; shift ;;
        --shard) shard="$2"; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        -*) echo "numba_suite.sh: unknown option $1" >&2; exit 2 ;;
        *) suites+=("$1") ;;
    esac
    shift
done
[ ${#suites[@]} -gt 0 ] || suites=(cudadrv cudapy)
shard_k="${shard%/*}"
shard_n="${shard#*/}"

runner=()
if [ "$cpu" = 1 ]; then
    runner=("${RECAP:-recap}" run --cpu --)
fi
mkdir -p "$out"

# One process of the helper, on the chosen driver, within the time limit.
helper_run() {
    timeout --kill-after=30 "$timeout_s" "${runner[@]}" "$python" "$helper" "$@"
}

for suite in "${suites[@]}"; do
    modules="$("$python" "$helper" modules "$suite")"
    index=0
    for module in $modules; do
        index=$((index + 1))
        [ $(((index - shard_k) % shard_n)) = 0 ] || continue
        results="$out/$module.jsonl"
        rm -f "$results"
        started=$SECONDS
        status=0
        helper_run run "$results" "$module" >"$out/$module.log" 2>&1 || status=$?
        again=()
        if [ "$status" != 0 ]; then
            # The process crashed or ran out of time: the tests it never reached run alone.
            mapfile -t again < <("$python" "$helper" missing "$results" "$module" 2>>"$out/$module.log" || true)
        fi
        mapfile -t -O "${#again[@]}" again < <("$python" "$helper" failed "$results")
        for id in "${again[@]}"; do
            [ -n "$id" ] || continue
            helper_run run-alone "$results" "$id" >>"$out/$module.log" 2>&1 || true
        done
        echo "$module: exit $status, ${#again[@]} run again alone, $((SECONDS - started)) s" >&2
    done
done

{
    for suite in "${suites[@]}"; do
        "$python" "$helper" summary "$out" "$suite"
    done
    if [ "$cpu" = 1 ]; then echo "driver: recap's CPU driver (recap run --cpu)"; else echo "driver: the machine's libcuda"; fi
    "${runner[@]}" "$python" "$helper" versions
} | tee "$out/summary.txt"
