#!/usr/bin/env bash
# The GPU check in one command (tools/gpu_check.py: what each step measures): every step in its own process under
# its own time limit, each writing $OUT/<step>.json as it goes, so a step cut off still reports what it finished.
# About 8 minutes on one H100 or H200, compiling included; the log goes to $OUT/gpu-check.txt too.
#   bash tools/gpu-check.sh              on a CUDA host (OUT: where the files go, default $TMPDIR/gpu-check;
#                                        PY: the interpreter, default python, else python3)
#   bash tools/gpu-check.sh --dry-run    the same steps on CPU, small: under 3 minutes (tests/test_gpu_check.py, CI)
# Exit status: 0 where every step finished and every check held, else 1.
set -u
cd "$(dirname "$0")/.."
PY=${PY:-$(command -v python || command -v python3)}
OUT=${OUT:-${TMPDIR:-/tmp}/gpu-check}
DRY=""
[ "${1:-}" = "--dry-run" ] && DRY="--dry-run"
mkdir -p "$OUT"
LOG="$OUT/gpu-check.txt"
: > "$LOG"
FAILED=0
step() {   # step NAME SECONDS (on a GPU) SECONDS (dry run)
  local name=$1 limit=$2
  [ -n "$DRY" ] && limit=$3
  echo "== $name (at most ${limit} s)" | tee -a "$LOG"
  timeout -k 10 "$limit" "$PY" -m tools.gpu_check --only "$name" --out "$OUT" $DRY 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc$([ "$rc" = 124 ] && echo ' (cut off at its limit)')" | tee -a "$LOG"
  [ "$rc" = 0 ] || FAILED=1
}
T0=$(date +%s)
if [ -z "$DRY" ]; then
  timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$LOG"
fi
#    name    GPU  dry   seconds. GPU: 8 minutes in all, reckoned from the 2026-12-04 H200 run (eager checks ~2 s each,
#                       a compile of the embedded model ~50 s); the 0.8B shape's graphs compile in decode, later steps
#                       load them from the cache. Dry: 1.5-2 minutes in all on 2 cores; the limits catch a hang.
step exact   130  60
step decode  130 120
step verify   45  30
step race    110  90
step memory   20  20
step page     40  45
echo "== summary ($(( $(date +%s) - T0 )) s in all)" | tee -a "$LOG"
"$PY" -m tools.gpu_check --summary --out "$OUT" 2>&1 | tee -a "$LOG"
echo "files: $OUT/*.json, log: $LOG"
exit $FAILED
