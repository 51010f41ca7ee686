#!/bin/sh
# Regions at their captured addresses on an H100/H200 machine: builds placed_pointers.cu with nvcc,
# captures it with `recap capture` (which must choose placement by itself), and replays the archive
# with --check on CUDA (graph and stream mode), in a CUDA session of a `recap serve` host (whose
# worker must start without address-space randomisation) and on the CPU (both engines); a CPU
# replay at fresh addresses must stop outside every region. Run from the repository root:
#   RECAP=.gpu/recap sh tests/capture/gpu/placed_pointers.sh [OUT_DIR]
# with librecap_intercept.so (and librecap_audit.so) beside the recap binary. Prints `placed: PASS`
# last, or the first step that failed.
set -eu
RECAP=${RECAP:-.gpu/recap}
OUT=${1:-/tmp/placed}
mkdir -p "$OUT"
here=$(dirname "$0")
step() { echo "== $*"; }
fail() { echo "placed: FAIL ($*)"; exit 1; }

step "build"
nvcc -O2 -arch=sm_90 -o "$OUT/placed_pointers" "$here/placed_pointers.cu" || fail "nvcc"
"$OUT/placed_pointers" || fail "the program on its own"

step "capture"
"$RECAP" capture --json -o "$OUT/placed.recap" -- "$OUT/placed_pointers" > "$OUT/report.txt" || fail "capture"
cat "$OUT/report.txt"
grep -q '"placement": ".*did not see' "$OUT/report.txt" || fail "the capture did not choose placement"
"$RECAP" inspect "$OUT/placed.recap" | grep -q 'capture.placement: captured' || fail "no capture.placement"

for mode in graph stream; do
  step "replay on CUDA, --mode $mode"
  "$RECAP" replay --device cuda --mode "$mode" --check "$OUT/placed.recap" || fail "CUDA $mode replay"
done
step "a CUDA session on a host"
port=18571
"$RECAP" serve --addr 127.0.0.1:$port --data "$OUT/data" > "$OUT/serve.log" 2>&1 &
host=$!
trap 'kill $host 2>/dev/null || true' EXIT
up=""
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/api/archives" > /dev/null && up=1 && break; sleep 0.1; done
[ -n "$up" ] || fail "the host did not start: $(tail -3 "$OUT/serve.log")"
json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
archive=$(curl -sf -H "content-type: application/octet-stream" --data-binary @"$OUT/placed.recap" "http://127.0.0.1:$port/api/archives?name=placed.recap" | json '["id"]')
session=$(curl -sf -H 'content-type: application/json' \
  -d "{\"archive\":\"$archive\",\"device\":\"cuda\",\"iterations\":3,\"check\":true}" \
  "http://127.0.0.1:$port/api/sessions" | json '["id"]')
state=""
for _ in $(seq 300); do
  state=$(curl -sf "http://127.0.0.1:$port/api/sessions/$session" | json '["state"]')
  [ "$state" = finished ] || [ "$state" = failed ] && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$port/api/sessions/$session"; echo
[ "$(curl -sf "http://127.0.0.1:$port/api/sessions/$session" | json '.get("passed")')" = True ] || fail "the host session ($state)"
kill $host

for engine in interp jit; do
  step "replay on the CPU, --engine $engine"
  "$RECAP" replay --engine "$engine" --check "$OUT/placed.recap" || fail "CPU $engine replay"
done

step "replay on the CPU at fresh addresses (must fail with an out-of-bounds read)"
if "$RECAP" replay --engine interp --placement fresh --check "$OUT/placed.recap" 2> "$OUT/fresh.err"; then
  fail "a fresh replay passed"
fi
cat "$OUT/fresh.err"
grep -q 'out-of-bounds' "$OUT/fresh.err" || fail "the fresh replay failed otherwise"

echo "placed: PASS"
